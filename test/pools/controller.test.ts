// The address pool controller against a real kube-apiserver, on real informers: allocation with its record and
// finalizer, requested addresses, sharing, pool selectors, exhaustion told by an Event and a metric, a restart with
// the pool exhausted, and releases on a class change and on deletion; what the network uses never handed out (a
// namespace editor asking for the gateway is refused); pool edits that never move a held address; the pools'
// finalizer. Each test's pools admit only its own namespace, so the pools of one test never reach another's Services.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service, ServicePort } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { SERVICE_NAME_LABEL } from "../../src/loadbalancer/endpoints.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
import {
  ALLOCATED_FROM_ANNOTATION,
  L2_CLASS,
  POOL_ANNOTATION,
  REQUESTED_IPS_ANNOTATION,
  SHARING_ANNOTATION,
} from "../../src/pools/allocate.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { ENDPOINT_SLICE_RESOURCE, Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER } from "../../src/pools/pool.ts";
import { waitForEqual } from "../../localcluster/wait.ts";
import { editorClient, namespaceEditor } from "../../localcluster/editor.ts";
import { type PoolWorld, type RunningController, startPoolWorld } from "./world.ts";

const WAIT_MS = 60_000;

let world: PoolWorld;
before(async () => {
  world = await startPoolWorld({ controllerManager: true }); // for the namespace editor's `edit` ClusterRole
});
after(async () => {
  await world?.stop();
});

let groups = 0;

/** A test's namespace, and pools that admit only it. */
async function group(pools: Record<string, LoadBalancerIPPool["spec"]>) {
  const id = `g${++groups}`;
  const namespace = await world.namespace();
  for (const [name, spec] of Object.entries(pools))
    await world.createPool(`${id}-${name}`, { namespaces: [namespace], ...spec });
  const services = world.services(namespace);
  const read = (name: string) => services.get(name);
  return {
    namespace,
    services,
    pool: (name: string) => `${id}-${name}`,
    /** A LoadBalancer Service of class local-ccm.io/l2, unless `spec` says otherwise. */
    create: (
      name: string,
      spec: Partial<Service["spec"]> & { ports?: ServicePort[] } = {},
      annotations: Record<string, string> = {},
    ) =>
      services.create({
        metadata: { name, annotations },
        spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [HTTP], ...spec },
      }),
    ingress: async (name: string) =>
      ((await read(name)).status?.loadBalancer?.ingress ?? []).map(({ ip, ipMode }) => `${ip} ${ipMode}`),
    record: async (name: string) => {
      const { metadata } = await read(name);
      return { finalizers: metadata?.finalizers ?? [], from: metadata?.annotations?.[ALLOCATED_FROM_ANNOTATION] };
    },
    warnings: async (name: string) =>
      (await world.events(namespace, name)).filter(({ type }) => type === "Warning").map(({ message }) => message),
    /** size, used, free and conflicts, in that order. */
    status: async (name: string) => {
      const { size, used, free, conflicts } = (await world.pools.get(`${id}-${name}`)).status ?? {};
      return { size, used, free, conflicts };
    },
    /** The pool's retained addresses, Ready condition (status, reason) and finalizers; undefined once it is gone. */
    held: async (name: string) => {
      const pool = await world.pools.get(`${id}-${name}`).catch((err: unknown) => {
        if (isApiError(err, "NotFound")) return undefined;
        throw err;
      });
      if (!pool) return undefined;
      const ready = pool.status?.conditions?.find(({ type }) => type === "Ready");
      const { finalizers = [] } = pool.metadata ?? {};
      return { retained: pool.status?.retained ?? [], ready: `${ready?.status} ${ready?.reason}`, finalizers };
    },
  };
}

const HTTP: ServicePort = { port: 80, protocol: "TCP" };
const port = (number: number, protocol = "TCP"): ServicePort[] => [{ port: number, protocol }];

const until = <T>(what: string, read: () => Promise<T>, expected: T) =>
  waitForEqual(what, read, expected, WAIT_MS);

/** A pool's gauges as the controller exposes them (size, in use, free), "" for each it does not expose. */
function poolGauges(running: RunningController, pool: string): string[] {
  const text = running.registry.expose();
  return ["pool_addresses", "pool_addresses_in_use", "pool_addresses_free"].map(
    (name) => text.match(new RegExp(`^test_service_l2_pools_${name}\\{pool="${pool}"\\} (\\S+)$`, "m"))?.[1] ?? "",
  );
}


