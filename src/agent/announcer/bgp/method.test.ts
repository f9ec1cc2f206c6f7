// The BGP method from plain data: the desired set as routes per peer (tables, properties through ribout.ts's
// planner), and the method's calls into its sessions (a fake session: pure logic, nothing on the network).
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { createLogger } from "../../../cli/log.ts";
import type { Update } from "../../../net/bgp/update.ts";
import { type Desired, decideDesired } from "../desired.ts";
import type { BfdClient, BfdSession } from "../bfd/session.ts";
import type { Phase, SessionState } from "./fsm.ts";
import { type BgpPeer, podRoutesFor, routesFor, startBgpMethod } from "./method.ts";
import { planUpdates, type Route } from "./ribout.ts";
import type { BgpSession, SessionOptions } from "./session.ts";

const desired = (...addresses: string[]): Desired => ({
  addresses: addresses.map((address) => ({ address, services: ["default/web"] })),
  skipped: [],
});
const DUAL = { 4: "192.0.2.1", 6: "2001:db8::1" };

test("routes: a host route per address, next hop of its family; a family without one is left out by rule", () => {
  const cases: [string, { 4?: string; 6?: string }, string[], [string, string][], string[]][] = [
    [
      "dual-stack peer",
      DUAL,
      ["198.51.100.7", "2001:db8:5::7"],
      [
        ["198.51.100.7/32", DUAL[4]],
        ["2001:db8:5::7/128", DUAL[6]],
      ],
      [],
    ],
    ["IPv4 only", { 4: DUAL[4] }, ["198.51.100.7", "2001:db8:5::7"], [["198.51.100.7/32", DUAL[4]]], ["2001:db8:5::7"]],
    ["IPv6 only", { 6: DUAL[6] }, ["198.51.100.7"], [], ["198.51.100.7"]],
    ["nothing desired", DUAL, [], [], []],
  ];
  for (const [name, nextHops, addresses, routes, left] of cases) {
    const result = routesFor(desired(...addresses), { nextHops });
    assert.deepEqual(result.routes, routes.map(([prefix, nextHop]) => ({ prefix, nextHop })), name);
    const skipped = result.skipped.map((skip) => [skip.address, skip.rule]);
    assert.deepEqual(skipped, left.map((a) => [a, "no-next-hop"]), name);
  }
  const withAttributes = routesFor(desired("198.51.100.7"), { nextHops: DUAL }, (entry) => ({
    communities: [`65000:${entry.services.length}`],
    localPref: 200,
  }));
  assert.deepEqual(withAttributes.routes, [
    { prefix: "198.51.100.7/32", nextHop: DUAL[4], communities: ["65000:1"], localPref: 200 },
  ]);
});

/** The prefixes an UPDATE announces and withdraws, either family. */
function prefixes(updates: Update[]) {
  return {
    announced: updates.flatMap((u) => [...u.nlri, ...(u.attributes.mpReach?.nlri ?? [])]).sort(),
    withdrawn: updates.flatMap((u) => [...u.withdrawn, ...(u.attributes.mpUnreach?.withdrawn ?? [])]).sort(),
  };
}

test("routes (property): from one desired set to the next, the peer hears exactly the differences", () => {
  const address = fc.oneof(
    fc.nat(255).map((n) => `198.51.100.${n}`),
    fc.nat(0xffff).map((n) => `2001:db8:5::${n.toString(16)}`),
  );
  const peer = { myAsn: 65001, ibgp: false, families: [4, 6] as (4 | 6)[] };
  const host = (a: string) => `${a}/${a.includes(":") ? 128 : 32}`;
  fc.assert(
    fc.property(fc.uniqueArray(address), fc.uniqueArray(address), (before, after) => {
      const first = planUpdates(new Map(), routesFor(desired(...before), { nextHops: DUAL }).routes, peer);
      assert.deepEqual(prefixes(first.updates), { announced: before.map(host).sort(), withdrawn: [] });
      const next = planUpdates(first.advertised, routesFor(desired(...after), { nextHops: DUAL }).routes, peer);
      assert.deepEqual(prefixes(next.updates), {
        announced: after.filter((a) => !before.includes(a)).map(host).sort(),
        withdrawn: before.filter((a) => !after.includes(a)).map(host).sort(),
      });
    }),
  );
});

