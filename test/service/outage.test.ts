// The service controller's guard against a mass Ready=Unknown (src/service/outage.ts) against a real kube-apiserver:
// the Nodes' Ready flipped one write at a time as kube-controller-manager marks them after an API outage, and back as
// their kubelets correct it, while an informer records every ingress the Service ever had. A world of its own: the
// guard counts every Node of the cluster, so no other test's Nodes may be there. Five nodes: a-d carry the Service,
// e registered Unknown (it never carried anything, and counts). Last, a controller started amid the Unknown.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { Informer } from "../../src/kube/informer.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import { sleep } from "../../src/time/backoff.ts";
import { type RunningController, type ServiceWorld, startServiceWorld } from "./world.ts";

const WAIT_MS = 60_000;
/** Short, so that a case outlasts it: the mass rule, not the grace, is what holds then. */
const GRACE_MS = 2000;
const CARRIERS = ["a", "b", "c", "d"];
const ALL = ["10.3.0.1", "10.3.0.2", "10.3.0.3", "10.3.0.4"];

let world: ServiceWorld;
let running: RunningController;
let namespace: string;
/** Every ingress the Service had, in order, as the watch delivered it. */
const seen: string[][] = [];
let watcher: Informer<Service>;

const ingressOf = (service: Service) => (service.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ip ?? "");
const current = () => seen.at(-1) ?? [];
const held = (rule: string) =>
  Number(new RegExp(`unknown_nodes_held\\{rule="${rule}"\\} (\\d+)`).exec(running.registry.expose())?.[1] ?? NaN);

before(async () => {
  world = await startServiceWorld();
  for (const [index, name] of CARRIERS.entries())
    await world.addNode(name, { addresses: [{ type: "InternalIP", address: `10.3.0.${index + 1}` }] });
  await world.addNode("e", { addresses: [{ type: "InternalIP", address: "10.3.0.5" }], ready: "Unknown" });
  namespace = await world.namespace();
  watcher = new Informer(new Resource<Service>(world.plane.admin, { ...SERVICE_RESOURCE, namespace }));
  watcher.addHandlers({
    onAdd: (service) => seen.push(ingressOf(service)),
    onUpdate: (_, service) => seen.push(ingressOf(service)),
  });
  watcher.start();
  running = await world.startController({ config: { unknownGuard: { threshold: 0.55, graceMs: GRACE_MS } } });
  await world.services(namespace).create({
    metadata: { name: "web" },
    spec: { type: "LoadBalancer", loadBalancerClass: NODE_ADDRESS_CLASS, ports: [{ port: 80, protocol: "TCP" }] },
  });
  await waitForEqual("the Service on a-d", async () => current(), ALL, WAIT_MS);
});
after(async () => {
  await watcher?.stop();
  await world?.stop();
});

/** The ingress entries seen since `from` (an index into `seen`). */
const since = (from: number) => seen.slice(from);

describe("service controller: Ready=Unknown on many Nodes at once is no news", () => {
  test("all nodes marked Unknown one at a time, held past the grace, Ready again: the ingress never shrank", async () => {
    const from = seen.length;
    for (const node of CARRIERS) await world.setReady(node, "Unknown");
    await waitFor("the mass Unknown held", () => held("mass-unknown") === 4, WAIT_MS);
    // Three graces with every node Unknown: only the mass rule can hold them now.
    await sleep(3 * GRACE_MS);
    assert.equal(held("mass-unknown"), 4);
    // Back one at a time: the fraction falls below the threshold at c, and d has a grace from then.
    for (const node of CARRIERS) await world.setReady(node, "True");
    await waitFor("nothing held", () => held("mass-unknown") + held("grace") === 0, WAIT_MS);
    await running.controller.idle();
    assert.deepEqual(since(from).filter((ingress) => ingress.length < ALL.length), [], "the ingress shrank");
    assert.deepEqual(current(), ALL);
  });

  test("one node Unknown, the others Ready: it leaves after its grace; only a node that carried is held", async () => {
    const turnedAt = Date.now();
    await world.setReady("d", "Unknown");
    await waitForEqual("d out of the ingress", async () => current(), ALL.slice(0, 3), WAIT_MS);
    assert.ok(Date.now() - turnedAt >= GRACE_MS, `d left after ${Date.now() - turnedAt} ms, within its grace`);
    // Now a mass Unknown (a-c, d and e: all five): d, dropped before, and e, never eligible, do not come back.
    const from = seen.length;
    for (const node of CARRIERS.slice(0, 3)) await world.setReady(node, "Unknown");
    await waitFor("the mass Unknown held", () => held("mass-unknown") === 3, WAIT_MS);
    await sleep(2 * GRACE_MS);
    await running.controller.idle();
    assert.deepEqual(since(from).filter((ingress) => ingress.join() !== ALL.slice(0, 3).join()), []);
    for (const node of CARRIERS) await world.setReady(node, "True");
    await waitForEqual("d back", async () => current(), ALL, WAIT_MS);
  });

  test("Ready False is kubelet's own word: the node leaves at once, mass Unknown or not", async () => {
    for (const node of CARRIERS.slice(0, 3)) await world.setReady(node, "Unknown");
    await waitFor("the mass Unknown held", () => held("mass-unknown") === 3, WAIT_MS);
    await world.setReady("a", "False");
    await waitForEqual("a out of the ingress", async () => current(), ALL.slice(1), WAIT_MS);
    for (const node of CARRIERS) await world.setReady(node, "True");
    await waitForEqual("every node back", async () => current(), ALL, WAIT_MS);
  });

  test("a controller started while the Nodes are Unknown holds those its predecessor's ingress has, adds none", async () => {
    // Its pod moved during the outage: it never saw a-d carry. The ingress written before says they did; e, Unknown
    // too, is not in it and stays out.
    await running.stop();
    const from = seen.length;
    for (const node of CARRIERS) await world.setReady(node, "Unknown");
    running = await world.startController({ config: { unknownGuard: { threshold: 0.55, graceMs: GRACE_MS } } });
    await waitFor("the mass Unknown held", () => held("mass-unknown") === 4, WAIT_MS);
    await sleep(2 * GRACE_MS);
    await running.controller.idle();
    assert.deepEqual(since(from).filter((ingress) => ingress.join() !== ALL.join()), [], "the ingress changed");
    for (const node of CARRIERS) await world.setReady(node, "True");
    await waitFor("nothing held", () => held("mass-unknown") + held("grace") === 0, WAIT_MS);
    await running.controller.idle();
    assert.deepEqual(current(), ALL);
  });
});
