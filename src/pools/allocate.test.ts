import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { type Allocation, allocate, isOurs, type L2ServiceFacts, L2_CLASS, poolHolds } from "./allocate.ts";
import { type LoadBalancerIPPool, type PoolFacts, poolFacts } from "./pool.ts";
import { ipNumber, ipText, isBuggyIp } from "./ranges.ts";
import { poolStatus } from "./status.ts";

let seconds = 0;
/** A Service of ours, created a second after the one before. */
function service(name: string, fields: Partial<L2ServiceFacts> = {}): L2ServiceFacts {
  seconds++;
  return {
    key: `ns/${name}`,
    namespace: "ns",
    uid: name,
    created: new Date(Date.UTC(2026, 0, 1, 0, 0, seconds)).toISOString().replace(".000", ""),
    type: "LoadBalancer",
    class: L2_CLASS,
    deleting: false,
    labels: {},
    ipFamilies: ["IPv4"],
    ports: [{ protocol: "TCP", port: 80 }],
    requestedIps: undefined,
    loadBalancerIP: undefined,
    pool: undefined,
    sharingKey: undefined,
    finalizer: false,
    allocatedFrom: undefined,
    ingress: [],
    ...fields,
  };
}

const pool = (name: string, addresses: string[], spec: LoadBalancerIPPool["spec"] = {}) =>
  poolFacts({ metadata: { name }, spec: { addresses, ...spec } });

function run(services: L2ServiceFacts[], pools: PoolFacts[], nodes: Record<string, string> = {}) {
  return allocate({ services, pools, nodeAddresses: new Map(Object.entries(nodes)), claimClassless: false });
}

/** "ns/a → 198.51.100.1 (kept)" or "ns/a ✗ pool-exhausted: …". */
function summary(allocations: Map<string, Allocation>): string[] {
  return [...allocations].map(([key, allocation]) =>
    allocation.action === "allocate"
      ? `${key} → ${allocation.ips.join(",")} (${allocation.rule})`
      : `${key} ✗ ${allocation.rule}: ${allocation.reason}`,
  );
}

/** The Services as a controller would have written them: the allocation's addresses in status, pools recorded. */
function written(services: L2ServiceFacts[], allocations: Map<string, Allocation>): L2ServiceFacts[] {
  return services.map((facts) => {
    const allocation = allocations.get(facts.key);
    if (!allocation || facts.deleting) return facts;
    if (allocation.action === "refuse") return { ...facts, ingress: [] };
    return { ...facts, ingress: allocation.ips, allocatedFrom: allocation.pools.join(","), finalizer: true };
  });
}