/** A session that records what the method asks of it (in `phase`, when the test reads it). */
function fakeSessions(phase?: (peer: string) => Phase) {
  const calls: string[] = [];
  const routes = new Map<string, readonly Route[]>();
  const start = (options: SessionOptions): BgpSession => {
    const peer = options.peerAddress;
    calls.push(`${peer} start`);
    return {
      setRoutes(next) {
        routes.set(peer, next);
        calls.push(`${peer} routes ${next.map((route) => `${route.prefix}>${route.nextHop}`).join(",")}`);
      },
      offer: () => assert.fail("the method takes no connections"),
      bfd: (up) => calls.push(`${peer} bfd ${up ? "up" : "down"}`),
      state: () => (phase ? ({ phase: phase(peer) } as SessionState) : assert.fail("the method reads no state")),
      stop: (restarting) => calls.push(`${peer} stop${restarting ? " restarting" : ""}`),
    };
  };
  return { calls, routes, start };
}

const config = { myAsn: 65001, peerAsn: 65010, routerId: "192.0.2.1", holdTime: 9, families: [4, 6] as (4 | 6)[] };
const log = createLogger({ verbosity: 0, format: "text", write: () => {} });

test("method: each peer gets the desired set with its own next hops; stopping withdraws all, then stops", async () => {
  const fake = fakeSessions();
  const method = startBgpMethod({
    log,
    startSession: fake.start,
    peers: [
      { session: { config, peerAddress: "192.0.2.2" }, nextHops: { 4: "192.0.2.1" } },
      { session: { config, peerAddress: "192.0.2.6" }, nextHops: { 4: "192.0.2.5", 6: "2001:db8::5" } },
    ],
  });
  const started = ["192.0.2.2 start", "192.0.2.2 routes ", "192.0.2.6 start", "192.0.2.6 routes "];
  assert.deepEqual(fake.calls.splice(0), started);
  // What the loop hands over: the Services of the watch through desired.ts.
  const service = (name: string, ips: string[]) => ({
    metadata: { namespace: "default", name },
    spec: { type: "LoadBalancer" },
    status: { loadBalancer: { ingress: ips.map((ip) => ({ ip })) } },
  });
  method.apply(decideDesired([service("web", ["198.51.100.7", "2001:db8:5::7"])], () => undefined));
  assert.deepEqual(fake.calls.splice(0), [
    "192.0.2.2 routes 198.51.100.7/32>192.0.2.1",
    "192.0.2.6 routes 198.51.100.7/32>192.0.2.5,2001:db8:5::7/128>2001:db8::5",
  ]);
  method.apply(desired());
  assert.deepEqual(fake.calls.splice(0), ["192.0.2.2 routes ", "192.0.2.6 routes "]);
  method.apply(desired("198.51.100.8"));
  fake.calls.splice(0);
  await method.stop(false);
  const withdrawn = ["192.0.2.2 routes ", "192.0.2.2 stop", "192.0.2.6 routes ", "192.0.2.6 stop"];
  assert.deepEqual(fake.calls.splice(0), withdrawn, "each peer withdrawn first, then Ceased");
  method.apply(desired("198.51.100.9"));
  await method.stop(false);
  assert.deepEqual(fake.calls, [], "after stop, neither apply nor a second stop reaches a session");
});

