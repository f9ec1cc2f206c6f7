// The controller's loop with fake caches and a fake API whose watch lags behind its writes (and whose answers can be
// held): what this process writes stands in for the cached copy from its decision on, so a Service seen meanwhile
// never gets an address already handed out; and a restart on the written state writes nothing.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { createLogger } from "../cli/log.ts";
import { Registry } from "../cli/metrics.ts";
import { ApiError } from "../kube/errors.ts";
import { objectKey } from "../kube/informer.ts";
import { L2_CLASS } from "./allocate.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LEASE_PREFIX,
  LEASE_DURATION_SECONDS,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";
import { PoolController } from "./controller.ts";
import { createPoolsMetrics } from "./metrics.ts";
import type { LoadBalancerIPPool } from "./pool.ts";

class FakeCache<T extends { metadata?: { namespace?: string; name?: string } }> {
  readonly items = new Map<string, T>();
  get = (key: string) => this.items.get(key);
  list = () => [...this.items.values()];
  put = (item: T) => this.items.set(objectKey(item), item);
}

/** RFC 7386 merge patch. */
function merge(target: unknown, patch: unknown): unknown {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = { ...(typeof target === "object" && target !== null ? target : {}) };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = merge(out[key], value);
  }
  return out;
}

const service = (name: string, created: string): Service => ({
  metadata: { namespace: "ns", name, uid: `uid-${name}`, resourceVersion: "1", creationTimestamp: created },
  spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ipFamilies: ["IPv4"], ports: [{ port: 80 }] },
});

/** A controller whose API keeps the written Services apart until `deliver()` plays the watch events. */
function world(options: { failFirstStatus?: boolean; now?: () => number } = {}) {
  const services = new FakeCache<Service>();
  const nodes = new FakeCache<Node>();
  const leases = new FakeCache<Lease>();
  const pools = new FakeCache<LoadBalancerIPPool>();
  pools.put({ metadata: { name: "p" }, spec: { addresses: ["198.51.100.0/31"] } });
  const stored = new Map<string, Service>();
  const pending: Service[] = [];
  let version = 100;
  const writes: { name: string; ingress?: string[]; announcer?: string }[] = [];
  /** While set, the API answers no write (each is recorded in `writes` when sent). */
  let gate: Promise<void> | undefined;
  const controller = new PoolController({
    config: { claimClassless: false, bgp: false, bgpClaimClassless: false, leaseNamespace: "kube-system" },
    services,
    nodes,
    pools,
    leases,
    endpointSlices: new FakeCache(),
    serviceCidrs: new FakeCache(),
    serviceResource: (namespace) => ({
      patch: async (name, _type, body) => {
        const ingress = (body as Service).status?.loadBalancer?.ingress?.map(({ ip }) => ip ?? "");
        const annotations = (body as Service).metadata?.annotations ?? {};
        const announcer = Object.hasOwn(annotations, ANNOUNCER_ANNOTATION)
          ? { announcer: annotations[ANNOUNCER_ANNOTATION] ?? "none" }
          : {};
        writes.push({ name, ...(ingress ? { ingress } : {}), ...announcer });
        await gate;
        if (ingress && options.failFirstStatus) {
          options.failFirstStatus = false;
          throw new Error("the connection was reset");
        }
        const key = `${namespace}/${name}`;
        const before = stored.get(key) ?? (services.get(key) as Service);
        const pinned = (body as Service).metadata?.resourceVersion;
        if (pinned !== undefined && pinned !== before.metadata?.resourceVersion)
          throw new ApiError(409, undefined, `patch ${key} pinned to ${pinned}`);
        const next = { ...(body as Service).metadata, resourceVersion: String(++version) };
        const after = merge(before, { ...(body as object), metadata: next });
        stored.set(key, after as Service);
        pending.push(after as Service);
        return after as Service;
      },
    }),
    poolResource: { patch: async (_name, _type, body) => body as LoadBalancerIPPool },
    isLeader: () => true,
    events: { record: () => {} },
    log: createLogger({ verbosity: 0, format: "text", write: () => {} }),
    metrics: createPoolsMetrics(new Registry(), "test_"),
    retryBackoff: { baseMs: 1, capMs: 10 },
    ...(options.now ? { now: options.now } : {}),
  });
  const add = (item: Service) => {
    services.put(item);
    controller.serviceHandlers.onAdd?.(item);
  };
  const deliver = () => {
    for (const item of pending.splice(0)) {
      const before = services.get(objectKey(item)) as Service;
      services.put(item);
      controller.serviceHandlers.onUpdate?.(before, item);
    }
  };
  /** Holds every write's answer until the returned function is called. */
  const hold = () => {
    let open = () => {};
    gate = new Promise((resolve) => {
      open = resolve;
    });
    return () => {
      gate = undefined;
      open();
    };
  };
  const addNode = (name: string) => {
    // An address on the segment its Lease names: what proves that segment (leases.ts).
    const addresses = [{ type: "InternalIP", address: `198.51.100.${10 + nodes.list().length}` }];
    const node: Node = { metadata: { name }, status: { addresses, conditions: [{ type: "Ready", status: "True" }] } };
    nodes.put(node);
    controller.nodeHandlers.onAdd?.(node);
  };
  /** An announcer Lease renewed at `renewTime`, on the pool's segment. */
  const renew = (node: string, renewTime: string) => {
    const name = ANNOUNCER_LEASE_PREFIX + node;
    const lease: Lease = {
      metadata: { namespace: "kube-system", name, annotations: { [SEGMENTS_ANNOTATION]: "198.51.100.0/24" } },
      spec: { renewTime, leaseDurationSeconds: LEASE_DURATION_SECONDS },
    };
    const before = leases.get(`kube-system/${name}`);
    leases.put(lease);
    if (before) controller.leaseHandlers.onUpdate?.(before, lease);
    else controller.leaseHandlers.onAdd?.(lease);
  };
  return { controller, services, add, deliver, writes, hold, addNode, renew };
}