describe("allocate", () => {
  const small = pool("a", ["198.51.100.0/30"]);

  test("lowest free address, oldest first; exhaustion refused with the pools named", () => {
    const services = ["one", "two", "three", "four", "five"].map((name) => service(name));
    assert.deepEqual(summary(run(services, [small]).services), [
      "ns/one → 198.51.100.0 (allocated)",
      "ns/two → 198.51.100.1 (allocated)",
      "ns/three → 198.51.100.2 (allocated)",
      "ns/four → 198.51.100.3 (allocated)",
      "ns/five ✗ pool-exhausted: no free IPv4 address in pool(s) a",
    ]);
  });

  test("held addresses are kept, even when an older Service has none; a restart is the same", () => {
    const older = service("older");
    const newer = service("newer", { ingress: ["198.51.100.0"], allocatedFrom: "a" });
    assert.deepEqual(summary(run([older, newer], [small]).services), [
      "ns/older → 198.51.100.1 (allocated)",
      "ns/newer → 198.51.100.0 (kept)",
    ]);
  });

  test("two Services on one address: the older keeps it, the newer moves and is told why", () => {
    const older = service("older", { ingress: ["198.51.100.2"] });
    const newer = service("newer", { ingress: ["198.51.100.2"] });
    const { services } = run([newer, older], [small]);
    assert.deepEqual(summary(services), ["ns/older → 198.51.100.2 (kept)", "ns/newer → 198.51.100.0 (allocated)"]);
    assert.equal(services.get("ns/newer")?.moved, "198.51.100.2 is held by the older Service ns/older");
  });

  test("requested addresses: annotation (both families) or spec.loadBalancerIP; refusals name the problem", () => {
    const dual = pool("dual", ["198.51.100.0/30", "2001:db8::/126"]);
    const services = [
      service("both", { ipFamilies: ["IPv6", "IPv4"], requestedIps: "198.51.100.2, 2001:db8::3" }),
      service("legacy", { loadBalancerIP: "198.51.100.1" }),
      service("taken", { loadBalancerIP: "198.51.100.1" }),
      service("outside", { requestedIps: "192.0.2.1" }),
      service("garbled", { requestedIps: "198.51.100.300" }),
      service("family", { requestedIps: "2001:db8::1" }),
      service("node", { requestedIps: "198.51.100.3" }),
    ];
    assert.deepEqual(summary(run(services, [dual], { "198.51.100.3": "n1" }).services), [
      "ns/both → 2001:db8::3,198.51.100.2 (allocated)",
      "ns/legacy → 198.51.100.1 (allocated)",
      "ns/taken ✗ address-held: 198.51.100.1 is held by the Service ns/legacy",
      "ns/outside ✗ address-in-no-pool: 192.0.2.1 is in no pool this Service may use",
      'ns/garbled ✗ bad-request: annotation local-ccm.io/load-balancer-ips: "198.51.100.300" is not an IP address',
      "ns/family ✗ bad-request: annotation local-ccm.io/load-balancer-ips: 2001:db8::1 is IPv6, not of " +
        "spec.ipFamilies (IPv4)",
      "ns/node ✗ node-address: 198.51.100.3 is an address of node n1",
    ]);
  });

  test("sharing: same key and no common port share; overlapping ports or another key do not", () => {
    const web = service("web", { sharingKey: "k", ports: [{ protocol: "TCP", port: 80 }] });
    const dns = service("dns", { sharingKey: "k", ports: [{ protocol: "UDP", port: 80 }] });
    const clash = service("clash", { sharingKey: "k", ports: [{ protocol: "TCP", port: 80 }] });
    const other = service("other", { sharingKey: "j", ports: [{ protocol: "TCP", port: 443 }] });
    const asks = service("asks", { sharingKey: "k", requestedIps: "198.51.100.0" });
    assert.deepEqual(summary(run([web, dns, clash, other, asks], [small]).services), [
      "ns/web → 198.51.100.0 (allocated)",
      "ns/dns → 198.51.100.0 (allocated)",
      "ns/clash → 198.51.100.1 (allocated)",
      "ns/other → 198.51.100.2 (allocated)",
      "ns/asks ✗ port-overlap: 198.51.100.0 is shared with ns/web, whose ports overlap this Service's",
    ]);
  });

  test("pools: selector, namespaces, autoAssign off (only when named), named pool, .0/.255 avoided", () => {
    const pools = [
      pool("a-manual", ["192.0.2.0/24"], { autoAssign: false }),
      pool("b-selected", ["203.0.113.0/24"], {
        serviceSelector: { matchLabels: { tier: "edge" } },
        avoidBuggyIPs: true,
      }),
      pool("c-other-ns", ["198.51.100.0/24"], { namespaces: ["other"] }),
      pool("d-broken", ["198.51.100.9-198.51.100.1"]),
    ];
    const services = [
      service("edge", { labels: { tier: "edge" } }),
      service("plain"),
      service("manual", { pool: "a-manual" }),
      service("missing", { pool: "nope" }),
      service("broken", { pool: "d-broken" }),
    ];
    assert.deepEqual(summary(run(services, pools).services), [
      "ns/edge → 203.0.113.1 (allocated)",
      "ns/plain ✗ no-pool: no pool offers IPv4 addresses to this Service",
      "ns/manual → 192.0.2.0 (allocated)",
      "ns/missing ✗ no-pool: annotation local-ccm.io/address-pool: pool nope does not exist",
      'ns/broken ✗ no-pool: annotation local-ccm.io/address-pool: pool d-broken serves nothing: "198.51.100.9-' +
        '198.51.100.1" ends before it starts',
    ]);
  });

  test("all families or none: a refusal releases what the Service held", () => {
    const v4only = pool("a", ["198.51.100.0/31"]);
    const dual = service("dual", { ipFamilies: ["IPv4", "IPv6"], ingress: ["198.51.100.0"] });
    const later = service("later");
    assert.deepEqual(summary(run([dual, later], [v4only]).services), [
      "ns/dual ✗ no-pool: no pool offers IPv6 addresses to this Service",
      "ns/later → 198.51.100.0 (allocated)",
    ]);
  });

  test("an address a refused Service gives up goes to the older Service that asked for it", () => {
    const dual = pool("a", ["198.51.100.0/31", "2001:db8::/127"]);
    const older = service("older", { ipFamilies: ["IPv6"], requestedIps: "2001:db8::1" });
    const taker = service("taker", { requestedIps: "198.51.100.0" });
    const newer = service("newer", {
      ipFamilies: ["IPv4", "IPv6"],
      requestedIps: "198.51.100.0",
      ingress: ["2001:db8::1"],
    });
    assert.deepEqual(summary(run([older, taker, newer], [dual]).services), [
      "ns/older → 2001:db8::1 (allocated)",
      "ns/taker → 198.51.100.0 (allocated)",
      "ns/newer ✗ address-held: 198.51.100.0 is held by the Service ns/taker",
    ]);
  });

  test("a Service being deleted keeps its address until it is gone; other classes are not ours", () => {
    const going = service("going", { deleting: true, ingress: ["198.51.100.0"] });
    const theirs = service("theirs", { class: "example.com/other" });
    const fresh = service("fresh");
    const { services, used } = run([going, theirs, fresh], [small]);
    assert.deepEqual(summary(services), ["ns/fresh → 198.51.100.1 (allocated)"]);
    assert.deepEqual([...(used.get("a") ?? [])].sort(), ["198.51.100.0", "198.51.100.1"]);
    assert.equal(isOurs(service("x", { class: undefined }), true), true);
    assert.equal(isOurs(service("x", { class: undefined }), false), false);
  });

  test("pool status: size, used, free, overlaps and node addresses as conflicts", () => {
    const a = pool("a", ["198.51.100.0/29"]);
    const b = pool("b", ["198.51.100.6-198.51.100.10", "2001:db8::/64"]);
    const nodes = new Map([["198.51.100.1", "n1"]]);
    assert.deepEqual(poolStatus(a, [a, b], new Set(["198.51.100.0"]), nodes), {
      size: "8",
      used: "1",
      free: "6",
      conflicts: [
        "overlaps pool b at 198.51.100.6-198.51.100.7",
        "holds 198.51.100.1, an address of node n1: never handed out",
      ],
    });
    assert.equal(poolStatus(b, [a, b], new Set(), nodes).size, String(5n + 2n ** 64n));
  });
});

