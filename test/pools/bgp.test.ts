// Class local-ccm.io/bgp in the address pool controller, against a real kube-apiserver: with --lb-bgp its Services
// get pool addresses by the l2 rules (recorded, shared by key) and no announcer (every node's speaker announces
// them), an l2 Service beside them is served as before, the two classes never share an address; without --lb-bgp
// a bgp Service is left alone, and one it served before is released as a Service of another class is. With
// --lb-bgp-claim-classless, a Service without a class is served as a bgp one.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import {
  ALLOCATED_FROM_ANNOTATION,
  BGP_CLASS,
  L2_CLASS,
  REQUESTED_IPS_ANNOTATION,
  SHARING_ANNOTATION,
} from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION, ANNOUNCER_LABEL, RELEASED_FROM_ANNOTATION } from "../../src/pools/announcement.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
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

const until = <T>(what: string, read: () => Promise<T>, expected: T) => waitForEqual(what, read, expected, WAIT_MS);

describe("class local-ccm.io/bgp in the address pool controller", () => {
  test("bgp Services get addresses as l2 ones, no announcer; never an l2 Service's; released when bgp is off", async () => {
    const namespace = await world.namespace();
    await world.createPool("bgp-pool", { addresses: ["10.78.0.10-10.78.0.20"], namespaces: [namespace] });
    await world.addNode("bgp-node", [{ type: "InternalIP", address: "10.78.0.1" }]);
    await world.announce("bgp-node", ["10.78.0.0/24"]);
    const services = world.services(namespace);
    const create = (name: string, lbClass: string, port: number, annotations: Record<string, string> = {}) =>
      services.create({
        metadata: { name, annotations: { [SHARING_ANNOTATION]: "k", ...annotations } },
        spec: { type: "LoadBalancer", loadBalancerClass: lbClass, ports: [{ port, protocol: "TCP" }] },
      });
    const ingress = async (name: string) =>
      (await services.get(name)).status?.loadBalancer?.ingress?.map(({ ip }) => ip) ?? [];
    /** Finalizers, allocated-from, and every announcer annotation or label it carries. */
    const record = async (name: string) => {
      const { metadata = {} } = (await services.get(name)) as Service;
      const { annotations = {}, labels = {} } = metadata;
      const announcer = [
        annotations[ANNOUNCER_ANNOTATION],
        annotations[RELEASED_FROM_ANNOTATION],
        labels[ANNOUNCER_LABEL],
      ];
      return {
        finalizers: metadata.finalizers ?? [],
        from: annotations[ALLOCATED_FROM_ANNOTATION],
        announcer: announcer.filter((value) => value !== undefined),
      };
    };

    await world.withController(async () => {
      await create("web", L2_CLASS, 80);
      await until("the l2 Service's address", () => ingress("web"), ["10.78.0.10"]);
      await until("its announcer", async () => (await record("web")).announcer, ["bgp-node", "bgp-node"]);
    });
    const running = await world.startController({ bgp: true });
    try {
      // The same key as web's, other ports: sharing is refused across classes, so they share an address of their own.
      await create("routed-a", BGP_CLASS, 443);
      await create("routed-b", BGP_CLASS, 8080);
      await create("asks", BGP_CLASS, 53, { [REQUESTED_IPS_ANNOTATION]: "10.78.0.10" });
      await until("routed-a allocated", () => ingress("routed-a"), ["10.78.0.11"]);
      await until("routed-b shares it", () => ingress("routed-b"), ["10.78.0.11"]);
      for (const name of ["routed-a", "routed-b"])
        assert.deepEqual(await record(name), { finalizers: [LB_FINALIZER], from: "bgp-pool", announcer: [] }, name);
      await until(
        "asking for the l2 Service's address is refused by its rule",
        async () =>
          (await world.events(namespace, "asks"))
            .filter(({ type }) => type === "Warning")
            .map(({ message }) => message),
        [
          "refused (sharing-class): 10.78.0.10 is shared under key k by " +
            `${namespace}/web, announced over layer 2: an l2 and a bgp Service never share`,
        ],
      );
      assert.deepEqual(await ingress("asks"), []);
      assert.deepEqual(await ingress("web"), ["10.78.0.10"], "the l2 Service keeps its address");
      assert.deepEqual((await record("web")).announcer, ["bgp-node", "bgp-node"], "and its announcer");
      await until("the pool counts both addresses", async () => (await world.pools.get("bgp-pool")).status?.used, "2");
      const events = (await world.events(namespace, "routed-a")).map(({ reason }) => reason);
      assert.ok(events.includes("EnsuredLoadBalancer"), String(events));
      assert.ok(!events.includes("AnnouncerAssigned") && !events.includes("NoAnnouncer"), String(events));
    } finally {
      await running.stop();
    }

    await world.withController(async () => {
      // Created before "later": allocate() has seen it by the time "later" has its address.
      await create("ignored", BGP_CLASS, 9000);
      await create("later", L2_CLASS, 9001);
      await until("the l2 Service created after it is served (sharing web's)", () => ingress("later"), ["10.78.0.10"]);
      assert.deepEqual(await record("ignored"), { finalizers: [], from: undefined, announcer: [] });
      assert.deepEqual(await ingress("ignored"), []);
      for (const name of ["routed-a", "routed-b"]) {
        await until(`${name} released`, () => record(name), { finalizers: [], from: undefined, announcer: [] });
        assert.deepEqual(await ingress(name), [], name);
      }
    });
  });

  test("class-less Services with --lb-bgp-claim-classless: addresses as bgp ones, no announcer", async () => {
    const namespace = await world.namespace();
    await world.createPool("plain-pool", { addresses: ["10.79.0.10-10.79.0.20"], namespaces: [namespace] });
    await world.addNode("plain-node", [{ type: "InternalIP", address: "10.79.0.1" }]);
    await world.announce("plain-node", ["10.79.0.0/24"]);
    const services = world.services(namespace);
    const create = (name: string, loadBalancerClass?: string) =>
      services.create({
        metadata: { name },
        spec: { type: "LoadBalancer", loadBalancerClass, ports: [{ port: 80, protocol: "TCP" }] },
      });
    const read = async (name: string) => {
      const { metadata = {}, status } = await services.get(name);
      return {
        ingress: status?.loadBalancer?.ingress?.map(({ ip }) => ip) ?? [],
        finalizers: metadata.finalizers ?? [],
        announcer: metadata.annotations?.[ANNOUNCER_ANNOTATION] ?? metadata.labels?.[ANNOUNCER_LABEL],
      };
    };
    await create("plain");
    await create("layer2", L2_CLASS); // created after plain: its announcer comes in a pass that saw plain
    const running = await world.startController({ bgp: true, bgpClaimClassless: true });
    try {
      await until("the l2 Service's announcer", async () => (await read("layer2")).announcer, "plain-node");
      // Which of the pool's first two addresses each got depends on their order by age (created in one second).
      const plain = async () => {
        const { ingress, ...rest } = await read("plain");
        return { addresses: ingress.filter((ip) => ip?.startsWith("10.79.0.")).length, ...rest };
      };
      await until("the class-less Service's address, and no announcer", plain, {
        addresses: 1,
        finalizers: [LB_FINALIZER],
        announcer: undefined,
      });
      const reasons = async () => (await world.events(namespace, "plain")).map(({ reason }) => reason);
      await until("its EnsuredLoadBalancer Event", async () => (await reasons()).includes("EnsuredLoadBalancer"), true);
      const events = await reasons();
      assert.ok(!events.includes("AnnouncerAssigned") && !events.includes("NoAnnouncer"), String(events));
    } finally {
      await running.stop();
    }
  });
});
