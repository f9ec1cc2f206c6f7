// The method-neutral announcing loop (src/agent/announcer/announcing.ts) against a real kube-apiserver, a recording
// method in place of ARP/NDP or BGP: the loop watches only the Services the method names, hands it on each change
// what this node must announce (the method's rule, then the shared ones), runs it only while the method selects the
// node, stops it when the node is no longer selected and when the loop stops, and clears leftovers on a node never
// selected.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { announceWhileSelected } from "../../src/agent/announcer/announcing.ts";
import { decideSelection, SELECTION_RULES } from "../../src/agent/announcer/arp-ndp/selection.ts";
import type { Desired } from "../../src/agent/announcer/desired.ts";
import type { MethodDefinition } from "../../src/agent/announcer/method.ts";
import { createMetrics } from "../../src/agent/metrics.ts";
import { createLogger } from "../../src/cli/log.ts";
import { parseLabelSelector } from "../../src/kube/labelselector.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";

const WAIT_MS = 60_000;
const MINE = "loop-test.local-ccm.io/mine";
let plane: ControlPlane | undefined;
after(() => plane?.stop());

/** A method that records what the loop asks of it. */
function recordingMethod() {
  const calls: string[] = [];
  let last: Desired | undefined;
  const method: MethodDefinition<"not-mine"> = {
    name: "test",
    watch: { labelSelector: "loop-test=node-a", annotations: [MINE] },
    select: (labels) => decideSelection(parseLabelSelector("role=edge"), labels),
    selectionRules: SELECTION_RULES,
    refuse: (service) =>
      service.metadata?.annotations?.[MINE] === "yes" ? undefined : { rule: "not-mine", reason: "not this node's" },
    async start() {
      calls.push("start");
      return {
        apply: (desired) => void (last = desired),
        stop: async () => void calls.push("stop"),
      };
    },
    clearLeftovers: async () => void calls.push("clear"),
  };
  /** The last set handed over, sorted for comparison. */
  const seen = async () => ({
    addresses: (last?.addresses ?? []).map(({ address, services }) => [address, [...services].sort()]).sort(),
    skipped: (last?.skipped ?? []).map(({ service, rule }) => [service, rule]).sort(),
  });
  return { calls, method, seen };
}

test("the loop hands the method what its watch shows, only while the node is selected", async () => {
  plane = await startControlPlane();
  const services = new Resource<Service>(plane.admin, { ...SERVICE_RESOURCE, namespace: "default" });
  const create = async (name: string, labelled: boolean, mine: boolean, ips: string[]) => {
    const metadata = {
      name,
      namespace: "default",
      labels: labelled ? { "loop-test": "node-a" } : ({} as Record<string, string>),
      annotations: { [MINE]: mine ? "yes" : "no" },
    };
    await services.create({ metadata, spec: { type: "LoadBalancer", ports: [{ port: 80 }] } });
    const ingress = ips.map((ip) => ({ ip, ipMode: "VIP" }));
    await services.patch(name, "merge", { status: { loadBalancer: { ingress } } }, { subresource: "status" });
  };
  const log = createLogger({ verbosity: 0, format: "text", write: () => {} });
  const options = (node: string, method: MethodDefinition) => ({
    client: plane!.admin,
    node,
    log,
    selection: createMetrics().announcer.selection,
    method,
  });

  const a = recordingMethod();
  let labels: Record<string, string> | undefined = { role: "edge" };
  const loop = announceWhileSelected(options("node-a", a.method), () => labels);
  const b = recordingMethod();
  const other = announceWhileSelected(options("node-b", b.method), () => ({ role: "core" }));
  try {
    await waitFor("node-a's method started", () => a.calls.includes("start"), WAIT_MS);
    await create("web", true, true, ["198.51.100.7", "2001:db8:5::7"]);
    await create("shared", true, true, ["198.51.100.7"]);
    await create("theirs", true, false, ["198.51.100.9"]);
    await create("unwatched", false, true, ["198.51.100.10"]);
    const first = {
      addresses: [
        ["198.51.100.7", ["default/shared", "default/web"]],
        ["2001:db8:5::7", ["default/web"]],
      ],
      skipped: [["default/theirs", "not-mine"]],
    };
    await waitForEqual("the set handed over", a.seen, first, WAIT_MS);
    await services.delete("web");
    const afterDelete = {
      addresses: [["198.51.100.7", ["default/shared"]]],
      skipped: [["default/theirs", "not-mine"]],
    };
    await waitForEqual("the set after a deletion", a.seen, afterDelete, WAIT_MS);

    labels = { role: "core" };
    loop.update();
    await waitFor("stopped once not selected", () => a.calls.includes("stop"), WAIT_MS);
    labels = { role: "edge" };
    loop.update();
    const starts = () => a.calls.filter((call) => call === "start").length;
    await waitFor("started again once selected", () => starts() === 2, WAIT_MS);
    await waitForEqual("the set handed over again", a.seen, afterDelete, WAIT_MS);
    await loop.stop();
    assert.deepEqual(a.calls, ["start", "stop", "start", "stop"], "no leftovers cleared on a node that announced");

    await waitFor("node-b's leftovers cleared", () => b.calls.includes("clear"), WAIT_MS);
    assert.deepEqual(b.calls, ["clear"], "a node never selected starts nothing");
  } finally {
    await loop.stop();
    await other.stop();
  }
});