test("method: a change of peers touches only its sessions; graceful restart keeps routes at shutdown", async () => {
  const fake = fakeSessions();
  const peer = (address: string, nextHop: string, holdTime = 9, gracefulRestart = false) => ({
    name: address,
    session: {
      config: {
        ...config,
        holdTime,
        ...(gracefulRestart ? { gracefulRestart: { restartTime: 120, restarting: true } } : {}),
      },
      peerAddress: address,
    },
    nextHops: { 4: nextHop },
  });
  const method = startBgpMethod({ log, startSession: fake.start, peers: [peer("192.0.2.2", "192.0.2.1")] });
  method.apply(desired("198.51.100.7"));
  fake.calls.splice(0);
  const cases: [string, ReturnType<typeof peer>[], string[]][] = [
    ["the same peers again: nothing", [peer("192.0.2.2", "192.0.2.1")], []],
    [
      "a peer added: only it starts, with the routes",
      [peer("192.0.2.2", "192.0.2.1"), peer("192.0.2.6", "192.0.2.5")],
      ["192.0.2.6 start", "192.0.2.6 routes 198.51.100.7/32>192.0.2.5"],
    ],
    [
      "a peer's hold time changed: only its session restarts (withdrawn, Ceased, started)",
      [peer("192.0.2.2", "192.0.2.1"), peer("192.0.2.6", "192.0.2.5", 30)],
      ["192.0.2.6 routes ", "192.0.2.6 stop", "192.0.2.6 start", "192.0.2.6 routes 198.51.100.7/32>192.0.2.5"],
    ],
    [
      "a next hop changed: that session restarts",
      [peer("192.0.2.2", "192.0.2.9"), peer("192.0.2.6", "192.0.2.5", 30)],
      ["192.0.2.2 routes ", "192.0.2.2 stop", "192.0.2.2 start", "192.0.2.2 routes 198.51.100.7/32>192.0.2.9"],
    ],
    [
      "a peer gone: withdrawn, then Ceased",
      [peer("192.0.2.6", "192.0.2.5", 30)],
      ["192.0.2.2 routes ", "192.0.2.2 stop"],
    ],
    [
      "graceful restart turned on: a restart",
      [peer("192.0.2.6", "192.0.2.5", 30, true), peer("192.0.2.10", "192.0.2.9")],
      [
        "192.0.2.6 routes ",
        "192.0.2.6 stop",
        "192.0.2.6 start",
        "192.0.2.6 routes 198.51.100.7/32>192.0.2.5",
        "192.0.2.10 start",
        "192.0.2.10 routes 198.51.100.7/32>192.0.2.9",
      ],
    ],
  ];
  for (const [name, peers, calls] of cases) {
    method.setPeers(peers);
    assert.deepEqual(fake.calls.splice(0), calls, name);
  }
  await method.stop(true);
  assert.deepEqual(
    fake.calls.splice(0),
    ["192.0.2.6 stop restarting", "192.0.2.10 routes ", "192.0.2.10 stop"],
    "at shutdown, the peer with graceful restart keeps our routes (no withdrawal, no Cease); the other is withdrawn",
  );
});