describe("address pool controller, against kube-apiserver", () => {
  test("lowest free address, recorded (finalizer, pool) with ipMode VIP; requested; shared by key", async () => {
    const g = await group({ main: { addresses: ["198.51.100.0/29"] } });
    await world.withController(async (running) => {
      await g.create("a");
      await until("a allocated", () => g.ingress("a"), ["198.51.100.0 VIP"]);
      assert.deepEqual(await g.record("a"), { finalizers: [LB_FINALIZER], from: g.pool("main") });
      await g.create("b", { ports: port(81) }, { [REQUESTED_IPS_ANNOTATION]: "198.51.100.5" });
      await g.create("c", { ports: port(82), loadBalancerIP: "198.51.100.6" });
      await g.create("d-web", { ports: port(443) }, { [SHARING_ANNOTATION]: "front" });
      await g.create("e-dns", { ports: port(443, "UDP") }, { [SHARING_ANNOTATION]: "front" });
      await until("b requested", () => g.ingress("b"), ["198.51.100.5 VIP"]);
      await until("c by spec.loadBalancerIP", () => g.ingress("c"), ["198.51.100.6 VIP"]);
      await until("d shares", () => g.ingress("d-web"), ["198.51.100.1 VIP"]);
      await until("e shares with d", () => g.ingress("e-dns"), ["198.51.100.1 VIP"]);
      await until("pool status", () => g.status("main"), { size: "8", used: "4", free: "4", conflicts: [] });
      await until("its gauges say the same", async () => poolGauges(running, g.pool("main")), ["8", "4", "4"]);
    });
  });

  test("pool selectors and autoAssign: only matching Services, a manual pool only when named", async () => {
    const g = await group({
      edge: { addresses: ["203.0.113.0/30"], serviceSelector: { matchLabels: { tier: "edge" } } },
      manual: { addresses: ["192.0.2.0/30"], autoAssign: false },
    });
    await world.withController(async () => {
      await g.services.create({
        metadata: { name: "edge", labels: { tier: "edge" } },
        spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [HTTP] },
      });
      await g.create("named", { ports: port(81) }, { [POOL_ANNOTATION]: g.pool("manual") });
      await g.create("plain", { ports: port(82) });
      await until("edge from the selected pool", () => g.ingress("edge"), ["203.0.113.0 VIP"]);
      await until("named from the manual pool", () => g.ingress("named"), ["192.0.2.0 VIP"]);
      await until("plain refused", () => g.warnings("plain"), [
        "refused (no-pool): no pool offers IPv4 addresses to this Service",
      ]);
      assert.deepEqual(await g.ingress("plain"), []);
    });
  });

  test("exhaustion: refused with an Event and a metric; a restart hands no address twice", async () => {
    const g = await group({ tiny: { addresses: ["198.51.100.16-198.51.100.17"] } });
    await world.withController(async (running) => {
      // Age decides who waits; Services created in the same second are ordered by name, so a, b, c in any case.
      for (const [name, number] of [["a", 80], ["b", 81], ["c", 82]] as const)
        await g.create(name, { ports: port(number) });
      await until("a", () => g.ingress("a"), ["198.51.100.16 VIP"]);
      await until("b", () => g.ingress("b"), ["198.51.100.17 VIP"]);
      await until("c refused", () => g.warnings("c"), [
        `refused (pool-exhausted): no free IPv4 address in pool(s) ${g.pool("tiny")}`,
      ]);
      await running.controller.idle();
      const exhausted = /test_service_l2_pools_syncs_total\{action="refuse",rule="pool-exhausted"\} [1-9]/;
      assert.match(running.registry.expose(), exhausted);
    });
    // While no controller runs, one more Service comes.
    await g.create("d", { ports: port(83) });
    await world.withController(async (running) => {
      await until("d refused too", () => g.warnings("d"), [
        `refused (pool-exhausted): no free IPv4 address in pool(s) ${g.pool("tiny")}`,
      ]);
      await running.controller.idle();
      assert.equal(running.writes(), 0, "the restarted controller wrote");
      assert.deepEqual(await g.ingress("a"), ["198.51.100.16 VIP"]);
      assert.deepEqual(await g.ingress("b"), ["198.51.100.17 VIP"]);
      assert.deepEqual(await g.ingress("c"), []);
      assert.deepEqual(await g.ingress("d"), []);
      // Deleting a releases its address, which goes to the oldest waiting Service (c), not the newer d.
      await g.services.delete("a");
      await until("c gets a's address", () => g.ingress("c"), ["198.51.100.16 VIP"]);
      assert.deepEqual(await g.ingress("d"), []);
      // b changes class (type ClusterIP clears it): released, its address to d.
      await g.services.patch("b", "merge", { spec: { type: "ClusterIP", loadBalancerClass: null } });
      await until("b released", () => g.record("b"), { finalizers: [], from: undefined });
      await until("d gets b's address", () => g.ingress("d"), ["198.51.100.17 VIP"]);
      await until("pool status", () => g.status("tiny"), { size: "2", used: "2", free: "0", conflicts: [] });
    });
  });

  test("pool conflicts: an overlapping pool and a node address inside are reported and never handed out", async () => {
    const g = await group({ one: { addresses: ["198.51.100.32/30"] }, two: { addresses: ["198.51.100.34/31"] } });
    await world.addNode(`${g.pool("node")}`, [{ type: "InternalIP", address: "198.51.100.32" }]);
    await world.withController(async () => {
      await g.create("a");
      await until("a skips the node's address", () => g.ingress("a"), ["198.51.100.33 VIP"]);
      await until("conflicts", async () => (await g.status("one"))?.conflicts, [
        `overlaps pool ${g.pool("two")} at 198.51.100.34-198.51.100.35`,
        `never hands out 198.51.100.32: it is an address of node ${g.pool("node")}`,
      ]);
    });
  });

  test("a pool over a whole segment skips its gateway; an editor asking is refused", async () => {
    // An operator's slip: the pool holds the segment's gateway, network and broadcast addresses, a node's address,
    // a Service CIDR (the control plane's ServiceCIDR 10.96.0.0/24) and the API server's endpoint. This apiserver
    // advertises 127.0.0.1, which no EndpointSlice may hold: its slice is written as it would be elsewhere.
    const g = await group({ lan: { addresses: ["10.96.0.0/30", "192.0.2.10/32", "198.51.110.0/24"] } });
    await new Resource<EndpointSlice>(world.plane.admin, { ...ENDPOINT_SLICE_RESOURCE, namespace: "default" }).create({
      metadata: { name: "kubernetes", labels: { [SERVICE_NAME_LABEL]: "kubernetes" } },
      addressType: "IPv4",
      endpoints: [{ addresses: ["192.0.2.10"], conditions: { ready: true } }],
      ports: [{ name: "https", port: 6443, protocol: "TCP" }],
    });
    const node = g.pool("gw-node");
    await world.addNode(node, [{ type: "InternalIP", address: "198.51.110.2" }]);
    const lease = await world.announce(node, ["198.51.110.0/24"], ["198.51.110.1"]);
    // The namespace editor (RBAC edit, not the admin) creates the Services.
    const client = await editorClient(await namespaceEditor(world.plane, g.namespace));
    const services = new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace: g.namespace });
    const create = (name: string, number: number, annotations: Record<string, string> = {}, loadBalancerIP?: string) =>
      services.create({
        metadata: { name, annotations },
        spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: port(number), loadBalancerIP },
      });
    try {
      await world.withController(async (running) => {
        await create("first", 80);
        await until("the lowest address the network does not use", () => g.ingress("first"), ["198.51.110.3 VIP"]);
        await create("gateway", 81, { [REQUESTED_IPS_ANNOTATION]: "198.51.110.1" });
        await create("legacy", 82, {}, "198.51.110.255");
        await create("cluster-ip", 83, { [REQUESTED_IPS_ANNOTATION]: "10.96.0.1" });
        await create("apiserver", 84, { [REQUESTED_IPS_ANNOTATION]: "192.0.2.10" });
        await create("node", 85, { [REQUESTED_IPS_ANNOTATION]: "198.51.110.2" });
        const segment = `segment 198.51.110.0/24 (node ${node})`;
        const refusals = {
          gateway: `refused (gateway): 198.51.110.1 is the default gateway of ${segment}`,
          legacy: `refused (broadcast-address): 198.51.110.255 is the broadcast address of ${segment}`,
          "cluster-ip": "refused (service-cidr): 10.96.0.1 is in Service CIDR 10.96.0.0/24 (ServiceCIDR kubernetes)",
          apiserver:
            "refused (api-server): 192.0.2.10 is an endpoint of the API server (EndpointSlices of default/kubernetes)",
          node: `refused (node-address): 198.51.110.2 is an address of node ${node}`,
        };
        for (const [name, warning] of Object.entries(refusals)) {
          await until(`${name} refused`, () => g.warnings(name), [warning]);
          assert.deepEqual(await g.ingress(name), [], `${name} got no address`);
        }
        await running.controller.idle();
        const refused = /test_service_l2_pools_syncs_total\{action="refuse",rule="gateway"\} [1-9]/;
        assert.match(running.registry.expose(), refused);
        const { conflicts } = await g.status("lan");
        const nevers = ["10.96.0.0-10.96.0.3: it is in Service CIDR", "192.0.2.10: it is an endpoint", "198.51.110.1: it is"];
        for (const never of nevers)
          assert.ok(conflicts?.some((line) => line.startsWith(`never hands out ${never}`)), `${never}: ${conflicts}`);
        // A gateway the agents learn later: the Service that holds it keeps it (never moved), told why.
        lease.stop();
        await world.announce(`${node}-b`, ["198.51.110.0/24"], ["198.51.110.3"]);
        await until("first told", () => g.warnings("first"), [
          `keeps 198.51.110.3: (gateway) 198.51.110.3 is kept while the Service exists, though it is the default ` +
            `gateway of segment 198.51.110.0/24 (node ${node}-b)`,
        ]);
        assert.deepEqual(await g.ingress("first"), ["198.51.110.3 VIP"]);
      });
    } finally {
      client.close();
    }
  });

  test("pool edits never move a held address (narrowed, shrunk, deleted); a deleted pool waits until released", async () => {
    const g = await group({ main: { addresses: ["198.51.111.0/29"] } });
    const warnings = (name: string) => async () => (await g.warnings(name)).at(-1);
    await world.withController(async (running) => {
      await g.create("a");
      await until("a allocated", () => g.ingress("a"), ["198.51.111.0 VIP"]);
      await until("the pool carries the finalizer, Ready", () => g.held("main"), {
        retained: [],
        ready: "True Serving",
        finalizers: [POOL_FINALIZER],
      });
      // A bad entry (a reversed IPv6 range: the CRD's CEL checks IPv4 ranges only) is not served; the others are.
      const withBad = ["198.51.111.0/29", "2001:db8::9-2001:db8::1"];
      await world.pools.patch(g.pool("main"), "merge", { spec: { addresses: withBad } });
      await until("the entry is unservable, not the pool", async () => (await g.held("main"))?.ready, "True EntriesUnservable");
      assert.deepEqual((await g.status("main")).conflicts, [
        'cannot serve the entry "2001:db8::9-2001:db8::1" ends before it starts',
      ]);
      await g.create("c", { ports: port(82) });
      await until("c allocated from the same pool", () => g.ingress("c"), ["198.51.111.1 VIP"]);
      // Narrowed to another namespace: a keeps its address, is told; the pool says why; a new Service gets nothing.
      await world.pools.patch(g.pool("main"), "merge", { spec: { namespaces: ["elsewhere"] } });
      const notAdmitted = `pool ${g.pool("main")} no longer admits the Service (its namespaces or serviceSelector)`;
      const kept = (rule: string, why: string) =>
        `keeps 198.51.111.0: (${rule}) 198.51.111.0 is kept while the Service exists, though ${why}`;
      await until("a told", warnings("a"), kept("pool-changed", notAdmitted));
      await until("the pool says why", async () => (await g.held("main"))?.retained, [
        `198.51.111.0 (Service ${g.namespace}/a): ${notAdmitted}`,
        `198.51.111.1 (Service ${g.namespace}/c): ${notAdmitted}`,
      ]);
      await g.create("b", { ports: port(81) });
      await until("b refused", warnings("b"), "refused (no-pool): no pool offers IPv4 addresses to this Service");
      assert.deepEqual(await g.ingress("a"), ["198.51.111.0 VIP"]);
      // Admitting again and shrunk past a's address: a keeps it; b gets one of what is left.
      const shrunk = { namespaces: [g.namespace], addresses: ["198.51.111.4/30"] };
      await world.pools.patch(g.pool("main"), "merge", { spec: shrunk });
      await until("b allocated", () => g.ingress("b"), ["198.51.111.4 VIP"]);
      await until("a told again", warnings("a"), kept("pool-changed", `pool ${g.pool("main")} no longer offers it`));
      assert.deepEqual(await g.ingress("a"), ["198.51.111.0 VIP"]);
      // Deleted: it stays, Ready False (Deleting), until both are released; a and b keep their addresses meanwhile.
      await world.pools.delete(g.pool("main"));
      await until("the pool waits", async () => (await g.held("main"))?.ready, "False Deleting");
      await until("a told", warnings("a"), kept("pool-deleting", `pool ${g.pool("main")} is being deleted`));
      assert.deepEqual(await g.ingress("b"), ["198.51.111.4 VIP"]);
      await g.services.delete("a");
      await g.services.delete("c");
      const names = async () => (await g.services.list()).items.map(({ metadata }) => metadata?.name);
      await until("a and c gone", names, ["b"]);
      await running.controller.idle();
      assert.equal((await g.held("main"))?.ready, "False Deleting", "b still holds an address of it");
      await g.services.delete("b");
      await until("the pool is gone once nothing holds an address of it", () => g.held("main"), undefined);
    });
  });

  test("Services MetalLB served, class-less and claimed, keep their addresses: its annotations are read", async () => {
    const g = await group({ lan: { addresses: ["198.51.120.32/29"] }, manual: { addresses: ["198.51.120.48/30"], autoAssign: false } });
    // As MetalLB left them: class-less, its annotations, and the address it wrote in status.
    const served = async (name: string, ip: string, ports: ServicePort[], annotations: Record<string, string>) => {
      await g.services.create({ metadata: { name, annotations }, spec: { type: "LoadBalancer", ports } });
      await g.services.patch(name, "merge", { status: { loadBalancer: { ingress: [{ ip }] } } }, { subresource: "status" });
    };
    await served("pinned", "198.51.120.37", port(80), { "metallb.io/loadBalancerIPs": "198.51.120.37" });
    const shared = { "metallb.io/loadBalancerIPs": "198.51.120.38", "metallb.io/allow-shared-ip": "dns" };
    await served("dns-tcp", "198.51.120.38", port(53), shared);
    await served("dns-udp", "198.51.120.38", port(53, "UDP"), shared);
    await served("old-spelling", "198.51.120.49", port(80), { "metallb.universe.tf/address-pool": g.pool("manual") });
    // Ours win over MetalLB's: the runbook's pin stays the one read.
    await served("both", "198.51.120.39", port(80), {
      [REQUESTED_IPS_ANNOTATION]: "198.51.120.33",
      "metallb.io/loadBalancerIPs": "198.51.120.39",
    });
    // And as a manifest written for MetalLB asks, never served: the request is read, not just the address held.
    const asks = (name: string, annotations: Record<string, string>) =>
      g.services.create({ metadata: { name, annotations }, spec: { type: "LoadBalancer", ports: port(8080) } });
    await asks("requests", { "metallb.io/loadBalancerIPs": "198.51.120.35" });
    await asks("names-pool", { "metallb.io/address-pool": g.pool("manual") });
    const running = await world.startController({ claimClassless: true });
    try {
      await until("requests gets what it asks", () => g.ingress("requests"), ["198.51.120.35 VIP"]);
      await until("names-pool gets the manual pool's", () => g.ingress("names-pool"), ["198.51.120.48 VIP"]);
      await until("pinned keeps its address", () => g.ingress("pinned"), ["198.51.120.37 VIP"]);
      await until("dns-tcp keeps the shared address", () => g.ingress("dns-tcp"), ["198.51.120.38 VIP"]);
      await until("dns-udp keeps the shared address", () => g.ingress("dns-udp"), ["198.51.120.38 VIP"]);
      await until("old-spelling keeps its address in the pool it names", () => g.ingress("old-spelling"), ["198.51.120.49 VIP"]);
      assert.deepEqual(await g.record("old-spelling"), { finalizers: [LB_FINALIZER], from: g.pool("manual") });
      await until("ours win", () => g.ingress("both"), ["198.51.120.33 VIP"]);
      assert.deepEqual(await g.record("dns-udp"), { finalizers: [LB_FINALIZER], from: g.pool("lan") });
      // No allocation Warning but the move ours asked for (this world has no agents: NoAnnouncer is expected).
      const moved = ["AddressMoved: moved to 198.51.120.33: 198.51.120.39 is not the address it requests"];
      // Events are recorded a moment after the writes: wait for the one expected, then read the rest.
      const warned = async (name: string) =>
        (await world.events(g.namespace, name))
          .filter(({ type, reason }) => type === "Warning" && reason !== "NoAnnouncer")
          .map(({ reason, message }) => `${reason}: ${message}`);
      await until("both told it moved", () => warned("both"), moved);
      for (const name of ["pinned", "dns-tcp", "dns-udp", "old-spelling"]) assert.deepEqual(await warned(name), [], name);
    } finally {
      await running.stop();
    }
  });

  test("a pool nobody draws from carries the finalizer and goes as soon as it is deleted, and its gauges", async () => {
    const g = await group({ idle: { addresses: ["198.51.112.0/30"] } });
    await world.withController(async (running) => {
      await until("finalizer", async () => (await g.held("idle"))?.finalizers, [POOL_FINALIZER]);
      await until("its gauges", async () => poolGauges(running, g.pool("idle")), ["4", "0", "4"]);
      await world.pools.delete(g.pool("idle"));
      await until("gone", () => g.held("idle"), undefined);
      await until("its gauges gone", async () => poolGauges(running, g.pool("idle")), ["", "", ""]);
    });
  });
});
