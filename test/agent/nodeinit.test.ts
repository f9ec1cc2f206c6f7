// Node init rules end to end: the agent in a node's network namespace with a Pod-bound token, against the
// real control plane under the RBAC and the node-scope policy the chart renders for the same rules. The
// labels and taints arrive in the write that removes the uninitialized taint, and never again.
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Event, Node } from "kubernetes-types/core/v1.js";
import { isUninitialized } from "../../src/kube/nodes.ts";
import { Resource } from "../../src/kube/resource.ts";
import { helmTemplate } from "../../scripts/render-manifests.ts";
import { type NodeHost, registerNode, startAgent, startWorld, type World } from "./harness.ts";

const LABEL_RULES = [
  "cidr:198.18.100.0/26=example.com/rack=r1",
  "name:^gpu-([a-z]+)-=node-role.kubernetes.io/gpu=$1",
  String.raw`zone:^rack-(\d)$=example.com/rack-number=$1`, // the zone the --zone-rules below give
];
const TAINT_RULES = ["name:^gpu-=nvidia.com/gpu=present:NoSchedule", "dmi.sys_vendor:.=example.com/dmi=seen:NoSchedule"];
const ARGS = [
  "--external-ip-target=", // air-gapped: no ExternalIP to look for
  "--zone-rules=cidr:198.18.100.0/26=rack-1",
  `--node-label-rules=${LABEL_RULES.join(",")}`,
  `--node-taint-rules=${TAINT_RULES.join(",")}`,
];
const GPU_TAINT = { key: "nvidia.com/gpu", value: "present", effect: "NoSchedule" };

/** The labels and taints the rules could give, as "key=value" and "key=value:effect". */
function initOf(node: Node): { labels: string[]; taints: string[] } {
  const labels = Object.entries(node.metadata?.labels ?? {})
    .filter(([key]) => key.startsWith("example.com/") || key.startsWith("node-role.kubernetes.io/"))
    .map(([key, value]) => `${key}=${value}`);
  const taints = (node.spec?.taints ?? [])
    .filter((taint) => !taint.key.includes("kubernetes.io/"))
    .map((taint) => `${taint.key}=${taint.value ?? ""}:${taint.effect}`);
  return { labels: labels.sort(), taints };
}

describe("node init rules", () => {
  let world: World;
  let events: Resource<Event>;
  let slot = 10;
  const nodeHost = () => world.nodeHost(slot++, { airGapped: true });

  before(async () => {
    world = await startWorld();
    const policy = await helmTemplate(world.plane.binaries.helm, [
      "--show-only=templates/node-scope-policy.yaml",
      `--set=metadata.nodeLabelRules={${LABEL_RULES.join(",")}}`,
      `--set=metadata.nodeTaintRules={${TAINT_RULES.join(",")}}`,
    ]);
    const file = path.join(world.plane.dir, "node-scope-policy.yaml");
    await writeFile(file, policy);
    await world.plane.kubectl(["apply", "-f", file]);
    events = new Resource<Event>(world.plane.admin, { group: "", version: "v1", plural: "events", namespace: "default" });
  });
  after(async () => {
    await world?.stop();
  });

  async function runOnce(node: NodeHost, name: string): Promise<{ code: number | null; output: string }> {
    const kubeconfig = await world.podBoundKubeconfig(node, name);
    const agent = startAgent(node, [`--node-name=${name}`, "--run-once", ...ARGS], { kubeconfig });
    const guard = setTimeout(() => void agent.stop(), 30_000);
    const code = await agent.exited;
    clearTimeout(guard);
    return { code, output: agent.output() };
  }

  test("labels and taints in the write that removes the uninitialized taint; a value kubelet set is kept", async () => {
    const node = await nodeHost();
    const name = "gpu-fra-1";
    // kubelet --node-labels set the rack: the rule's r1 does not replace it.
    const registered = await registerNode(world.nodes, name, "198.18.100.20", { on: node, labels: { "example.com/rack": "ops" } });
    const result = await runOnce(node, name);
    assert.equal(result.code, 0, result.output);

    // Every state the watch saw: the taint and no init labels, then all of them without the taint.
    const states: Node[] = [];
    const rv = registered.metadata?.resourceVersion;
    for await (const event of world.nodes.watch({ fieldSelector: `metadata.name=${name}`, resourceVersion: rv, timeoutSeconds: 30 })) {
      if (event.type !== "MODIFIED") continue;
      states.push(event.object);
      if (!isUninitialized(event.object)) break;
    }
    for (const state of states.slice(0, -1))
      assert.deepEqual(initOf(state), { labels: ["example.com/rack=ops"], taints: [] }, "nothing before the taint goes");
    const initialised = states.at(-1) as Node;
    assert.equal(isUninitialized(initialised), false);
    // This machine has no DMI (no /sys/class/dmi/id): the dmi.sys_vendor rule matches nothing.
    assert.deepEqual(initOf(initialised), {
      labels: ["example.com/rack-number=1", "example.com/rack=ops", "node-role.kubernetes.io/gpu=fra"],
      taints: ["nvidia.com/gpu=present:NoSchedule"],
    });
    const messages = (await events.list({ fieldSelector: `involvedObject.name=${name}` })).items.map(
      (e) => `${e.reason}: ${e.message}`,
    );
    assert.ok(
      messages.includes(
        "MetadataSet: Set topology.kubernetes.io/zone=rack-1, " +
          "label node-role.kubernetes.io/gpu=fra (rule name:^gpu-([a-z]+)-=node-role.kubernetes.io/gpu=$1), " +
          String.raw`label example.com/rack-number=1 (rule zone:^rack-(\d)$=example.com/rack-number=$1), ` +
          "taint nvidia.com/gpu=present:NoSchedule (rule name:^gpu-=nvidia.com/gpu=present:NoSchedule)",
      ),
      messages.join("\n"),
    );
    assert.ok(
      messages.includes(
        "NodeInitLabelKept: example.com/rack is ops (set by kubelet or a person), rule cidr:198.18.100.0/26=example.com/rack=r1 gives r1: kept",
      ),
      messages.join("\n"),
    );

    // Never again: what a person removes after initialisation stays removed.
    const taints = initialised.spec?.taints?.filter((taint) => taint.key !== GPU_TAINT.key) ?? [];
    await world.nodes.patch(name, "merge", { metadata: { labels: { "node-role.kubernetes.io/gpu": null } }, spec: { taints } });
    const again = await runOnce(node, name);
    assert.equal(again.code, 0, again.output);
    assert.deepEqual(initOf(await world.nodes.get(name)), {
      labels: ["example.com/rack-number=1", "example.com/rack=ops"],
      taints: [],
    });
  });

  test("a node no rule matches is initialised without them", async () => {
    const node = await nodeHost();
    const name = "cpu-1";
    await registerNode(world.nodes, name, "198.18.100.200", { on: node });
    const result = await runOnce(node, name);
    assert.equal(result.code, 0, result.output);
    const after = await world.nodes.get(name);
    assert.equal(isUninitialized(after), false);
    assert.deepEqual(initOf(after), { labels: [], taints: [] });
  });
});