test("method: BFD beside the sessions of peers with bfd; new timers reconfigure it; Services never do", async () => {
  const fake = fakeSessions();
  const startBfd = (peer: BgpPeer, client: BfdClient): BfdSession => {
    const address = peer.session.peerAddress;
    fake.calls.push(`${address} bfd-start ${JSON.stringify(peer.bfd)}`);
    // the BGP session it tells is that peer's
    client.bfd(false);
    return {
      configure: (next) => void fake.calls.push(`${address} bfd-configure ${next.minTx}`),
      state: () => assert.fail("the method reads no BFD state"),
      stop: () => void fake.calls.push(`${address} bfd-stop`),
      abandon: () => void fake.calls.push(`${address} bfd-abandon`),
    };
  };
  const timers = { minRx: 300, minTx: 300, multiplier: 3 };
  const peer = (address: string, bfd?: typeof timers, holdTime = 9): BgpPeer => ({
    name: address,
    session: {
      config: { ...config, holdTime, gracefulRestart: { restartTime: 120, restarting: true } },
      peerAddress: address,
    },
    nextHops: { 4: "192.0.2.1" },
    ...(bfd ? { bfd } : {}),
  });
  const peers = [peer("192.0.2.2", timers), peer("192.0.2.6")];
  const method = startBgpMethod({ log, startSession: fake.start, startBfd, peers });
  assert.deepEqual(fake.calls.splice(0), [
    "192.0.2.2 start",
    `192.0.2.2 bfd-start ${JSON.stringify(timers)}`,
    "192.0.2.2 bfd down",
    "192.0.2.2 routes ",
    "192.0.2.6 start",
    "192.0.2.6 routes ",
  ]);
  method.apply(desired("198.51.100.7"));
  method.apply(desired("198.51.100.7", "198.51.100.8"));
  assert.ok(!fake.calls.splice(0).some((call) => call.includes("bfd")), "a change of Services leaves BFD alone");
  const cases: [string, BgpPeer[], string[]][] = [
    ["the same again: nothing", [peer("192.0.2.2", timers), peer("192.0.2.6")], []],
    [
      "new timers: the BFD session is reconfigured, the BGP session untouched",
      [peer("192.0.2.2", { ...timers, minTx: 100 }), peer("192.0.2.6")],
      ["192.0.2.2 bfd-configure 100"],
    ],
    [
      "bfd removed: BFD stops, the BGP session untouched",
      [peer("192.0.2.2"), peer("192.0.2.6")],
      ["192.0.2.2 bfd-stop"],
    ],
    [
      "bfd added: BFD starts beside the running session",
      [peer("192.0.2.2"), peer("192.0.2.6", timers)],
      [`192.0.2.6 bfd-start ${JSON.stringify(timers)}`, "192.0.2.6 bfd down"],
    ],
    [
      "a session setting changed: both restart",
      [peer("192.0.2.2"), peer("192.0.2.6", timers, 30)],
      [
        "192.0.2.6 routes ",
        "192.0.2.6 stop",
        "192.0.2.6 bfd-stop",
        "192.0.2.6 start",
        `192.0.2.6 bfd-start ${JSON.stringify(timers)}`,
        "192.0.2.6 bfd down",
        "192.0.2.6 routes 198.51.100.7/32>192.0.2.1,198.51.100.8/32>192.0.2.1",
      ],
    ],
  ];
  for (const [name, peers, calls] of cases) {
    method.setPeers(peers);
    assert.deepEqual(fake.calls.splice(0), calls, name);
  }
  await method.stop(true);
  const graceful = "graceful restart: the connection closes without Cease first, then BFD goes silent (no AdminDown)";
  assert.deepEqual(
    fake.calls.splice(0),
    ["192.0.2.2 stop restarting", "192.0.2.6 stop restarting", "192.0.2.6 bfd-abandon"],
    graceful,
  );
});

test("pod routes: each pod CIDR to a peer that takes them, next hop of its family; none to one that opts out", () => {
  const cidrs = ["10.244.1.0/24", "fd00:10:244:1::/64"];
  const cases: [string, Pick<BgpPeer, "nextHops" | "podCidrs">, string[], string[]][] = [
    ["dual-stack", { nextHops: DUAL, podCidrs: true }, [`10.244.1.0/24>${DUAL[4]}`, `fd00:10:244:1::/64>${DUAL[6]}`], []],
    ["no IPv6 next hop", { nextHops: { 4: DUAL[4] }, podCidrs: true }, [`10.244.1.0/24>${DUAL[4]}`], [cidrs[1]!]],
    ["opted out", { nextHops: DUAL, podCidrs: false }, [], []],
    ["not said: none", { nextHops: DUAL }, [], []],
  ];
  for (const [name, peer, routes, skipped] of cases) {
    const result = podRoutesFor(cidrs, peer);
    assert.deepEqual(result.routes.map((route) => `${route.prefix}>${route.nextHop}`), routes, name);
    assert.deepEqual(result.skipped.map((skip) => skip.address), skipped, name);
  }
});

