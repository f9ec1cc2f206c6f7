// The agent's loop against fakes of its adapters (kernel, API, events): triggers during a reconcile coalesce into
// one more, reconciles never overlap, a failed one is retried with backoff, and nothing runs after stop().
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { waitFor } from "../../localcluster/wait.ts";
import { createLogger } from "../cli/log.ts";
import { Registry } from "../cli/metrics.ts";
import { ApiError } from "../kube/errors.ts";
import type { EventRecorder } from "../kube/events.ts";
import type { Resource } from "../kube/resource.ts";
import type { Netlink } from "../net/netlink.ts";
import { Agent } from "./agent.ts";
import { createAgentMetrics } from "./metrics.ts";

const NODE: Node = {
  metadata: { name: "n1", resourceVersion: "1" },
  status: { addresses: [{ type: "ExternalIP", address: "198.18.0.7" }] },
};

/** An agent whose detection waits in the kernel fake until released, and whose API answers `get`. */
function harness(get: () => Promise<Node>) {
  const detections: (() => void)[] = [];
  let inFlight = 0;
  let most = 0;
  const logs: string[] = [];
  const netlink: Netlink = {
    routeSource: () =>
      new Promise((resolve) => {
        most = Math.max(most, ++inFlight);
        detections.push(() => {
          inFlight--;
          resolve("198.18.0.7");
        });
      }),
    listAddresses: async () => [],
    listLinks: async () => [],
    listDefaultGateways: async () => [],
    watchChanges: () => ({ close() {} }),
    close() {},
  };
  const registry = new Registry();
  const agent = new Agent(
    {
      nodeName: "n1",
      detection: { external: { kind: "target", targets: ["198.51.100.1"] } },
      removeTaint: true,
      requireLocalNode: false,
    },
    {
      nodes: { get } as unknown as Resource<Node>,
      netlink,
      events: { record() {} } as unknown as EventRecorder,
      log: createLogger({ verbosity: 0, format: "text", write: (line) => logs.push(line) }),
      metrics: createAgentMetrics(registry),
    },
  );
  return { agent, detections, logs, registry, most: () => most };
}

/** Releases detections one at a time until `count` have run. */
async function release(detections: (() => void)[], count: number): Promise<void> {
  for (let released = 0; released < count; released++) {
    await waitFor(`detection ${released + 1}`, () => detections.length > released);
    detections[released]?.();
  }
}

test("triggers during a reconcile run one more after it, never two at once", async () => {
  const h = harness(async () => NODE);
  const cached = () => NODE;
  h.agent.trigger(cached);
  await waitFor("the first detection", () => h.detections.length === 1);
  for (let i = 0; i < 5; i++) h.agent.trigger(cached);
  await release(h.detections, 2);
  await waitFor("the second reconcile's result", () => h.registry.expose().includes('result="ok"} 2'));
  await h.agent.stop();
  assert.equal(h.detections.length, 2, "five triggers during one reconcile: one more, not five");
  assert.equal(h.most(), 1);
  assert.equal(h.agent.lastError, undefined);
});

test("a failed reconcile is retried with backoff until it succeeds; nothing runs after stop()", async () => {
  let failures = 2;
  const h = harness(async () => {
    if (failures-- > 0) throw new ApiError(503, undefined, "get nodes/n1");
    return NODE;
  });
  h.agent.trigger(() => undefined); // no cached copy: the agent reads the Node
  await release(h.detections, 1);
  await waitFor("the first failure", () => h.agent.lastError !== undefined);
  assert.match(h.logs[0] ?? "", /^E.* reconcile failed node=n1 reason=ServiceUnavailable err=.* retryInMs=\d+$/);
  await release(h.detections, 3);
  await waitFor("the third attempt's success", () => h.agent.lastResult !== undefined);
  assert.equal(h.agent.lastError, undefined);
  assert.equal(h.logs.filter((line) => line.includes("reconcile failed")).length, 2);

  await h.agent.stop();
  h.agent.trigger(() => NODE);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(h.detections.length, 3, "nothing runs after stop()");
});
