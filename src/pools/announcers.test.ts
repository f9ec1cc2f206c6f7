import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { parseLabelSelector } from "../kube/labelselector.ts";
import { hashString } from "../loadbalancer/rendezvous.ts";
import { cidrContains, parseCidr } from "../net/ip.ts";
import { hasApplied } from "./announcement.ts";
import {
  type AnnouncedService,
  type Announcer,
  type AnnouncersInput,
  announcerOf,
  assignAnnouncers,
  Picks,
} from "./announcers.ts";

const SEGMENT = parseCidr("192.0.2.0/24");
const OTHER_SEGMENT = parseCidr("198.51.100.0/24");

/** Every live Lease here expires then, unless a test says otherwise. */
const EXPIRY_MS = 103_000;

function announcer(name: string, fields: Partial<Announcer> = {}): Announcer {
  const base = { name, hash: hashString(name), live: true, expiresAtMs: EXPIRY_MS, segments: SEGMENT ? [SEGMENT] : [] };
  return { ...base, ...fields };
}

const service = (name: string, ips: string[], fields: Partial<AnnouncedService> = {}): AnnouncedService => ({
  key: `ns/${name}`,
  ips,
  local: false,
  announcer: undefined,
  ...fields,
});

interface World {
  services: AnnouncedService[];
  announcers: Announcer[];
  notReady?: string[];
  /** Nodes whose Ready condition is Unknown (kubelet's heartbeat missing). */
  unknown?: string[];
  ready?: Record<string, string[]>;
  labels?: Record<string, Record<string, string>>;
  paused?: boolean;
}

function input(world: World): AnnouncersInput {
  const notReady = new Set(world.notReady ?? []);
  const unknown = new Set(world.unknown ?? []);
  return {
    services: world.services,
    announcers: world.announcers,
    ineligible: (node) =>
      notReady.has(node)
        ? { rule: "not-ready", reason: "is not Ready (False)" }
        : unknown.has(node)
          ? { rule: "ready-unknown", reason: "is not Ready (Unknown)" }
          : undefined,
    readyNodes: (key) => new Set(world.ready?.[key] ?? []),
    nodeLabels: (node) => world.labels?.[node] ?? {},
    ...(world.paused ? { paused: { rule: "stale-view", reason: "no renewal seen for 2500 ms" } } : {}),
  };
}

const run = (world: World) => assignAnnouncers(input(world));
const decision = (world: World, name: string) => run(world).decisions.get(`ns/${name}`);

