// The service controller against a real kube-apiserver, on real informers: which nodes' addresses a Service
// gets, which Services it touches, its refusals, the finalizer's lifecycle, and that it writes only what differs
// and only while leading. Each test's Services pick their test's nodes with the node selector annotation, so the
// Nodes of one test never reach another's Services.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service, ServicePort } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { Informer } from "../../src/kube/informer.ts";
import { Resource } from "../../src/kube/resource.ts";
import { SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { SERVICE_NAME_LABEL } from "../../src/loadbalancer/endpoints.ts";
import { AUTOSCALER_TAINT, EXCLUDE_LABEL } from "../../src/loadbalancer/nodes.ts";
import { LB_FINALIZER, NODE_SELECTOR_ANNOTATION } from "../../src/loadbalancer/service.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import { type NodeSpec, type RunningController, type ServiceWorld, startServiceWorld } from "./world.ts";

const WAIT_MS = 60_000;

let world: ServiceWorld;
before(async () => {
  world = await startServiceWorld();
});
after(async () => {
  await world?.stop();
});

let groups = 0;

/** A test's own nodes (labelled with its group) and namespace. */
async function group(nodes: Record<string, Omit<NodeSpec, "labels"> & { labels?: Record<string, string> }>) {
  const id = `g${++groups}`;
  for (const [name, spec] of Object.entries(nodes))
    await world.addNode(`${id}-${name}`, { ...spec, labels: { "test-group": id, ...spec.labels } });
  const namespace = await world.namespace();
  const services = world.services(namespace);
  return {
    id,
    namespace,
    services,
    node: (name: string) => `${id}-${name}`,
    /** A LoadBalancer Service of ours (unless `spec` says otherwise) on this group's nodes. */
    create: (name: string, spec: Partial<Service["spec"]> & { ports?: ServicePort[] } = {}) =>
      services.create({
        metadata: { name, annotations: { [NODE_SELECTOR_ANNOTATION]: `test-group=${id}` } },
        spec: { type: "LoadBalancer", loadBalancerClass: NODE_ADDRESS_CLASS, ports: [HTTP], ...spec },
      }),
    ingress: async (name: string) =>
      ((await services.get(name)).status?.loadBalancer?.ingress ?? []).map(({ ip, ipMode }) => `${ip} ${ipMode}`),
    finalizers: async (name: string) => (await services.get(name)).metadata?.finalizers ?? [],
  };
}

const HTTP: ServicePort = { port: 80, protocol: "TCP" };
const internal = (address: string) => ({ type: "InternalIP", address });
const external = (address: string) => ({ type: "ExternalIP", address });

const until = <T>(what: string, read: () => Promise<T>, expected: T) =>
  waitForEqual(what, read, expected, WAIT_MS);

async function withController<T>(
  options: Parameters<ServiceWorld["startController"]>[0],
  body: (running: RunningController) => Promise<T>,
): Promise<T> {
  const running = await world.startController(options);
  try {
    return await body(running);
  } finally {
    await running.stop();
  }
}

describe("service controller, node-address mode, against kube-apiserver", () => {
  test("ExternalIPs where nodes have one, at most --lb-max-nodes; the finalizer before the status", async () => {
    const g = await group({
      a: { addresses: [internal("10.1.0.1"), external("203.0.113.1")] },
      b: { addresses: [internal("10.1.0.2"), external("203.0.113.2")] },
      c: { addresses: [internal("10.1.0.3"), external("203.0.113.3")] },
      d: { addresses: [internal("10.1.0.4")] },
    });
    // Every version of the Service the API holds: none may carry an ingress without the finalizer.
    const seen: Service[] = [];
    const namespaced = { ...SERVICE_RESOURCE, namespace: g.namespace };
    const watcher = new Informer(new Resource<Service>(world.plane.admin, namespaced));
    watcher.addHandlers({ onAdd: (service) => seen.push(service), onUpdate: (_, service) => seen.push(service) });
    watcher.start();
    try {
      await withController({ config: { maxNodes: 2 } }, async () => {
        await g.create("web");
        await waitFor("two ingress entries", async () => (await g.ingress("web")).length === 2, WAIT_MS);
        const ingress = await g.ingress("web");
        for (const entry of ingress) assert.match(entry, /^203\.0\.113\.[123] VIP$/);
        assert.deepEqual(await g.finalizers("web"), [LB_FINALIZER]);
        await waitFor("the Events", async () => {
          const reasons = (await world.events(g.namespace, "web")).map(({ reason }) => reason);
          return reasons.includes("EnsuringLoadBalancer") && reasons.includes("EnsuredLoadBalancer");
        }, WAIT_MS);
      });
      const served = (service: Service) => Boolean(service.status?.loadBalancer?.ingress?.length);
      await waitFor("the watcher saw the ingress", () => seen.some(served), WAIT_MS);
      for (const service of seen)
        if (served(service))
          assert.deepEqual(service.metadata?.finalizers, [LB_FINALIZER], "status written before the finalizer");
    } finally {
      await watcher.stop();
    }
  });

  test("InternalIPs when no eligible node has an ExternalIP", async () => {
    const g = await group({ a: { addresses: [internal("10.2.0.1")] }, b: { addresses: [internal("10.2.0.2")] } });
    await withController({}, async () => {
      await g.create("web");
      await until("both InternalIPs", () => g.ingress("web"), ["10.2.0.1 VIP", "10.2.0.2 VIP"]);
    });
  });

  test("excluded (label true), autoscaler taint, NotReady leave; label false or absent, cordoned stay", async () => {
    const g = await group({
      excluded: { addresses: [internal("10.3.0.1")], labels: { [EXCLUDE_LABEL]: "true" } },
      included: { addresses: [internal("10.3.0.2")], labels: { [EXCLUDE_LABEL]: "false" } },
      plain: { addresses: [internal("10.3.0.3")] },
      scaling: { addresses: [internal("10.3.0.4")], taints: [{ key: AUTOSCALER_TAINT, effect: "NoSchedule" }] },
      cordoned: { addresses: [internal("10.3.0.5")], unschedulable: true },
      down: { addresses: [internal("10.3.0.6")], ready: "False" },
    });
    await withController({}, async () => {
      await g.create("web");
      await until("the eligible nodes", () => g.ingress("web"), ["10.3.0.2 VIP", "10.3.0.3 VIP", "10.3.0.5 VIP"]);
      await world.setReady(g.node("plain"), "False");
      await until("the NotReady node gone", () => g.ingress("web"), ["10.3.0.2 VIP", "10.3.0.5 VIP"]);
      await world.setReady(g.node("plain"), "True");
      await until("the node back", () => g.ingress("web"), ["10.3.0.2 VIP", "10.3.0.3 VIP", "10.3.0.5 VIP"]);
    });
  });

  test("externalTrafficPolicy Local: only nodes with a ready endpoint (unset counts as ready), all before any", async () => {
    const g = await group({
      a: { addresses: [internal("10.4.0.1")] },
      b: { addresses: [internal("10.4.0.2")] },
      c: { addresses: [internal("10.4.0.3")] },
    });
    await withController({}, async () => {
      await g.create("web", { externalTrafficPolicy: "Local" });
      const slices = world.endpointSlices(g.namespace);
      const slice: EndpointSlice = {
        metadata: { name: "web-1", labels: { [SERVICE_NAME_LABEL]: "web" } },
        addressType: "IPv4",
        endpoints: [
          { addresses: ["10.244.0.1"], nodeName: g.node("a"), conditions: { ready: false } },
          { addresses: ["10.244.0.2"], nodeName: g.node("b"), conditions: { ready: true } },
          { addresses: ["10.244.0.3"], nodeName: g.node("c"), conditions: {} },
        ],
        ports: [{ port: 8080, protocol: "TCP" }],
      };
      await slices.create(slice);
      await until("the nodes with ready endpoints", () => g.ingress("web"), ["10.4.0.2 VIP", "10.4.0.3 VIP"]);
      await slices.delete("web-1");
      // No ready endpoint anywhere: every eligible node, as Cluster, until one has (decide.ts says why).
      const all = ["10.4.0.1 VIP", "10.4.0.2 VIP", "10.4.0.3 VIP"];
      await until("no endpoint at all: every eligible node", () => g.ingress("web"), all);
    });
  });

  test("another class is never touched; class-less Services only when claimed", async () => {
    const g = await group({ a: { addresses: [internal("10.5.0.1")] } });
    await withController({}, async (running) => {
      await g.create("other", { loadBalancerClass: "example.com/other" });
      await g.create("classless", { loadBalancerClass: undefined, ports: [{ port: 81, protocol: "TCP" }] });
      await g.create("ours", { ports: [{ port: 82, protocol: "TCP" }] });
      await until("ours served", () => g.ingress("ours"), ["10.5.0.1 VIP"]);
      await running.controller.idle();
      for (const name of ["other", "classless"]) {
        assert.deepEqual(await g.ingress(name), [], name);
        assert.deepEqual(await g.finalizers(name), [], name);
      }
    });
    await withController({ config: { claimClassless: true } }, async () => {
      await until("class-less served", () => g.ingress("classless"), ["10.5.0.1 VIP"]);
      assert.deepEqual(await g.ingress("other"), []);
    });
  });

  test("refused: a reserved port, and the newer of two Services on one port; a Warning, no status", async () => {
    const g = await group({ a: { addresses: [internal("10.6.0.1")] } });
    await withController({}, async () => {
      await g.create("ssh", { ports: [{ port: 22, protocol: "TCP" }] });
      await g.create("first");
      await until("the older served", () => g.ingress("first"), ["10.6.0.1 VIP"]);
      await g.create("second");
      const refusals = async (name: string) =>
        (await world.events(g.namespace, name))
          .filter(({ reason }) => reason === "SyncLoadBalancerFailed")
          .map(({ message }) => message);
      await until("the reserved port refused", () => refusals("ssh"), [
        "refused (reserved-port): port TCP/22 is one the nodes serve themselves (reserved: 22)",
      ]);
      await until("the newer refused, naming the holder", () => refusals("second"), [
        `refused (port-conflict): TCP/80 on 10.6.0.1 is held by the older Service ${g.namespace}/first`,
      ]);
      assert.deepEqual(await g.ingress("ssh"), []);
      assert.deepEqual(await g.ingress("second"), []);
      // The holder goes: the newer one gets the port.
      await g.services.delete("first");
      await until("the newer served once the older is gone", () => g.ingress("second"), ["10.6.0.1 VIP"]);
    });
  });

  test("ports others hold on the nodes: the older claim wins, the newer Service is told whose, and it lifts", async () => {
    const g = await group({ a: { addresses: [internal("10.9.0.1")] }, b: { addresses: [internal("10.9.0.2")] } });
    // The holders live in another tenant's namespace; a NodePort is on every node, a pod's port on its own.
    const other = await world.namespace();
    const pods = world.pods(other);
    const victim = await world.services(other).create({
      metadata: { name: "victim" },
      spec: { type: "NodePort", ports: [{ port: 80, protocol: "TCP" }] },
    });
    const nodePort = victim.spec?.ports?.[0]?.nodePort as number;
    const proxy = await pods.create({
      metadata: { name: "proxy" },
      spec: { nodeName: g.node("a"), containers: [{ name: "c", image: "x", ports: [{ containerPort: 80, hostPort: 18080 }] }] },
    });
    const agent = await pods.create({
      metadata: { name: "agent" },
      spec: { nodeName: g.node("b"), hostNetwork: true, containers: [{ name: "c", image: "x", ports: [{ containerPort: 18443 }] }] },
    });
    // Neither bound nor running: holds nothing.
    await pods.create({
      metadata: { name: "pending" },
      spec: { hostNetwork: true, containers: [{ name: "c", image: "x", ports: [{ containerPort: 18444 }] }] },
    });
    // creationTimestamp counts whole seconds, and a tie goes by kind/namespace/name: the contenders come a second
    // after the last holder, so that the holders are older whatever the namespaces' names.
    const heldSince = Math.max(...[victim, proxy, agent].map((o) => Date.parse(o.metadata?.creationTimestamp as string)));
    await waitFor("a second after the holders were created", async () => Date.now() >= heldSince + 1000, 10_000, 50);
    const warnings = async (name: string) =>
      (await world.events(g.namespace, name)).filter(({ type }) => type === "Warning").map(({ reason, message }) =>
        `${reason}: ${message}`);
    const tcp = (port: number) => ({ ports: [{ port, protocol: "TCP" }] });
    // kube-apiserver's range holds the victim's NodePort: a range set apart here lets the NodePort rule be seen alone.
    await withController({ config: { nodePortRange: { from: 40000, to: 40100 } } }, async () => {
      await g.create("on-node-port", tcp(nodePort));
      await g.create("on-host-port", tcp(18080));
      await g.create("on-host-network", tcp(18443));
      await g.create("on-pending", tcp(18444));
      await g.create("in-range", tcp(40000));
      await until("the unbound pod's port served", () => g.ingress("on-pending"), ["10.9.0.1 VIP", "10.9.0.2 VIP"]);
      await until("the NodePort's holder named", () => warnings("on-node-port"), [
        `SyncLoadBalancerFailed: refused (node-port): port TCP/${nodePort} is the NodePort of the older ` +
          `Service/${other}/victim, open on every node`,
      ]);
      await until("the hostPort's holder named", () => warnings("on-host-port"), [
        `SyncLoadBalancerFailed: refused (host-port): port TCP/18080 on node ${g.node("a")} is a hostPort of the ` +
          `older Pod/${other}/proxy`,
      ]);
      await until("the hostNetwork pod named", () => warnings("on-host-network"), [
        `SyncLoadBalancerFailed: refused (host-network-port): port TCP/18443 on node ${g.node("b")} is a port of ` +
          `the older Pod/${other}/agent, which uses the node's network`,
      ]);
      await until("the range refused", () => warnings("in-range"), [
        "SyncLoadBalancerFailed: refused (node-port-range): port TCP/40000 is in the NodePort range (40000-40100), " +
          "from which kube-apiserver gives any Service a NodePort on every node",
      ]);
      for (const name of ["on-node-port", "on-host-port", "on-host-network", "in-range"])
        assert.deepEqual(await g.ingress(name), [], `${name}: no ingress while refused`);

      // A pod newer than the Service: the Service keeps the port, and is told whose it is too.
      const keeps = await g.create("keeps", tcp(18500));
      await until("the older Service served", () => g.ingress("keeps"), ["10.9.0.1 VIP", "10.9.0.2 VIP"]);
      const created = keeps.metadata?.creationTimestamp as string;
      await waitFor("a second later than the Service", async () => new Date().toISOString().slice(0, 19) + "Z" > created,
        WAIT_MS);
      await pods.create({
        metadata: { name: "late" },
        spec: { nodeName: g.node("a"), hostNetwork: true, containers: [{ name: "c", image: "x", ports: [{ containerPort: 18500 }] }] },
      });
      await until("the newer pod named on the Service", () => warnings("keeps"), [
        `PortAlsoHeldByNewer: keeps its ports, the older claim: port TCP/18500 on node ${g.node("a")} is also a port ` +
          `of the newer Pod/${other}/late, which uses the node's network; kube-proxy sends that port on this ` +
          "Service's node addresses to this Service",
      ]);
      assert.deepEqual(await g.ingress("keeps"), ["10.9.0.1 VIP", "10.9.0.2 VIP"]);

      // The holders go, each its own way: deleted, finished (it leaves the pods' field selection), port given up.
      await world.plane.admin.request({
        method: "DELETE",
        path: `/api/v1/namespaces/${other}/pods/proxy`,
        body: { apiVersion: "v1", kind: "DeleteOptions", gracePeriodSeconds: 0 },
      });
      await until("lifted: the hostPort pod deleted", () => g.ingress("on-host-port"), ["10.9.0.1 VIP", "10.9.0.2 VIP"]);
      await pods.patch("agent", "merge", { status: { phase: "Succeeded" } }, { subresource: "status" });
      await until("lifted: the hostNetwork pod finished", () => g.ingress("on-host-network"), ["10.9.0.1 VIP", "10.9.0.2 VIP"]);
      await world.services(other).patch("victim", "merge", { spec: { type: "ClusterIP" } });
      await until("lifted: the NodePort gone", () => g.ingress("on-node-port"), ["10.9.0.1 VIP", "10.9.0.2 VIP"]);
      assert.deepEqual(await g.ingress("in-range"), [], "the range refuses with no holder at all");
    });
  });

  test("the NodePort range by default: kube-apiserver's 30000-32767", async () => {
    const g = await group({ a: { addresses: [internal("10.10.0.1")] } });
    await withController({}, async () => {
      await g.create("in-range", { ports: [{ port: 32000, protocol: "UDP" }] });
      await g.create("below", { ports: [{ port: 29999, protocol: "UDP" }] });
      await until("below the range served", () => g.ingress("below"), ["10.10.0.1 VIP"]);
      const refusals = async () => (await world.events(g.namespace, "in-range")).map(({ message }) => message);
      await until("in the range refused", refusals, [
        "refused (node-port-range): port UDP/32000 is in the NodePort range (30000-32767), from which " +
          "kube-apiserver gives any Service a NodePort on every node",
      ]);
      assert.deepEqual(await g.ingress("in-range"), []);
    });
  });

  test("deleting the Service, or changing its type, removes our status and finalizer", async () => {
    const g = await group({ a: { addresses: [internal("10.7.0.1")] } });
    await withController({}, async () => {
      await g.create("deleted");
      await g.create("retyped", { ports: [{ port: 81, protocol: "TCP" }] });
      for (const name of ["deleted", "retyped"])
        await until(`${name} served`, () => g.ingress(name), ["10.7.0.1 VIP"]);
      await g.services.delete("deleted");
      await waitFor("the deleted Service gone", async () => {
        try {
          await g.services.get("deleted");
          return false;
        } catch {
          return true;
        }
      }, WAIT_MS);
      await g.services.patch("retyped", "merge", { spec: { type: "ClusterIP" } });
      await until("the finalizer of the retyped Service removed", () => g.finalizers("retyped"), []);
      assert.deepEqual(await g.ingress("retyped"), []);
      // Events go out on a client of their own, so this one may land after the finalizer is gone.
      await waitFor("the DeletedLoadBalancer Event", async () =>
        (await world.events(g.namespace, "retyped")).some(({ reason }) => reason === "DeletedLoadBalancer"), WAIT_MS);
    });
  });

  test("a restarted controller, and one that does not lead, write nothing", async () => {
    const g = await group({ a: { addresses: [internal("10.8.0.1")] }, b: { addresses: [internal("10.8.0.2")] } });
    await withController({}, async () => {
      await g.create("web");
      await until("served", () => g.ingress("web"), ["10.8.0.1 VIP", "10.8.0.2 VIP"]);
    });
    await withController({}, async (running) => {
      await running.controller.idle();
      assert.equal(running.writes(), 0);
    });
    await g.create("later", { ports: [{ port: 81, protocol: "TCP" }] });
    await withController({ leader: false }, async (running) => {
      await world.setReady(g.node("b"), "False");
      await running.controller.idle();
      assert.equal(running.writes(), 0, "a follower wrote");
      assert.deepEqual(await g.finalizers("later"), []);
      running.lead(true);
      running.controller.resync();
      await until("the new leader serves the new Service", () => g.ingress("later"), ["10.8.0.1 VIP"]);
      await until("and removes the NotReady node", () => g.ingress("web"), ["10.8.0.1 VIP"]);
    });
  });
});