test("a Service seen before the watch shows an allocation never gets that address, even when older", async () => {
  const { controller, add, deliver, writes } = world();
  controller.start();
  add(service("newer", "2026-01-01T00:00:05Z"));
  await controller.idle();
  assert.deepEqual(writes, [{ name: "newer" }, { name: "newer", ingress: ["198.51.100.0"] }]);
  // An older Service shows up (its informer event was late) before the watch delivers the writes above.
  add(service("older", "2026-01-01T00:00:01Z"));
  await controller.idle();
  assert.deepEqual(writes.slice(2), [{ name: "older" }, { name: "older", ingress: ["198.51.100.1"] }]);
  deliver();
  await controller.idle();
  assert.equal(writes.length, 4, "the delivered versions are written from again");
});

test("an address is held from the decision on, while its writes are unanswered", async () => {
  const { controller, add, writes, hold } = world();
  controller.start();
  const answer = hold();
  add(service("newer", "2026-01-01T00:00:05Z"));
  await waitForWrites(writes, 1);
  add(service("older", "2026-01-01T00:00:01Z"));
  await waitForWrites(writes, 2);
  answer();
  await controller.idle();
  const statuses = writes.filter(({ ingress }) => ingress).map(({ name, ingress }) => `${name} ${ingress}`);
  assert.deepEqual(statuses.sort(), ["newer 198.51.100.0", "older 198.51.100.1"]);
});

/** Waits (bounded) until `count` writes were sent. */
async function waitForWrites(writes: unknown[], count: number): Promise<void> {
  // Bounded in time, not turns: an allocation due after another waits for its pace (time/pacer.ts).
  for (const deadline = Date.now() + 10_000; writes.length < count; ) {
    assert.ok(Date.now() < deadline, `${count} writes never sent`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

test("a write that failed is sent again once the cache moves on, its address held meanwhile", async () => {
  const { controller, add, deliver, writes } = world({ failFirstStatus: true });
  controller.start();
  add(service("a", "2026-01-01T00:00:05Z"));
  await waitForWrites(writes, 2);
  // Retried from the version read, the record conflicts (it was written): the Service waits for its next version.
  await waitForWrites(writes, 3);
  await controller.idle();
  add(service("older", "2026-01-01T00:00:01Z"));
  await controller.idle();
  deliver();
  await controller.idle();
  const statuses = writes.filter(({ ingress }) => ingress).map(({ name, ingress }) => `${name} ${ingress}`);
  assert.deepEqual(statuses, ["a 198.51.100.0", "older 198.51.100.1", "a 198.51.100.0"]);
});

test("a new controller on the written state writes nothing", async () => {
  const first = world();
  first.controller.start();
  first.add(service("a", "2026-01-01T00:00:01Z"));
  await first.controller.idle();
  first.deliver();
  await first.controller.idle();
  await first.controller.stop();
  const second = world();
  for (const item of first.services.list()) second.services.put(item);
  second.controller.start();
  await second.controller.idle();
  assert.deepEqual(second.writes, []);
});

test("the announcer follows the status; it moves once its Lease is unrenewed a duration", async () => {
  let nowMs = 0;
  const { controller, add, deliver, writes, addNode, renew } = world({ now: () => nowMs });
  for (const node of ["n1", "n2"]) addNode(node);
  renew("n1", "2026-01-01T00:00:00.000000Z");
  controller.start();
  add(service("a", "2026-01-01T00:00:01Z"));
  await controller.idle();
  // 198.51.100.0 is the network address of the announcers' segment: never handed out.
  assert.deepEqual(writes, [{ name: "a" }, { name: "a", ingress: ["198.51.100.1"] }], "no announcer before the status");
  deliver();
  await controller.idle();
  assert.deepEqual(writes.slice(2), [{ name: "a", announcer: "n1" }]);
  deliver();
  // n2 renews each second (a gap of over 2 s without any renewal would be a stale view, leases.ts): at 2.9 s n1,
  // unrenewed since 0, is still live and stays.
  for (const [atMs, renewTime] of [[1000, "01.000"], [2000, "02.000"], [2900, "02.900"]] as const) {
    nowMs = atMs;
    renew("n2", `2026-01-01T00:00:${renewTime}000Z`);
  }
  await controller.idle();
  assert.equal(writes.length, 3);
  // At 3 s n1's Lease has gone a duration unrenewed (by this controller's clock): n2 takes over at once, on the
  // plan the controller set for n1's expiry (then 100 ms away on the real clock). n2 renewing while live plans
  // nothing itself.
  nowMs = 3000;
  renew("n2", "2026-01-01T00:00:03.000000Z");
  for (const deadline = Date.now() + 10_000; writes.length === 3 && Date.now() < deadline; )
    await new Promise((resolve) => setTimeout(resolve, 20));
  await controller.idle();
  assert.deepEqual(writes.slice(3), [{ name: "a", announcer: "n2" }]);
});
