import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { parseLabelSelector } from "../kube/labelselector.ts";
import { cidrContains, parseCidr } from "../net/ip.ts";
import { hashString } from "../service/rendezvous.ts";
import {
  type AnnouncedService,
  type Announcer,
  type AnnouncersInput,
  announcerOf,
  assignAnnouncers,
  GRACE_MS,
  Picks,
} from "./announcers.ts";

const SEGMENT = parseCidr("192.0.2.0/24");
const OTHER_SEGMENT = parseCidr("198.51.100.0/24");

function announcer(name: string, fields: Partial<Announcer> = {}): Announcer {
  return { name, hash: hashString(name), live: true, segments: SEGMENT ? [SEGMENT] : [], ...fields };
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
  ready?: Record<string, string[]>;
  labels?: Record<string, Record<string, string>>;
  nowMs?: number;
  startedAtMs?: number;
}

function input(world: World): AnnouncersInput {
  const notReady = new Set(world.notReady ?? []);
  return {
    services: world.services,
    announcers: world.announcers,
    ineligible: (node) => (notReady.has(node) ? { rule: "not-ready", reason: "is not Ready (False)" } : undefined),
    readyNodes: (key) => new Set(world.ready?.[key] ?? []),
    nodeLabels: (node) => world.labels?.[node] ?? {},
    nowMs: world.nowMs ?? 100_000,
    startedAtMs: world.startedAtMs ?? 0,
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

  test("a live announcer no longer eligible is released, and a new one comes only after the grace", () => {
    const announcers = [announcer("old"), announcer("n2")];
    const nowMs = 100_000;
    const notReady = ["old"];
    const announced = [service("a", ["192.0.2.10"], { announcer: "old" })];
    const released = run({ services: announced, announcers, nowMs, notReady });
    assert.equal(released.decisions.get("ns/a")?.rule, "released");
    assert.equal(released.wakeAtMs, nowMs + GRACE_MS);
    const services = [service("a", ["192.0.2.10"], { releasedAtMs: nowMs })];
    const after = (ms: number) => decision({ services, announcers, nowMs: ms, notReady }, "a");
    assert.equal(after(nowMs + GRACE_MS - 1)?.rule, "release-grace");
    assert.equal(announcerOf(after(nowMs + GRACE_MS) ?? assert.fail()), "n2");
  });

  test("without an announcer at start: waits until the controller has run the grace", () => {
    const services = [service("a", ["192.0.2.10"], { unannouncedAtStart: true })];
    const world = { services, announcers: [announcer("n1")], startedAtMs: 50_000 };
    assert.equal(decision({ ...world, nowMs: 50_000 + GRACE_MS - 1 }, "a")?.rule, "start-grace");
    assert.equal(decision({ ...world, nowMs: 50_000 + GRACE_MS }, "a")?.rule, "assigned");
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
      releasedAgoMs: fc.option(fc.integer({ min: 0, max: 2 * GRACE_MS }), { nil: undefined }),
      unannouncedAtStart: fc.boolean(),
    }),
    { selector: ({ name }) => name },
  ),
  announcers: fc.uniqueArray(
    fc.record({ node: fc.constantFrom(...NODES), live: fc.boolean(), both: fc.boolean() }),
    { selector: ({ node }) => node },
  ),
  notReady: fc.subarray(NODES),
  ready: fc.subarray(NODES),
  sinceStartMs: fc.integer({ min: 0, max: 2 * GRACE_MS }),
});

type WorldArb = typeof worldArb extends fc.Arbitrary<infer T> ? T : never;

const NOW = 1_000_000;

function worldOf(arb: WorldArb): World {
  const segments = [SEGMENT, OTHER_SEGMENT].flatMap((each) => (each ? [each] : []));
  return {
    services: arb.services.map(({ name, ips, local, announcer: current, releasedAgoMs, unannouncedAtStart }) =>
      service(name, ips, {
        local,
        announcer: current,
        releasedAtMs: releasedAgoMs === undefined ? undefined : NOW - releasedAgoMs,
        unannouncedAtStart,
      }),
    ),
    announcers: arb.announcers.map(({ node, live, both }) =>
      announcer(node, { live, segments: both ? segments : segments.slice(0, 1) }),
    ),
    notReady: arb.notReady,
    ready: Object.fromEntries(arb.services.map(({ name }) => [`ns/${name}`, arb.ready])),
    nowMs: NOW,
    startedAtMs: NOW - arb.sinceStartMs,
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
          assert.ok(world.announcers.some((a) => a.name === node && a.live), `${node} is not live`);
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

  test("a release is followed by an assignment only after the grace", () => {
    fc.assert(
      fc.property(worldArb, (arb) => {
        const world = worldOf(arb);
        const { decisions, wakeAtMs } = run(world);
        for (const each of world.services) {
          const got = decisions.get(each.key);
          if (each.releasedAtMs !== undefined && each.releasedAtMs + GRACE_MS > NOW && each.announcer === undefined)
            assert.equal(announcerOf(got ?? assert.fail()), undefined, `${each.key} assigned within the grace`);
          if (got?.action === "wait") assert.ok(wakeAtMs !== undefined && wakeAtMs <= got.untilMs && got.untilMs > NOW);
        }
      }),
    );
  });
});
