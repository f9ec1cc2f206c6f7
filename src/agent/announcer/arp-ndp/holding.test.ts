// Whether a link holds its addresses, what an ARP packet says to the node, and the peers it asks: pure.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { ArpPacket } from "../../../net/arp.ts";
import type { ReceivedAdvertisement } from "../../../net/ndp.ts";
import { advertisementClaim, arpClaim, judgeClaim, solicitationClaim } from "./conflicts.ts";
import {
  advertisementMessage,
  arpMessage,
  decideHolding,
  type Heard,
  hear,
  LinkPeers,
  PEER_FRESH_MS,
  PEER_PROBE_INTERVAL_MS,
  PROBE_BEFORE_DEADLINE_MS,
  PROBED_PEERS,
  restrictAnnouncements,
  shouldProbe,
  solicitationMessage,
} from "./holding.ts";

const OWN = "02:00:00:00:00:01";
const OTHER = "02:00:00:00:00:02";
const link = { index: 2, name: "eth0", mac: OWN };

test("holding: the Lease valid; past it, on while a peer answered within PEER_FRESH_MS; else cut off", () => {
  const at = (nowMs: number, peerAnsweredAtMs = -Infinity) =>
    decideHolding({ nowMs, validUntilMs: 10_000, peerAnsweredAtMs });
  const valid = { rule: "lease-valid", reason: "the announcer Lease is valid", announce: true, untilMs: 10_000 };
  assert.deepEqual(at(9_999), valid);
  const reachable = at(10_200, 9_900);
  assert.equal(reachable.rule, "peers-reachable");
  assert.equal(reachable.untilMs, 9_900 + PEER_FRESH_MS);
  assert.match(reachable.reason, /200 ms past the Lease's deadline, a peer on the link answered 300 ms ago/);
  assert.equal(at(9_900 + PEER_FRESH_MS, 9_900).rule, "cut-off");
  assert.equal(at(10_000).announce, false);
  const never = decideHolding({ nowMs: 5, validUntilMs: -Infinity, peerAnsweredAtMs: 4 });
  assert.deepEqual([never.rule, never.announce], ["not-renewed", false]);
});

test("holding: a node cut off at once from the API and its peers stops within PEER_FRESH_MS of its deadline", () => {
  // Renewals and answers alike stop at `cutAt`; probes run every PEER_PROBE_INTERVAL_MS near the deadline.
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2500 }), fc.integer({ min: 0, max: 499 }), (cutAt, phase) => {
      const validUntilMs = 2500; // a renewal sent at 0
      let answered = -Infinity;
      for (let t = phase; t < cutAt; t += PEER_PROBE_INTERVAL_MS) if (shouldProbe(t, validUntilMs)) answered = t;
      const stopsAt = Math.max(validUntilMs, answered + PEER_FRESH_MS);
      assert.ok(stopsAt <= validUntilMs + PEER_FRESH_MS);
      assert.equal(decideHolding({ nowMs: stopsAt, validUntilMs, peerAnsweredAtMs: answered }).announce, false);
    }),
  );
  assert.ok(PROBE_BEFORE_DEADLINE_MS >= 2 * PEER_PROBE_INTERVAL_MS, "an answer is fresh when the deadline passes");
  assert.ok(!shouldProbe(1000, 2500) && shouldProbe(1500, 2500) && shouldProbe(9000, 2500));
});

