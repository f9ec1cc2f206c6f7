// The address pool controller against a real kube-apiserver, on real informers: allocation with its record and
// finalizer, requested addresses, sharing, pool selectors, exhaustion told by an Event and a metric, a restart with
// the pool exhausted, and releases on a class change and on deletion. Each test's pools admit only its own
// namespace, so the pools of one test never reach another's Services.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service, ServicePort } from "kubernetes-types/core/v1.js";
import {
  ALLOCATED_FROM_ANNOTATION,
  L2_CLASS,
  POOL_ANNOTATION,
  REQUESTED_IPS_ANNOTATION,
  SHARING_ANNOTATION,
} from "../../src/pools/allocate.ts";
import type { LoadBalancerIPPool } from "../../src/pools/pool.ts";
import { LB_FINALIZER } from "../../src/service/decide.ts";
import { waitForEqual } from "../../localcluster/wait.ts";
import { type PoolWorld, startPoolWorld } from "./world.ts";

const WAIT_MS = 60_000;

let world: PoolWorld;
before(async () => {
  world = await startPoolWorld();
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
  };
}

const HTTP: ServicePort = { port: 80, protocol: "TCP" };
const port = (number: number, protocol = "TCP"): ServicePort[] => [{ port: number, protocol }];

const until = <T>(what: string, read: () => Promise<T>, expected: T) =>
  waitForEqual(what, read, expected, WAIT_MS);


describe("address pool controller, against kube-apiserver", () => {
  test("lowest free address, recorded (finalizer, pool) with ipMode VIP; requested; shared by key", async () => {
    const g = await group({ main: { addresses: ["198.51.100.0/29"] } });
    await world.withController(async () => {
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
        `holds 198.51.100.32, an address of node ${g.pool("node")}: never handed out`,
      ]);
    });
  });
});
