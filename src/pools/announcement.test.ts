import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import {
  decideHolding,
  PEER_PROBE_INTERVAL_MS,
  restrictAnnouncements,
  shouldProbe,
} from "../agent/announcer/arp-ndp/holding.ts";
import { announcerOf, assignAnnouncers } from "./announcers.ts";
import { AnnouncerLeases } from "./leases.ts";
import {
  ANNOUNCER_LEASE_PREFIX,
  announceDeadline,
  APPLIED_ANNOTATION,
  announcerLabelValue,
  conflictsAnnotation,
  MAX_LEASE_CONFLICTS,
  parseConflicts,
  announcerLeaseName,
  LEASE_DURATION_SECONDS,
  leaseExpiry,
  leaseNode,
  RENEW_INTERVAL_MS,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";

test("announcer Lease names: the prefix and the node, read back; none past 253 characters", () => {
  assert.equal(announcerLeaseName("worker-1"), `${ANNOUNCER_LEASE_PREFIX}worker-1`);
  assert.equal(leaseNode(`${ANNOUNCER_LEASE_PREFIX}worker-1`), "worker-1");
  assert.equal(leaseNode("worker-1"), undefined);
  assert.equal(leaseNode(ANNOUNCER_LEASE_PREFIX), undefined);
  assert.equal(leaseNode("node-lifecycle-controller"), undefined);
  const longest = "a".repeat(253 - ANNOUNCER_LEASE_PREFIX.length);
  assert.equal(announcerLeaseName(longest)?.length, 253);
  assert.equal(announcerLeaseName(`${longest}a`), undefined);
});

test("announcer label values: the node name when it is a label value, else a 55-character hash of it", () => {
  assert.equal(announcerLabelValue("worker-1"), "worker-1");
  assert.equal(announcerLabelValue("Worker_1.lab"), "Worker_1.lab");
  const long = `${"n".repeat(63)}.example.com`;
  assert.match(announcerLabelValue(long), /^sha256\.[0-9a-f]{48}$/);
  assert.notEqual(announcerLabelValue(long), announcerLabelValue(`${long}x`));
  assert.match(announcerLabelValue("-starts-with-dash"), /^sha256\./);
  fc.assert(
    fc.property(fc.string({ maxLength: 253 }), (node) => {
      const value = announcerLabelValue(node);
      assert.ok(value.length <= 63);
      assert.match(value, /^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)$/);
      assert.equal(announcerLabelValue(node), value, "stable");
    }),
  );
});

test("an agent stops announcing before the controller can count its Lease expired, whenever it saw the renewal", () => {
  assert.ok(RENEW_INTERVAL_MS * 2 < LEASE_DURATION_SECONDS * 1000, "one lost renewal does not stop announcing");
  fc.assert(
    fc.property(fc.nat(1e9), fc.nat(10_000), fc.integer({ min: 1, max: 60 }), (sentAt, seenAfter, seconds) => {
      // The controller sees the renewal no sooner than the agent sent it.
      assert.ok(announceDeadline(sentAt, seconds) < leaseExpiry(sentAt + seenAfter, seconds));
    }),
  );
});

// ---- the handover, modelled: the controller's decisions (assignAnnouncers, AnnouncerLeases with its guard) and
// the agents' (decideHolding, yields, the relist after a lapse) over random outages, stops, cut links, dead
// watches and node readiness, on one clock in 100 ms ticks. At every tick, at most one node that its peers can
// hear announces the address; but for one case: a node given the address while its link was cut off from the
// holder's (carrier up, frames lost: the holder past its deadline kept it on its other peers' answers), back on the
// link after its gratuitous ARP (unsolicited NAs) ended. The holder's next probe for the address (ARP, DAD) hears it
// and yields: two answer for at most that long.

interface ModelAgent {
  name: string;
  stopped: boolean;
  /** Its connections to the API work. */
  apiLink: boolean;
  /** Its Service watch delivers (the renewals and a relist may work while it does not). */
  watching: boolean;
  /** Its link to the segment passes frames. */
  linked: boolean;
  validUntil: number;
  peerAnsweredAt: number;
  /** The Service version its cache shows, and the resourceVersion it has reached. */
  cached: number;
  applied: number;
  lapsed: boolean;
  rejoin?: { since: number; kept: boolean };
  unconfirmed?: number;
  yielded: boolean;
  announcing: boolean;
  phase: number;
}