test("what an ARP packet says of the peers: an answer, a peer to ask, or nothing (a claim is conflicts.ts's)", () => {
  const announced = new Set(["198.18.0.50"]);
  const packet = (fields: Partial<ArpPacket>): ArpPacket => ({
    operation: "request",
    senderMac: OTHER,
    senderIp: "198.18.0.9",
    targetMac: "00:00:00:00:00:00",
    targetIp: "198.18.0.1",
    ...fields,
  });
  const cases: [Partial<ArpPacket>, ReturnType<typeof hear>][] = [
    [{ senderIp: "198.18.0.50", targetIp: "198.18.0.50" }, { kind: "nothing" }], // a claim: below
    [{ operation: "reply", senderIp: "198.18.0.50", targetMac: OWN }, { kind: "nothing" }], // a claim, not an answer
    [{ operation: "reply", targetMac: OWN, targetIp: "0.0.0.0" }, { kind: "answer" }],
    [{}, { kind: "peer", address: "198.18.0.9", mac: OTHER }],
    [{ senderIp: "0.0.0.0" }, { kind: "nothing" }], // someone's probe: no address to ask back
    [{ senderIp: "198.18.0.50" }, { kind: "nothing" }], // asks from an address announced here: not a peer
    [{ operation: "reply", targetMac: "02:00:00:00:00:03" }, { kind: "nothing" }], // an answer to someone else
    [{ senderMac: OWN, senderIp: "198.18.0.50", targetIp: "198.18.0.50" }, { kind: "nothing" }], // our own
  ];
  for (const [fields, expected] of cases)
    assert.deepEqual(hear(arpMessage(packet(fields), OWN), link.mac, announced), expected, JSON.stringify(fields));
  // Another MAC's gratuitous ARP or reply from an announced address: the claim method.ts yields on.
  const claiming: Partial<ArpPacket>[] = [
    { senderIp: "198.18.0.50", targetIp: "198.18.0.50" },
    { operation: "reply", senderIp: "198.18.0.50" },
  ];
  for (const fields of claiming) {
    const claim = arpClaim(packet(fields));
    assert.ok(claim);
    assert.deepEqual(claim, { address: "198.18.0.50", mac: OTHER, rule: "arp-sender" });
    assert.equal(judgeClaim(claim, "announced", link.mac).action, "report");
    assert.equal(judgeClaim(claim, "held", link.mac).action, "report");
  }
});

test("what an NDP message says of the peers, as ARP's does; another MAC's NA or DAD of a held address: a claim", () => {
  const HELD = "fd00:198:18::50";
  const announced = new Set([HELD]);
  const solicitation = (target: string, source: string, sourceMac?: string) =>
    hear(solicitationMessage({ target, ...(sourceMac && { sourceMac }) }, source, OTHER), link.mac, announced);
  const advertisement = (advert: Partial<ReceivedAdvertisement>, toHost: boolean, frameMac = OTHER) => {
    const full = { target: "fd00:198:18::9", solicited: true, override: false, ...advert };
    return hear(advertisementMessage(full, frameMac, toHost), link.mac, announced);
  };
  const cases: [string, Heard, Heard][] = [
    // A client asking for the held address (or anything) from its own: a peer, by its source link-layer option.
    ["solicitation from a client", solicitation(HELD, "fd00:198:18::9", OTHER), peer("fd00:198:18::9")],
    ["solicitation, MAC from the frame", solicitation(HELD, "fe80::9"), peer("fe80::9")],
    ["duplicate address detection", solicitation(HELD, "::"), { kind: "nothing" }], // a claim: below
    ["solicitation from an address announced here", solicitation("fd00:198:18::1", HELD), { kind: "nothing" }],
    ["our own solicitation", hear(solicitationMessage({ target: HELD }, "fd00:198:18::2", OWN), OWN, announced), none],
    // A peer's solicited answer to this host's solicitation: the link works.
    ["solicited NA to this host", advertisement({}, true), { kind: "answer" }],
    ["solicited NA to another host", advertisement({}, false), none],
    ["unsolicited NA of a peer's own address", advertisement({ solicited: false, override: true }, false), none],
    ["NA of the held address", advertisement({ target: HELD, solicited: true }, true), none], // a claim: below
    ["NA with our own MAC", advertisement({ mac: OWN }, true, OWN), none],
  ];
  for (const [what, heard, expected] of cases) assert.deepEqual(heard, expected, what);
  // Another MAC's unsolicited NA (override: a takeover), a solicited one, or its DAD for the held address: what the
  // node yields on while its view may be stale; with the API in reach, a takeover is reported and a DAD defended.
  const takeover = advertisementClaim({ target: HELD, mac: OTHER, solicited: false, override: true }, OTHER);
  const answer = advertisementClaim({ target: HELD, solicited: true, override: true }, OTHER);
  const dad = solicitationClaim({ target: HELD }, "::", OTHER);
  assert.ok(dad);
  for (const claim of [takeover, answer, dad]) {
    assert.deepEqual([claim.address, claim.mac], [HELD, OTHER]);
    assert.equal(judgeClaim(claim, "held", link.mac).action, "report", claim.rule);
  }
  assert.equal(judgeClaim(takeover, "announced", link.mac).action, "report");
  assert.equal(judgeClaim(dad, "announced", link.mac).action, "ignore");
  assert.equal(judgeClaim(takeover, "held", OTHER).action, "ignore", "its own MAC");
});