describe("assignAnnouncers", () => {
  test("a Service gets a live announcer on its segment, chosen by rendezvous hashing", () => {
    const world = { services: [service("a", ["192.0.2.10"])], announcers: [announcer("n1"), announcer("n2")] };
    const got = decision(world, "a");
    assert.equal(got?.action, "announce");
    assert.equal(got?.rule, "assigned");
    assert.deepEqual(decision({ ...world, announcers: [...world.announcers].reverse() }, "a"), got);
  });

  test("only nodes on the segment, live, passing the node rules, with a ready endpoint when Local", () => {
    const announcers = [
      announcer("off-segment", { segments: OTHER_SEGMENT ? [OTHER_SEGMENT] : [] }),
      announcer("expired", { live: false }),
      announcer("not-ready"),
      announcer("no-endpoint"),
      announcer("good"),
    ];
    const services = [service("a", ["192.0.2.10"], { local: true })];
    const world = { services, announcers, notReady: ["not-ready"], ready: { "ns/a": ["good", "not-ready"] } };
    assert.deepEqual(announcerOf(decision(world, "a") ?? assert.fail()), "good");
  });

  test("Ready Unknown with a live Lease: the announcer stays and may be chosen (after an API outage every Node is)", () => {
    const services = [service("held", ["192.0.2.10"], { announcer: "n1" }), service("new", ["192.0.2.11"])];
    const announcers = [announcer("n1"), announcer("n2")];
    const everyUnknown = { services, announcers, unknown: ["n1", "n2"] };
    assert.deepEqual(decision(everyUnknown, "held"), { action: "announce", node: "n1", rule: "sticky", reason: "n1 stays" });
    assert.equal(decision(everyUnknown, "new")?.action, "announce");
    // Kubelet saying NotReady (False) still moves it; an expired Lease with Unknown is no announcer.
    assert.equal(decision({ services, announcers, notReady: ["n1"] }, "held")?.rule, "released");
    const expired = [announcer("n1", { live: false }), announcer("n2", { live: false })];
    assert.equal(decision({ services, announcers: expired, unknown: ["n1", "n2"] }, "new")?.rule, "no-announcer");
  });

  test("none eligible: no-announcer, and the reason names the first rule that left none", () => {
    const cases: [World, RegExp][] = [
      [
        { services: [service("a", ["192.0.2.10"])], announcers: [] },
        /no announcer Lease is live \(.*--lb-l2-node-selector/,
      ],
      [
        { services: [service("a", ["203.0.113.1"])], announcers: [announcer("n1")] },
        /no live announcer has a segment holding 203\.0\.113\.1/,
      ],
      [
        { services: [service("a", ["192.0.2.10"])], announcers: [announcer("n1")], notReady: ["n1"] },
        /n1 is not Ready/,
      ],
      [
        { services: [service("a", ["192.0.2.10"], { local: true })], announcers: [announcer("n1")] },
        /no live announcer on the segment has a ready endpoint of ns\/a/,
      ],
    ];
    for (const [world, reason] of cases) {
      const got = decision(world, "a");
      assert.equal(got?.rule, "no-announcer");
      assert.match(got?.reason ?? "", reason);
    }
  });

  test("node-selector annotations: every Service of the group's; one that does not parse names itself", () => {
    const labels = { n1: { zone: "a" }, n2: { zone: "b", fast: "yes" } };
    const announcers = [announcer("n1"), announcer("n2")];
    const services = [
      service("a", ["192.0.2.10"], { nodeSelector: parseLabelSelector("zone in (a,b)") }),
      service("b", ["192.0.2.10"], { nodeSelector: parseLabelSelector("fast=yes") }),
    ];
    assert.equal(announcerOf(decision({ services, announcers, labels }, "a") ?? assert.fail()), "n2");
    const none = [service("a", ["192.0.2.10"], { nodeSelector: parseLabelSelector("zone=c") })];
    assert.match(decision({ services: none, announcers, labels }, "a")?.reason ?? "", /matches zone=c$/);
    const bad = [service("a", ["192.0.2.10"], { nodeSelector: "annotation local-ccm.io/node-selector: bad" })];
    const reason = decision({ services: bad, announcers, labels }, "a")?.reason;
    assert.equal(reason, "ns/a: annotation local-ccm.io/node-selector: bad");
  });

  test("sticky: an eligible current announcer stays when another node joins", () => {
    for (const current of ["n1", "n2", "n3"]) {
      const services = [service("a", ["192.0.2.10"], { announcer: current })];
      const got = decision({ services, announcers: ["n1", "n2", "n3", "n4"].map((n) => announcer(n)) }, "a");
      assert.deepEqual(got, { action: "announce", node: current, rule: "sticky", reason: `${current} stays` });
    }
  });

  test("a current announcer whose Lease is not live, or gone, is replaced at once", () => {
    for (const announcers of [[announcer("old", { live: false }), announcer("n2")], [announcer("n2")]]) {
      const got = decision({ services: [service("a", ["192.0.2.10"], { announcer: "old" })], announcers }, "a");
      assert.equal(got?.action, "announce");
      assert.equal(got?.rule, "failover");
      assert.equal(announcerOf(got ?? assert.fail()), "n2");
    }
  });

  test("a live announcer no longer eligible is released; the next once it acknowledged, or its Lease lapsed", () => {
    const notReady = ["old"];
    const announced = [service("a", ["192.0.2.10"], { announcer: "old" })];
    const released = run({ services: announced, announcers: [announcer("old"), announcer("n2")], notReady });
    assert.equal(released.decisions.get("ns/a")?.rule, "released");
    assert.equal(released.wakeAtMs, EXPIRY_MS, "decided again when old's Lease may expire");
    const services = [service("a", ["192.0.2.10"], { releasedFrom: "old", releaseVersion: "1200" })];
    const after = (old: Partial<Announcer>) =>
      decision({ services, announcers: [announcer("old", old), announcer("n2")], notReady }, "a");
    // However long it takes: no timer moves it while old's Lease lives and says less.
    for (const applied of [undefined, "1199", "999", "not-a-version", ""]) {
      const waiting = after({ applied });
      assert.equal(waiting?.rule, "release-ack", `applied ${applied}`);
      assert.match(waiting?.reason ?? "", /released from old, which has applied .* of 1200/);
    }
    for (const old of [{ applied: "1200" }, { applied: "1300" }, { live: false }])
      assert.equal(announcerOf(after(old) ?? assert.fail()), "n2", JSON.stringify(old));
    // Gone (its agent deleted the Lease after withdrawing): nothing to wait for.
    const gone = decision({ services, announcers: [announcer("n2")] }, "a");
    assert.equal(announcerOf(gone ?? assert.fail()), "n2");
    // Back as the group's announcer: nobody else answers, no wait.
    const back = decision({ services, announcers: [announcer("old")] }, "a");
    assert.equal(announcerOf(back ?? assert.fail()), "old");
  });

  test("a release waiting for its acknowledgement holds the whole group, its kept announcer included", () => {
    const services = [
      service("a", ["192.0.2.10"], { announcer: "n2" }),
      service("b", ["192.0.2.10", "192.0.2.11"], { releasedFrom: "old", releaseVersion: "7" }),
    ];
    const { decisions } = run({ services, announcers: [announcer("old"), announcer("n2")], notReady: ["old"] });
    assert.equal(decisions.get("ns/a")?.rule, "sticky");
    assert.equal(decisions.get("ns/b")?.rule, "release-ack");
  });

  test("the Lease guard paused: an expired announcer keeps its group; a released one is waited for", () => {
    const services = [
      service("a", ["192.0.2.10"], { announcer: "old" }),
      service("b", ["192.0.2.10", "192.0.2.11"]),
      service("c", ["192.0.2.20"], { releasedFrom: "gone", releaseVersion: "9" }),
    ];
    const announcers = [announcer("old", { live: false }), announcer("gone", { live: false }), announcer("n2")];
    const { decisions, wakeAtMs } = run({ services, announcers, paused: true });
    for (const key of ["ns/a", "ns/b"]) {
      assert.equal(decisions.get(key)?.rule, "held");
      assert.equal(announcerOf(decisions.get(key) ?? assert.fail()), "old");
    }
    assert.match(decisions.get("ns/a")?.reason ?? "", /the Lease of old is not live, but no renewal seen for 2500 ms/);
    assert.equal(decisions.get("ns/c")?.rule, "release-ack");
    assert.equal(wakeAtMs, undefined, "a renewal or the guard lifting decides again, not a timer");
    const unpaused = run({ services, announcers });
    assert.equal(announcerOf(unpaused.decisions.get("ns/a") ?? assert.fail()), "n2");
    assert.equal(announcerOf(unpaused.decisions.get("ns/c") ?? assert.fail()), "n2");
  });

  test("Services sharing an address, transitively, have one announcer eligible for all of them", () => {
    const services = [
      service("a", ["192.0.2.10"]),
      service("b", ["192.0.2.10", "192.0.2.11"], { local: true }),
      service("c", ["192.0.2.11"], { announcer: "n3" }),
    ];
    const announcers = ["n1", "n2", "n3"].map((n) => announcer(n));
    const { decisions } = run({ services, announcers, ready: { "ns/b": ["n1", "n2"] } });
    const nodes = new Set([...decisions.values()].map((each) => announcerOf(each)));
    assert.equal(nodes.size, 1);
    assert.ok(!nodes.has("n3"), "n3 has no endpoint of b");
    assert.equal(decisions.get("ns/c")?.rule, "released");
  });
});

// ---- properties ----

const NODES = ["n0", "n1", "n2", "n3", "n4"];
const IPS = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "198.51.100.1"];