type ModelAction =
  | { kind: "apiserver" }
  | { kind: "controller-blind" }
  | { kind: "agent"; node: 0 | 1 | 2; what: "apiLink" | "watching" | "linked" | "stopped" | "notReady" };

/** The model runs for an address of each family: the agents hold and yield both by one rule (holding.ts). */
const ADDRESSES = ["192.0.2.10", "2001:db8::10"] as const;
const LINK = { index: 2, name: "eth0", mac: "02:00:00:00:00:01" };

/** Runs the model; returns the longest time two nodes were heard announcing at once (ms). */
function runModel(address: string, actions: { tick: number; action: ModelAction }[], ticks: number): number {
  let dualSince: number | undefined;
  let longestDual = 0;
  let rv = 1;
  const versions: { rv: number; announcer?: string; releasedFrom?: string }[] = [{ rv: 1 }];
  const latest = () => versions.at(-1) as (typeof versions)[number];
  const agents: ModelAgent[] = ["a", "b", "c"].map((name, i) => ({
    name,
    stopped: false,
    apiLink: true,
    watching: true,
    linked: true,
    validUntil: -Infinity,
    peerAnsweredAt: -Infinity,
    cached: 0,
    applied: 1,
    lapsed: false,
    yielded: false,
    announcing: false,
    phase: i * 300,
  }));
  const leaseObjects = new Map<string, Lease>();
  const leases = new AnnouncerLeases();
  const notReady = new Set<string>();
  let apiserver = true;
  let blind = false;
  let releaseVersion: number | undefined;
  /** When each node started claiming the address (its gratuitous ARP goes on for 5 s). */
  const claimingSince = new Map<string, number>();
  for (let tick = 0; tick < ticks; tick++) {
    const now = tick * 100;
    for (const { action } of actions.filter((each) => each.tick === tick)) {
      if (action.kind === "apiserver") apiserver = !apiserver;
      else if (action.kind === "controller-blind") blind = !blind;
      else if (action.what === "notReady") {
        const name = agents[action.node]?.name as string;
        if (!notReady.delete(name)) notReady.add(name);
      } else {
        const agent = agents[action.node] as ModelAgent;
        agent[action.what] = !agent[action.what];
      }
    }
    // Renewals (each agent's second), a relist after a lapse.
    for (const agent of agents) {
      if (agent.stopped || (now - agent.phase) % 1000 !== 0 || !apiserver || !agent.apiLink) continue;
      rv++;
      const lease: Lease = {
        metadata: {
          name: announcerLeaseName(agent.name),
          annotations: {
            [SEGMENTS_ANNOTATION]: "192.0.2.0/24,2001:db8::/64",
            [APPLIED_ANNOTATION]: String(agent.applied),
          },
        },
        spec: { renewTime: `${now}` },
      };
      leaseObjects.set(agent.name, lease);
      agent.validUntil = announceDeadline(now, LEASE_DURATION_SECONDS);
      if (agent.lapsed) {
        agent.rejoin = { since: rv, kept: agent.announcing };
        [agent.cached, agent.applied] = [versions.length - 1, rv]; // the relist: as of now
      }
      agent.lapsed = false;
    }
    // The controller: what its Lease watch delivers, then one plan and at most one write.
    if (apiserver && !blind) {
      for (const lease of leaseObjects.values()) leases.seen(lease, now);
      const guard = leases.guard(now);
      const { announcers } = leases.announcers(now);
      const current = latest();
      const service = {
        key: "ns/web",
        ips: [address],
        local: false,
        announcer: current.announcer,
        releasedFrom: current.releasedFrom,
        releaseVersion: String(releaseVersion ?? current.rv),
      };
      const decision = assignAnnouncers({
        services: [service],
        announcers,
        ineligible: (node) => (notReady.has(node) ? { rule: "not-ready", reason: "NotReady" } : undefined),
        nodeLabels: () => ({}),
        readyNodes: () => new Set(),
        ...(guard.paused ? { paused: guard } : {}),
      }).decisions.get("ns/web");
      const next = decision && announcerOf(decision);
      if (next !== current.announcer) {
        const liveBefore = current.announcer !== undefined && leases.isLive(current.announcer, now);
        const releasedFrom = next === undefined && liveBefore ? current.announcer : undefined;
        versions.push({ rv: ++rv, announcer: next, releasedFrom });
        releaseVersion = releasedFrom === undefined ? undefined : rv;
      }
    }
    // The agents' watches, a bookmark a minute; their holding, yields and the check.
    for (const agent of agents) {
      if (agent.stopped || !apiserver || !agent.apiLink || !agent.watching) continue;
      agent.cached = versions.length - 1;
      agent.applied = Math.max(agent.applied, latest().rv, now % 60_000 === 0 ? rv : 0);
    }
    for (const agent of agents) {
      if (agent.stopped) continue;
      if (agent.linked && shouldProbe(now, agent.validUntil) && now % 500 === 0) agent.peerAnsweredAt = now;
      if (agent.validUntil !== -Infinity && now >= agent.validUntil) agent.lapsed = true;
      if (agent.rejoin && agent.applied >= agent.rejoin.since)
        [agent.rejoin, agent.unconfirmed] = [undefined, agent.applied];
      if (agent.unconfirmed !== undefined && agent.applied !== agent.unconfirmed)
        [agent.unconfirmed, agent.yielded] = [undefined, false];
      const { validUntil: validUntilMs, peerAnsweredAt: peerAnsweredAtMs } = agent;
      const holding = decideHolding({ nowMs: now, validUntilMs, peerAnsweredAtMs });
      const assigned = versions[agent.cached]?.announcer === agent.name;
      const was = agent.announcing;
      const wanted = { link: LINK, addresses: assigned ? [address] : [] };
      const yielded = new Set(agent.yielded ? [address] : []);
      const kept = agent.rejoin && new Set(agent.rejoin.kept ? [address] : []);
      agent.announcing = holding.announce && restrictAnnouncements(wanted, yielded, kept).kept.includes(address);
      if (agent.announcing && !was) claimingSince.set(agent.name, now);
      if (!agent.announcing) claimingSince.delete(agent.name);
    }
    for (const agent of agents) {
      const mayYield = now >= agent.validUntil || agent.rejoin !== undefined || agent.unconfirmed !== undefined;
      // Another's gratuitous ARP (5 s of them from its start), or, past the deadline, its answer to this one's
      // probe for the address (every 500 ms).
      const asks = now >= agent.validUntil && now % 500 === 0;
      const heard = [...claimingSince].some(
        ([name, since]) =>
          name !== agent.name && (now - since <= 5000 || asks) && agents.find((o) => o.name === name)?.linked,
      );
      if (agent.announcing && agent.linked && !agent.stopped && mayYield && heard)
        [agent.yielded, agent.announcing] = [true, false];
    }
    const heardAnnouncing = agents.filter((agent) => agent.announcing && agent.linked && !agent.stopped);
    if (heardAnnouncing.length <= 1) dualSince = undefined;
    else longestDual = Math.max(longestDual, now - (dualSince ??= now) + 100);
  }
  return longestDual;
}