const none: Heard = { kind: "nothing" };
const peer = (address: string): Heard => ({ kind: "peer", address, mac: OTHER });

test("peers of both families: asked the most recently heard; either family's answer proves the link", () => {
  const peers = new LinkPeers();
  peers.note(hear(arpMessage({ ...REQUEST, senderIp: "198.18.0.9" }, OWN), OWN, new Set()), 1);
  peers.note(hear(solicitationMessage({ target: "fd00::1" }, "fe80::9", OTHER), OWN, new Set()), 2);
  assert.deepEqual(peers.targets(), [
    { address: "198.18.0.9", mac: OTHER },
    { address: "fe80::9", mac: OTHER },
  ]);
  peers.probed(1000);
  const solicited = { target: "fe80::9", mac: OTHER, solicited: true, override: false };
  peers.note(hear(advertisementMessage(solicited, OTHER, true), OWN, new Set()), 1100);
  assert.equal(peers.answeredAtMs, 1100, "an IPv6 peer's answer");
  assert.equal(decideHolding({ nowMs: 1200, validUntilMs: 1000, peerAnsweredAtMs: peers.answeredAtMs }).announce, true);
});

const REQUEST: ArpPacket = {
  operation: "request",
  senderMac: OTHER,
  senderIp: "198.18.0.9",
  targetMac: "00:00:00:00:00:00",
  targetIp: "198.18.0.1",
};

test("peers: the most recently heard are asked; an answer counts only within PEER_FRESH_MS of a probe", () => {
  const peers = new LinkPeers();
  for (let i = 1; i <= 20; i++) peers.note({ kind: "peer", address: `198.18.0.${i}`, mac: OTHER }, i);
  peers.note({ kind: "peer", address: "198.18.0.3", mac: OTHER }, 21);
  assert.deepEqual(
    peers.targets().map(({ address }) => address),
    ["198.18.0.19", "198.18.0.20", "198.18.0.3"].slice(-PROBED_PEERS),
  );
  peers.note({ kind: "answer" }, 100); // no probe yet: a kernel's answer, or one from before a stop
  assert.equal(peers.answeredAtMs, -Infinity);
  peers.probed(1000);
  peers.note({ kind: "answer" }, 1010);
  assert.equal(peers.answeredAtMs, 1010);
  peers.note({ kind: "answer" }, 1000 + PEER_FRESH_MS); // the probe it answers is too old to tell
  assert.equal(peers.answeredAtMs, 1010);
});

test("after a lapse: claimed addresses are yielded, and nothing new until the cache caught up, either family", () => {
  for (const [a, b, c] of [
    ["198.18.0.50", "198.18.0.51", "198.18.0.52"],
    ["fd00::50", "fd00::51", "fd00::52"],
  ] as const) {
    const wanted = { link, addresses: [a, b, c] };
    assert.deepEqual(restrictAnnouncements(wanted, new Set(), undefined), { kept: wanted.addresses, left: [] });
    assert.deepEqual(restrictAnnouncements(wanted, new Set([b]), new Set([a, b])), {
      kept: [a],
      left: [
        { address: b, rule: "yielded" },
        { address: c, rule: "catching-up" },
      ],
    });
  }
});