const worldArb = fc.record({
  services: fc.uniqueArray(
    fc.record({
      name: fc.constantFrom("a", "b", "c", "d", "e", "f"),
      ips: fc.uniqueArray(fc.constantFrom(...IPS), { minLength: 1, maxLength: 2 }),
      local: fc.boolean(),
      announcer: fc.option(fc.constantFrom(...NODES), { nil: undefined }),
      releasedFrom: fc.option(fc.constantFrom(...NODES), { nil: undefined }),
      releaseVersion: fc.constantFrom("5", "10", "15"),
    }),
    { selector: ({ name }) => name },
  ),
  announcers: fc.uniqueArray(
    fc.record({
      node: fc.constantFrom(...NODES),
      live: fc.boolean(),
      both: fc.boolean(),
      applied: fc.option(fc.constantFrom("1", "10", "20"), { nil: undefined }),
    }),
    { selector: ({ node }) => node },
  ),
  notReady: fc.subarray(NODES),
  ready: fc.subarray(NODES),
  paused: fc.boolean(),
});

type WorldArb = typeof worldArb extends fc.Arbitrary<infer T> ? T : never;

const NOW = 1_000_000;

function worldOf(arb: WorldArb): World {
  const segments = [SEGMENT, OTHER_SEGMENT].flatMap((each) => (each ? [each] : []));
  return {
    services: arb.services.map(({ name, ips, local, announcer: current, releasedFrom, releaseVersion }) =>
      service(name, ips, { local, announcer: current, releasedFrom, releaseVersion }),
    ),
    announcers: arb.announcers.map(({ node, live, both, applied }) =>
      announcer(node, { live, applied, expiresAtMs: NOW + 1000, segments: both ? segments : segments.slice(0, 1) }),
    ),
    notReady: arb.notReady,
    paused: arb.paused,
    ready: Object.fromEntries(arb.services.map(({ name }) => [`ns/${name}`, arb.ready])),
  };
}