for (const address of ADDRESSES)
  test(`the handover model (${address}): a node given the address while cut off from the link, back: one probe`, () => {
    // c's frames are lost from the start (its carrier up, its Lease renewed); a loses the API at 100 ms, holds on its
    // peers' answers; the controller gives the address to c at 3 s; c is back on the link at 8.1 s.
    const dual = runModel(
      address,
      [
        { tick: 0, action: { kind: "agent", node: 2, what: "linked" } },
        { tick: 1, action: { kind: "agent", node: 0, what: "apiLink" } },
        { tick: 81, action: { kind: "agent", node: 2, what: "linked" } },
      ],
      1200,
    );
    assert.ok(dual > 0 && dual <= PEER_PROBE_INTERVAL_MS, `${dual} ms`);
  });

for (const address of ADDRESSES)
  test(`the handover model (${address}): never two announcers heard on the link, whatever fails when`, () => {
    const TICKS = 1200; // two minutes
    const action: fc.Arbitrary<ModelAction> = fc.oneof(
      fc.constant({ kind: "apiserver" } as const),
      fc.constant({ kind: "controller-blind" } as const),
      fc.record({
        kind: fc.constant("agent" as const),
        node: fc.constantFrom(0 as const, 1 as const, 2 as const),
        what: fc.constantFrom(...(["apiLink", "watching", "linked", "stopped", "notReady"] as const)),
      }),
    );
    fc.assert(
      fc.property(
        fc.array(fc.record({ tick: fc.integer({ min: 0, max: TICKS - 1 }), action }), { maxLength: 30 }),
        (list) => {
          const dual = runModel(address, list, TICKS);
          assert.ok(dual <= PEER_PROBE_INTERVAL_MS, `two nodes heard announcing for ${dual} ms`);
        },
      ),
      { numRuns: 200 },
    );
  });