// ---- properties ----

const POOLS = [
  pool("p1", ["10.0.0.0/29", "fd00::/126"]),
  pool("p2", ["10.0.0.6-10.0.0.9"], { avoidBuggyIPs: true }),
  pool("p3", ["10.0.1.0/30"], { autoAssign: false }),
];
const ADDRESSES = ["10.0.0.0", "10.0.0.3", "10.0.0.7", "10.0.0.9", "10.0.1.1", "10.0.2.1", "fd00::1", "fd00::9"];

const arbitraryService = (index: number) =>
  fc
    .record({
      ipFamilies: fc.constantFrom<L2ServiceFacts["ipFamilies"][]>(["IPv4"], ["IPv6"], ["IPv4", "IPv6"]),
      port: fc.constantFrom(80, 443),
      sharingKey: fc.option(fc.constantFrom("k", "j"), { nil: undefined }),
      requestedIps: fc.option(fc.constantFrom(...ADDRESSES), { nil: undefined }),
      pool: fc.option(fc.constantFrom("p1", "p2", "p3", "p4"), { nil: undefined }),
      ingress: fc.subarray(ADDRESSES, { maxLength: 2 }),
      deleting: fc.boolean(),
      created: fc.integer({ min: 0, max: 5 }),
    })
    .map(({ port, created, ...fields }) => ({
      ...service(`s${index}`, fields),
      created: `2026-01-01T00:00:0${created}Z`,
      ports: [{ protocol: "TCP", port }],
    }));