describe("assignAnnouncers properties", () => {
  test("never two announcers for one address, never a node whose Lease is not live, deterministic", () => {
    fc.assert(
      fc.property(worldArb, (arb) => {
        const world = worldOf(arb);
        const { decisions } = run(world);
        const byIp = new Map<string, string>();
        for (const each of world.services) {
          const node = announcerOf(decisions.get(each.key) ?? assert.fail(`no decision for ${each.key}`));
          if (node === undefined) continue;
          const held = world.paused && world.services.some(({ announcer: named }) => named === node);
          assert.ok(world.announcers.some((a) => a.name === node && (a.live || held)), `${node} is not live`);
          for (const ip of each.ips) {
            assert.ok([undefined, node].includes(byIp.get(ip)), `${ip} on ${byIp.get(ip)} and ${node}`);
            byIp.set(ip, node);
          }
        }
        const reversed = { services: [...world.services].reverse(), announcers: [...world.announcers].reverse() };
        const shuffled = { ...world, ...reversed };
        const sorted = (map: Map<string, unknown>) => [...map].sort(([a], [b]) => (a < b ? -1 : 1));
        assert.deepEqual(sorted(run(shuffled).decisions), sorted(decisions));
      }),
    );
  });

  test("an eligible live announcer never moves", () => {
    fc.assert(
      fc.property(worldArb, (arb) => {
        const world = worldOf(arb);
        const { decisions } = run(world);
        for (const each of world.services) {
          const got = decisions.get(each.key);
          if (got?.action === "announce" && got.rule === "sticky") assert.equal(got.node, each.announcer);
        }
        // A lone Service (no sharing) whose announcer is eligible keeps it.
        const lone = world.services.filter((each) =>
          each.ips.every((ip) => world.services.filter((other) => other.ips.includes(ip)).length === 1),
        );
        const single = assignAnnouncers(input({ ...world, services: lone }));
        for (const each of lone) {
          const node = each.announcer;
          const live = world.announcers.find((a) => a.name === node && a.live);
          const onSegment = live && each.ips.every((ip) => live.segments.some((segment) => cidrContains(segment, ip)));
          const ready = !each.local || world.ready?.[each.key]?.includes(node ?? "");
          const fit = !world.notReady?.includes(node ?? "") && ready;
          if (onSegment && fit) assert.equal(announcerOf(single.decisions.get(each.key) ?? assert.fail()), node);
        }
      }),
    );
  });

  test("picks kept from plan to plan change no decision", () => {
    fc.assert(
      fc.property(worldArb, worldArb, (a, b) => {
        const picks = new Picks();
        // Without the node picked first in a: the same groups, other candidates.
        const first = [...run(worldOf(a)).decisions.values()].map(announcerOf).find((node) => node !== undefined);
        const without = { ...worldOf(a), announcers: worldOf(a).announcers.filter(({ name }) => name !== first) };
        for (const world of [worldOf(a), without, worldOf(b), worldOf(a), worldOf(a)])
          assert.deepEqual(assignAnnouncers({ ...input(world), picks }).decisions, run(world).decisions);
      }),
    );
  });

  test("an address goes to no node while another may still answer for it (released unacknowledged; paused)", () => {
    fc.assert(
      fc.property(worldArb, (arb) => {
        const world = worldOf(arb);
        const { decisions, wakeAtMs } = run(world);
        // A node may still answer while its Lease is live, or while the guard pauses (its expiry says nothing).
        const alive = (node: string | undefined) =>
          world.announcers.some(({ name, live }) => name === node && (live || world.paused));
        const mayAnswer = new Map<string, Set<string>>();
        for (const each of world.services) {
          const holders = [each.announcer];
          const from = world.announcers.find(({ name }) => name === each.releasedFrom);
          if (each.announcer === undefined && !hasApplied(from?.applied, each.releaseVersion))
            holders.push(from?.name);
          for (const node of holders)
            if (node !== undefined && alive(node))
              for (const ip of each.ips) mayAnswer.set(ip, (mayAnswer.get(ip) ?? new Set()).add(node));
        }
        for (const each of world.services) {
          const got = decisions.get(each.key) ?? assert.fail();
          const node = announcerOf(got);
          // A node new to an address: nobody else may be answering for it.
          for (const ip of each.ips) {
            const holders = mayAnswer.get(ip) ?? new Set();
            if (node !== undefined && !holders.has(node))
              assert.deepEqual([...holders], [], `${ip} given to ${node} while ${[...holders]} may answer`);
          }
          if (got.action === "wait") assert.ok(wakeAtMs === undefined || wakeAtMs <= got.untilMs);
          if (got.action === "wait") assert.ok(got.untilMs > NOW);
        }
      }),
    );
  });
});
