import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { type ArpPacket, arpProbe, arpReply, gratuitousArp } from "../../../net/arp.ts";
import {
  advertisementClaim,
  arpClaim,
  type Claim,
  CLAIM_LISTED_MS,
  CLAIM_RULES,
  judgeClaim,
  listedConflicts,
  type Phase,
  PROBE_DECIDED_MS,
  PROBE_SCHEDULE_MS,
  reprobeDelayMs,
  solicitationClaim,
} from "./conflicts.ts";
import { answerArp, answerSolicitation } from "./decide.ts";

const OURS = "02:00:00:00:00:0a";
const THEIRS = "02:00:00:00:00:0b";
const ADDRESS = "198.18.5.5";
const request = (senderIp: string, targetIp: string): ArpPacket => ({
  operation: "request",
  senderMac: THEIRS,
  senderIp,
  targetMac: "00:00:00:00:00:00",
  targetIp,
});

test("what ARP packets and NDP messages claim, and from which MAC", () => {
  const cases: [string, Claim | undefined, Claim | undefined][] = [
    [
      "a Linux host's answer to our probe",
      arpClaim(arpReply(arpProbe(ADDRESS, OURS), THEIRS)),
      { address: ADDRESS, mac: THEIRS, rule: "arp-sender" },
    ],
    ["gratuitous ARP", arpClaim(gratuitousArp(ADDRESS, THEIRS)), { address: ADDRESS, mac: THEIRS, rule: "arp-sender" }],
    [
      "a request from the address",
      arpClaim(request(ADDRESS, "198.18.5.9")),
      { address: ADDRESS, mac: THEIRS, rule: "arp-sender" },
    ],
    ["another host's probe", arpClaim(arpProbe(ADDRESS, THEIRS)), { address: ADDRESS, mac: THEIRS, rule: "arp-probe" }],
    ["a reply from 0.0.0.0", arpClaim({ ...arpProbe(ADDRESS, THEIRS), operation: "reply" }), undefined],
    [
      "an advertisement: its target option's MAC",
      advertisementClaim({ target: "fd00::55", mac: THEIRS, solicited: false, override: true }, "02:00:00:00:00:0c"),
      { address: "fd00::55", mac: THEIRS, rule: "advertisement" },
    ],
    [
      "an advertisement without a target option: the frame's MAC",
      advertisementClaim({ target: "fd00::55", solicited: true, override: false }, "02:00:00:00:00:0c"),
      { address: "fd00::55", mac: "02:00:00:00:00:0c", rule: "advertisement" },
    ],
    [
      "duplicate address detection (from ::)",
      solicitationClaim({ target: "fd00::55" }, "::", THEIRS),
      { address: "fd00::55", mac: THEIRS, rule: "duplicate-detection" },
    ],
    [
      "a client resolving the address",
      solicitationClaim({ target: "fd00::55", sourceMac: THEIRS }, "fd00::9", THEIRS),
      undefined,
    ],
  ];
  for (const [name, actual, expected] of cases) assert.deepEqual(actual, expected, name);
});

test("probing: another MAC's claim refuses; announced: takers reported, probers answered; held: both reported", () => {
  const cases: [Phase, Claim["rule"], string, string][] = [
    ["probing", "arp-sender", THEIRS, "refuse"],
    ["probing", "arp-probe", THEIRS, "refuse"],
    ["probing", "advertisement", THEIRS, "refuse"],
    ["probing", "duplicate-detection", THEIRS, "refuse"],
    ["probing", "arp-sender", OURS, "ignore"],
    ["announced", "arp-sender", THEIRS, "report"],
    ["announced", "advertisement", THEIRS, "report"],
    ["announced", "arp-probe", THEIRS, "ignore"],
    ["announced", "duplicate-detection", THEIRS, "ignore"],
    ["announced", "advertisement", OURS, "ignore"],
    ["held", "arp-sender", THEIRS, "report"],
    ["held", "advertisement", THEIRS, "report"],
    ["held", "arp-probe", THEIRS, "report"],
    ["held", "duplicate-detection", THEIRS, "report"],
    ["held", "arp-probe", OURS, "ignore"],
  ];
  for (const [phase, rule, mac, action] of cases) {
    const decision = judgeClaim({ address: ADDRESS, mac, rule }, phase, OURS);
    assert.equal(decision.action, action, `${phase} ${rule} ${mac}`);
    if (action !== "ignore") {
      assert.equal(decision.rule, rule);
      assert.ok(decision.reason.includes(ADDRESS) && decision.reason.includes(mac), decision.reason);
    }
  }
});

test("property: our own MAC is never a conflict; another's always is while probing, never ignored as a taker", () => {
  // Few MACs, so that the claimant's is often the link's.
  const mac = fc.constantFrom(OURS, THEIRS, "02:00:00:00:00:0c");
  const phase = fc.constantFrom<Phase>("probing", "announced", "held");
  fc.assert(
    fc.property(mac, mac, fc.constantFrom(...CLAIM_RULES), phase, (link, claimant, rule, phase) => {
      const decision = judgeClaim({ address: ADDRESS, mac: claimant, rule }, phase, link);
      if (claimant === link) return decision.action === "ignore" && decision.rule === "own-mac";
      if (phase === "probing") return decision.action === "refuse";
      const taker = rule === "arp-sender" || rule === "advertisement";
      return decision.action === (taker || phase === "held" ? "report" : "ignore");
    }),
  );
});

test("a prober that we ignore as announced is one our answer defends against (decide.ts answers it)", () => {
  const announced = new Set([ADDRESS, "fd00::55"]);
  assert.equal(answerArp(arpProbe(ADDRESS, THEIRS), { mac: OURS }, announced).action, "answer");
  assert.equal(answerSolicitation({ target: "fd00::55" }, "::", { mac: OURS }, announced).action, "answer");
});

test("probing fits the failover budget; refused addresses are probed again, soon and then every 30 s", () => {
  assert.equal(PROBE_SCHEDULE_MS.length, 3, "one lost probe cannot hide a defender");
  assert.ok(Math.max(...PROBE_SCHEDULE_MS) < PROBE_DECIDED_MS && PROBE_DECIDED_MS <= 500);
  const delays = [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000];
  assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 100].map(reprobeDelayMs), delays);
});

test("listed on the Lease: refused from the second refusal in a row, claimed while the last claim is recent", () => {
  const refused = new Map([
    ["198.18.5.1", { refusals: 1, mac: THEIRS }],
    ["198.18.5.2", { refusals: 2, mac: THEIRS }],
    ["fd00::3", { refusals: 7, mac: THEIRS }],
  ]);
  const claimed = new Map([
    ["198.18.5.4", { mac: THEIRS, atMs: 10_000 }],
    ["198.18.5.5", { mac: THEIRS, atMs: 10_000 - CLAIM_LISTED_MS }],
    ["198.18.5.6", { mac: THEIRS, atMs: 10_000 }],
  ]);
  const announced = new Set(["198.18.5.4", "198.18.5.5"]);
  assert.deepEqual(listedConflicts({ nowMs: 10_000, refused, claimed, announced }), [
    { address: "198.18.5.2", mac: THEIRS },
    { address: "fd00::3", mac: THEIRS },
    { address: "198.18.5.4", mac: THEIRS },
  ]);
  assert.deepEqual(listedConflicts({ nowMs: 10_000 + CLAIM_LISTED_MS, refused: new Map(), claimed, announced }), []);
});