const arbitraryWorld = fc.integer({ min: 1, max: 12 }).chain((count) =>
  fc.tuple(...Array.from({ length: count }, (_, index) => arbitraryService(index))),
);

describe("allocate: properties", () => {
  test("no two Services on one address unless they share a key and no port; none outside its pool", () => {
    fc.assert(
      fc.property(arbitraryWorld, (services) => {
        const { services: result } = run(services, POOLS);
        const byIp = new Map<string, L2ServiceFacts[]>();
        for (const facts of services) {
          const allocation = result.get(facts.key);
          const ips = allocation?.action === "allocate" ? allocation.ips : facts.deleting ? facts.ingress : [];
          for (const ip of ips) byIp.set(ip, [...(byIp.get(ip) ?? []), facts]);
          if (allocation?.action !== "allocate") continue;
          assert.equal(allocation.ips.length, facts.ipFamilies.length, "every family or nothing");
          allocation.ips.forEach((ip, index) => {
            const number = ipNumber(ip);
            const owner = POOLS.find(({ name }) => name === allocation.pools[index]);
            assert.ok(number && owner && poolHolds(owner, number.family, number.value), `${ip} outside its pool`);
          });
        }
        for (const [ip, holders] of byIp)
          for (const a of holders)
            for (const b of holders) {
              if (a === b || a.deleting || b.deleting) continue;
              const sharing = a.sharingKey !== undefined && a.sharingKey === b.sharingKey;
              assert.ok(sharing && a.ports[0]?.port !== b.ports[0]?.port, `${ip} held by ${a.key} and ${b.key}`);
            }
      }),
      { numRuns: 500 },
    );
  });

  test("an address drawn from a pool is its lowest free one: every address below it ends up held", () => {
    fc.assert(
      fc.property(arbitraryWorld, (services) => {
        const { services: result, used } = run(services, POOLS);
        // A Service being deleted holds its addresses until it is gone, in a pool or not.
        const deleting = services.flatMap((facts) => (facts.deleting && isOurs(facts, false) ? facts.ingress : []));
        const held = new Set([...[...used.values()].flatMap((ips) => [...ips]), ...deleting]);
        for (const facts of services) {
          const allocation = result.get(facts.key);
          const drawn = facts.requestedIps === undefined && facts.sharingKey === undefined;
          if (allocation?.action !== "allocate" || !drawn) continue;
          allocation.ips.forEach((ip, index) => {
            if (facts.ingress.includes(ip)) return; // kept, not drawn
            const { family, value } = ipNumber(ip) as NonNullable<ReturnType<typeof ipNumber>>;
            const owner = POOLS.find(({ name }) => name === allocation.pools[index]) as PoolFacts;
            for (const range of owner.ranges.filter((each) => each.family === family))
              for (let below = range.first; below <= range.last && below < value; below++) {
                if (owner.avoidBuggyIps && isBuggyIp(family, below)) continue;
                assert.ok(held.has(ipText(family, below)), `${facts.key} got ${ip}, but ${ipText(family, below)} is free`);
              }
          });
        }
      }),
      { numRuns: 500 },
    );
  });

  test("a restart (allocate again on what was written) changes nothing", () => {
    fc.assert(
      fc.property(arbitraryWorld, (services) => {
        const first = run(services, POOLS).services;
        const again = run(written(services, first), POOLS).services;
        const strip = (map: Map<string, Allocation>) =>
          [...map].map(([key, each]) => [key, each.action, each.action === "allocate" ? each.ips : each.rule]);
        assert.deepEqual(strip(again), strip(first));
        for (const each of again.values()) if (each.action === "allocate") assert.equal(each.rule, "kept");
      }),
      { numRuns: 500 },
    );
  });
});
