// Whether a link holds its addresses, what an ARP packet says to the node, and the peers it asks: pure.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { ArpPacket } from "../../net/arp.ts";
import { arpClaim, judgeClaim } from "./conflicts.ts";
import {
  decideHolding,
  hear,
  LinkPeers,
  PEER_FRESH_MS,
  PEER_PROBE_INTERVAL_MS,
  PROBE_BEFORE_DEADLINE_MS,
  PROBED_PEERS,
  restrictAnnouncements,
  shouldProbe,
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
  for (const [fields, expected] of cases) assert.deepEqual(hear(packet(fields), link.mac, announced), expected);
  // Another MAC's gratuitous ARP or reply from an announced address: the claim announcing.ts yields on.
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

test("after a lapse: claimed addresses are yielded, and nothing new until the cache caught up", () => {
  const wanted = { link, addresses: ["198.18.0.50", "198.18.0.51", "198.18.0.52"] };
  assert.deepEqual(restrictAnnouncements(wanted, new Set(), undefined), { kept: wanted.addresses, left: [] });
  assert.deepEqual(restrictAnnouncements(wanted, new Set(["198.18.0.51"]), new Set(["198.18.0.50", "198.18.0.51"])), {
    kept: ["198.18.0.50"],
    left: [
      { address: "198.18.0.51", rule: "yielded" },
      { address: "198.18.0.52", rule: "catching-up" },
    ],
  });
});
