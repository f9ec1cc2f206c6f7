// The agent's BGP session report writer (src/agent/announcer/bgp/report.ts) against a real kube-apiserver: a
// flapping session's report is coalesced (at most about one write a second, the last state always the one on the
// Node), an unchanged report is not written again, and remove() takes the annotation away.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitForEqual } from "../../localcluster/wait.ts";
import { MIN_WRITE_INTERVAL_MS, sessionReportWriter } from "../../src/agent/announcer/bgp/report.ts";
import { SESSIONS_ANNOTATION, type SessionState, sessionReportText } from "../../src/bgppeers/sessions.ts";
import { createLogger } from "../../src/cli/log.ts";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";

let plane: ControlPlane | undefined;
after(() => plane?.stop());

test("the session report: coalesced while a session flaps, the last state written, removed at stop", async () => {
  plane = await startControlPlane();
  const nodes = new Resource<Node>(plane.admin, NODE_RESOURCE);
  await nodes.create({ metadata: { name: "node-a", annotations: { "example.com/kept": "yes" } } });
  let writes = 0;
  const counted: Pick<Resource<Node>, "patch"> = {
    patch: (...args: Parameters<Resource<Node>["patch"]>) => {
      writes++;
      return nodes.patch(...args);
    },
  };
  const log = createLogger({ verbosity: 0, format: "json", write: () => {} });
  const writer = sessionReportWriter({ nodes: counted, node: "node-a", current: undefined, log });
  const onNode = async () => (await nodes.get("node-a")).metadata?.annotations?.[SESSIONS_ANNOTATION] ?? null;
  const text = (state: SessionState) => sessionReportText({ "tor-a": state });

  writer.set(text("Connect"));
  await waitForEqual("the first report", onNode, text("Connect"), 30_000);
  assert.equal(writes, 1);

  // 40 transitions over some 2 s: a write per transition would be 40.
  const started = Date.now();
  const flaps: SessionState[] = ["Idle", "Connect", "OpenSent", "OpenConfirm", "Established"];
  for (let i = 0; i < 40; i++) {
    writer.set(text(flaps[i % flaps.length]!));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  writer.set(text("Established"));
  await waitForEqual("the last state", onNode, text("Established"), 30_000);
  const seconds = (Date.now() - started) / MIN_WRITE_INTERVAL_MS;
  assert.ok(writes - 1 <= Math.ceil(seconds) + 1, `${writes - 1} writes in ${seconds.toFixed(1)} s of flapping`);
  const after = writes;
  writer.set(text("Established"));
  await new Promise((resolve) => setTimeout(resolve, 2 * MIN_WRITE_INTERVAL_MS));
  assert.equal(writes, after, "the same report is not written again");

  await writer.remove();
  assert.equal(await onNode(), null);
  const kept = (await nodes.get("node-a")).metadata?.annotations?.["example.com/kept"];
  assert.equal(kept, "yes", "the Node's other annotations are left alone");
});