test("method: pod CIDRs beside the addresses in one RIB-out per peer; a change is UPDATEs, an opt-out no restart", async () => {
  const established = new Set<string>();
  const fake = fakeSessions((peer) => (established.has(peer) ? "established" : "connecting"));
  const peer = (address: string, nextHop: string, podCidrs: boolean): BgpPeer => ({
    name: address,
    session: { config: { ...config, gracefulRestart: { restartTime: 120, restarting: true } }, peerAddress: address },
    nextHops: { 4: nextHop },
    podCidrs,
  });
  const method = startBgpMethod({
    log,
    startSession: fake.start,
    peers: [peer("192.0.2.2", "192.0.2.1", true), peer("192.0.2.6", "192.0.2.5", false)],
  });
  fake.calls.splice(0);
  const cases: [string, () => void, string[]][] = [
    [
      "the node's pod CIDRs: to the peer that takes them",
      () => method.setPodCidrs(["10.244.1.0/24"]),
      ["192.0.2.2 routes 10.244.1.0/24>192.0.2.1", "192.0.2.6 routes "],
    ],
    ["the same again: nothing", () => method.setPodCidrs(["10.244.1.0/24"]), []],
    [
      "a Service: both sets in one setRoutes",
      () => method.apply(desired("198.51.100.7")),
      ["192.0.2.2 routes 198.51.100.7/32>192.0.2.1,10.244.1.0/24>192.0.2.1", "192.0.2.6 routes 198.51.100.7/32>192.0.2.5"],
    ],
    [
      "a new pod CIDR: the Services' routes unchanged",
      () => method.setPodCidrs(["10.244.9.0/24"]),
      ["192.0.2.2 routes 198.51.100.7/32>192.0.2.1,10.244.9.0/24>192.0.2.1", "192.0.2.6 routes 198.51.100.7/32>192.0.2.5"],
    ],
    [
      "the second peer opts in: handed the pod CIDR, no restart",
      () => method.setPeers([peer("192.0.2.2", "192.0.2.1", true), peer("192.0.2.6", "192.0.2.5", true)]),
      ["192.0.2.6 routes 198.51.100.7/32>192.0.2.5,10.244.9.0/24>192.0.2.5"],
    ],
    [
      "the first opts out: withdrawn from it, no restart",
      () => method.setPeers([peer("192.0.2.2", "192.0.2.1", false), peer("192.0.2.6", "192.0.2.5", true)]),
      ["192.0.2.2 routes 198.51.100.7/32>192.0.2.1"],
    ],
    [
      "the Services gone: the pod CIDR stays",
      () => method.apply(desired()),
      ["192.0.2.2 routes ", "192.0.2.6 routes 10.244.9.0/24>192.0.2.5"],
    ],
    ["no pod CIDR (the Node being deleted)", () => method.setPodCidrs([]), ["192.0.2.2 routes ", "192.0.2.6 routes "]],
  ];
  for (const [name, change, calls] of cases) {
    change();
    assert.deepEqual(fake.calls.splice(0), calls, name);
  }
  method.setPodCidrs(["10.244.9.0/24"]);
  assert.deepEqual(method.podCidrsHeld(), new Map(), "no session Established: nobody holds them");
  established.add("192.0.2.6").add("192.0.2.2");
  assert.deepEqual(method.podCidrsHeld(), new Map([["192.0.2.2", []], ["192.0.2.6", ["10.244.9.0/24"]]]));
  fake.calls.splice(0);
  await method.stop(true);
  assert.deepEqual(fake.calls, ["192.0.2.2 stop restarting", "192.0.2.6 stop restarting"], "graceful restart keeps them");
});

test("pod routes (property): a pod CIDR change is its withdrawal and the new one's announcement, nothing else", () => {
  const cidr = fc.nat(255).map((n) => `10.244.${n}.0/24`);
  const peer = { myAsn: 65001, ibgp: false, families: [4, 6] as (4 | 6)[] };
  const all = (addresses: string[], cidrs: string[]) => [
    ...routesFor(desired(...addresses), { nextHops: DUAL }).routes,
    ...podRoutesFor(cidrs, { nextHops: DUAL, podCidrs: true }).routes,
  ];
  fc.assert(
    fc.property(fc.uniqueArray(fc.nat(255).map((n) => `198.51.100.${n}`)), cidr, cidr, (addresses, before, after) => {
      const first = planUpdates(new Map(), all(addresses, [before]), peer);
      const next = planUpdates(first.advertised, all(addresses, [after]), peer);
      const changed = before === after ? [] : [after];
      assert.deepEqual(prefixes(next.updates), { announced: changed, withdrawn: before === after ? [] : [before] });
    }),
  );
});