test("the conflicts annotation: canonical, sorted, one entry per address, bounded; read back as written", () => {
  const written = conflictsAnnotation([
    { address: "fd00:0:0::9", mac: "AA:BB:CC:00:00:02" },
    { address: "198.18.0.9", mac: "aa:bb:cc:00:00:03" },
    { address: "198.18.0.9", mac: "aa:bb:cc:00:00:01" },
    { address: "not an ip", mac: "aa:bb:cc:00:00:01" },
    { address: "198.18.0.10", mac: "nonsense" },
  ]);
  assert.equal(written, "198.18.0.9=aa:bb:cc:00:00:01,fd00::9=aa:bb:cc:00:00:02");
  assert.deepEqual(parseConflicts(written), {
    conflicts: [
      { address: "198.18.0.9", mac: "aa:bb:cc:00:00:01" },
      { address: "fd00::9", mac: "aa:bb:cc:00:00:02" },
    ],
  });
  assert.equal(conflictsAnnotation([]), "");
  assert.deepEqual(parseConflicts(undefined), { conflicts: [] });
  assert.deepEqual(parseConflicts(""), { conflicts: [] });
  const many = Array.from({ length: 50 }, (_, i) => ({ address: `198.18.1.${i}`, mac: "02:00:00:00:00:01" }));
  assert.equal(conflictsAnnotation(many).split(",").length, MAX_LEASE_CONFLICTS);
});

test("the conflicts annotation: a value the agent would not write is refused whole, naming its rule", () => {
  const rows: [string, string][] = [
    ["198.18.0.9", "malformed-entry"],
    ["198.18.0.9=aa:bb:cc:00:00:01=x", "malformed-entry"],
    ["198.18.0.9=AA:BB:CC:00:00:01", "malformed-entry"],
    ["198.18.0.09=aa:bb:cc:00:00:01", "malformed-entry"],
    ["fe80::1%eth0=aa:bb:cc:00:00:01", "malformed-entry"],
    ["::ffff:198.18.0.9=aa:bb:cc:00:00:01", "malformed-entry"],
    ["fd00:0::9=aa:bb:cc:00:00:01", "not-canonical"],
    ["198.18.0.9=aa:bb:cc:00:00:01,198.18.0.9=aa:bb:cc:00:00:02", "repeated"],
    ["198.18.0.9=aa:bb:cc:00:00:01,198.18.0.10=aa:bb:cc:00:00:01", "repeated"],
    ["198.18.0.9=aa:bb:cc:00:00:01,", "malformed-entry"],
    [Array.from({ length: 21 }, (_, i) => `198.18.0.${i + 10}=aa:bb:cc:00:00:01`).join(","), "too-many"],
    ["x".repeat(5000), "too-long"],
  ];
  for (const [text, rule] of rows) {
    const parsed = parseConflicts(text);
    assert.ok("rule" in parsed, text);
    assert.equal(parsed.rule, rule, text);
  }
});

test("the conflicts annotation, property: reading never throws, and gives what was written, bounded", () => {
  const mac = fc
    .array(fc.integer({ min: 0, max: 255 }), { minLength: 6, maxLength: 6 })
    .map((bytes) => bytes.map((byte) => byte.toString(16).padStart(2, "0")).join(":"));
  const address = fc.oneof(fc.ipV4(), fc.ipV6(), fc.string());
  fc.assert(
    fc.property(fc.array(fc.record({ address, mac: fc.oneof(mac, fc.string()) }), { maxLength: 60 }), (list) => {
      const text = conflictsAnnotation(list);
      const parsed = parseConflicts(text);
      assert.ok("conflicts" in parsed, text);
      assert.ok(parsed.conflicts.length <= MAX_LEASE_CONFLICTS);
      assert.equal(conflictsAnnotation(parsed.conflicts), text);
    }),
  );
  fc.assert(
    fc.property(fc.string({ maxLength: 3000 }), (text) => {
      const parsed = parseConflicts(text);
      if ("conflicts" in parsed) assert.ok(parsed.conflicts.length <= MAX_LEASE_CONFLICTS);
    }),
  );
});
