import assert from "node:assert/strict";
import { test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { ANNOUNCER_LEASE_PREFIX, SEGMENTS_ANNOTATION } from "./announcement.ts";
import { parseCidr } from "../net/ip.ts";
import {
  AnnouncerLeases,
  decideLeaseGuard,
  MASS_EXPIRY_FRACTION,
  MASS_EXPIRY_WINDOW_MS,
  provenSegments,
  RECOVERY_GRACE_MS,
  STALE_VIEW_MS,
} from "./leases.ts";

const lease = (node: string, renewTime: string, segments = "192.0.2.0/24, bad, 2001:db8::/64"): Lease => ({
  metadata: { name: ANNOUNCER_LEASE_PREFIX + node, annotations: { [SEGMENTS_ANNOTATION]: segments } },
  spec: { holderIdentity: node, renewTime, leaseDurationSeconds: 3 },
});

test("a Lease is live for its duration after this process saw its renewTime change, whatever the time in it", () => {
  const leases = new AnnouncerLeases();
  // Its renewTime is from long ago: first seen, it counts live for its duration from then.
  assert.ok(leases.seen(lease("n1", "2000-01-01T00:00:00.000000Z"), 1000));
  assert.deepEqual(leases.announcers(1000).nextExpiryMs, 4000);
  assert.ok(leases.isLive("n1", 3999));
  // The same renewTime seen again renews nothing.
  leases.seen(lease("n1", "2000-01-01T00:00:00.000000Z"), 3000);
  assert.ok(!leases.isLive("n1", 4000));
  // Expired, then renewed: the announcers change. Renewed while live: they stay as they were, unless the segments move.
  assert.ok(leases.seen(lease("n1", "2000-01-01T00:00:01.000000Z"), 4500));
  assert.ok(!leases.seen(lease("n1", "2000-01-01T00:00:02.000000Z"), 4900));
  assert.ok(leases.seen(lease("n1", "2000-01-01T00:00:03.000000Z", "192.0.2.0/24"), 4950));
  leases.seen(lease("n1", "2000-01-01T00:00:04.000000Z"), 5000);
  const { announcers } = leases.announcers(5000);
  assert.deepEqual(
    announcers.map(({ name, live, segments }) => ({ name, live, segments: segments.map((each) => each.address) })),
    [{ name: "n1", live: true, segments: ["192.0.2.0", "2001:db8::"] }],
  );
  leases.gone(lease("n1", ""));
  assert.deepEqual(leases.announcers(5000).announcers, []);
});

test("other Leases in the namespace are no announcers", () => {
  const leases = new AnnouncerLeases();
  assert.ok(!leases.seen({ metadata: { name: "node-lifecycle-controller" }, spec: {} }, 0));
  assert.deepEqual(leases.announcers(0).announcers, []);
});

test("the guard: paused while no renewal was seen lately, or too many Leases expired at once", () => {
  const view = { nowMs: 10_000, observed: 12, leases: 10, expired: 0, lastRenewalSeenMs: 9_000 };
  assert.equal(decideLeaseGuard(view).rule, "fresh");
  const stale = decideLeaseGuard({ ...view, lastRenewalSeenMs: 10_000 - STALE_VIEW_MS - 1 });
  assert.deepEqual([stale.rule, stale.paused], ["stale-view", true]);
  assert.match(stale.reason, /no announcer Lease renewal seen for 2001 ms/);
  assert.equal(decideLeaseGuard({ ...view, expired: Math.floor(10 * MASS_EXPIRY_FRACTION) }).rule, "fresh");
  const mass = decideLeaseGuard({ ...view, expired: 6 });
  assert.deepEqual([mass.rule, mass.reason], ["mass-expiry", "6 of 10 announcer Leases expired at once (over 55%)"]);
  // One node of two dead: moved (half is not over the fraction); a lone Lease has nowhere to go anyway.
  assert.equal(decideLeaseGuard({ ...view, leases: 2, expired: 1 }).rule, "fresh");
  assert.equal(decideLeaseGuard({ ...view, observed: 0, leases: 0, lastRenewalSeenMs: -Infinity }).rule, "fresh");
});

test("the guard lifting gives every Lease the recovery grace from then; a renewal after it, a duration", () => {
  const leases = new AnnouncerLeases();
  leases.seen(lease("n1", "t1"), 0);
  leases.seen(lease("n2", "t1"), 0);
  leases.seen(lease("n3", "t1"), 0);
  assert.equal(leases.guard(1000).rule, "fresh");
  // The controller's watch is broken: it sees nothing for 60 s, and every Lease has expired in its eyes.
  assert.equal(leases.guard(60_000).rule, "stale-view");
  // The watch is back: one renewal seen ends the silence; the two others, not seen renewed yet, count from then.
  assert.ok(leases.seen(lease("n1", "t2"), 60_100), "a renewal after a silence decides again");
  assert.equal(leases.guard(60_100).rule, "fresh");
  const graceEnd = 60_100 + RECOVERY_GRACE_MS;
  assert.ok(leases.isLive("n3", graceEnd - 1), "n3's renewal may be late while the API server catches up");
  assert.ok(!leases.isLive("n3", graceEnd));
  assert.equal(leases.announcers(60_100).nextExpiryMs, graceEnd, "the plan wakes when the grace ends");
  // n1 renews each second from now on; n2 late, once, inside the grace: live until the later of the grace and a
  // duration from then.
  const renewN1 = (fromMs: number, toMs: number) => {
    for (let atMs = fromMs; atMs <= toMs; atMs += 1000) leases.seen(lease("n1", `t${atMs}`), atMs);
  };
  renewN1(61_000, graceEnd - 1000);
  leases.seen(lease("n2", "t3"), graceEnd - 1000);
  assert.ok(leases.isLive("n2", graceEnd + 1999) && !leases.isLive("n2", graceEnd + 2000));
  // n2 and n3 then renew no more: they expire together, two of three: paused for the window, then moved.
  renewN1(graceEnd, graceEnd + 2000 + MASS_EXPIRY_WINDOW_MS);
  assert.equal(leases.guard(graceEnd + 2200).rule, "mass-expiry");
  assert.equal(leases.guard(graceEnd + 2200 + MASS_EXPIRY_WINDOW_MS).rule, "fresh");
  assert.ok(!leases.isLive("n3", graceEnd + 2200 + MASS_EXPIRY_WINDOW_MS), "no second life");
});

test("a silence the guard never looked at (a replica not leading plans nothing) lifts alike at the first renewal", () => {
  const leases = new AnnouncerLeases();
  for (const node of ["n1", "n2", "n3"]) leases.seen(lease(node, "t1"), 0);
  // No guard() through the silence: the replica lost its leadership in the same outage, or was a follower.
  assert.ok(leases.seen(lease("n1", "t2"), 60_100), "a renewal after a silence decides again");
  assert.equal(leases.guard(60_100).rule, "fresh");
  assert.ok(leases.isLive("n3", 60_100 + RECOVERY_GRACE_MS - 1), "n3 counts from the renewal that ended the silence");
  assert.ok(!leases.isLive("n3", 60_100 + RECOVERY_GRACE_MS));
});

test("the duration is this controller's own: a Lease asking for a day expires like any other", () => {
  const leases = new AnnouncerLeases();
  const forged = lease("n1", "t1");
  leases.seen({ ...forged, spec: { ...forged.spec, leaseDurationSeconds: 86_400 } }, 0);
  assert.ok(leases.isLive("n1", 2_999));
  assert.ok(!leases.isLive("n1", 3_000));
  assert.equal(leases.announcers(0).announcers[0]?.expiresAtMs, 3_000);
});

test("segments are proven by the Node's addresses; the rest is refused", () => {
  const cidrs = ["192.0.2.0/24", "198.51.100.0/24", "2001:db8::/64"].map((text) => parseCidr(text) ?? assert.fail());
  const text = (list: { address: string; prefixLength: number }[]) => list.map((c) => `${c.address}/${c.prefixLength}`);
  const { proven, refused } = provenSegments(cidrs, ["192.0.2.7", "2001:db8::7", "203.0.113.1"]);
  assert.deepEqual(text(proven), ["192.0.2.0/24", "2001:db8::/64"]);
  assert.deepEqual(text(refused), ["198.51.100.0/24"]);
  assert.deepEqual(text(provenSegments(cidrs, []).proven), [], "a node without a Node proves nothing");
});

test("Leases long expired (nodes gone without deleting them) neither pause the guard nor come back when it lifts", () => {
  const leases = new AnnouncerLeases();
  for (const node of ["gone1", "gone2", "gone3"]) leases.seen(lease(node, "t1"), 0);
  // a and b renew each second all along (a until 60 s, b until 62 s): the gone ones expired long before.
  for (let atMs = 1000; atMs <= 62_000; atMs += 1000)
    for (const node of atMs <= 60_000 ? ["a", "b"] : ["b"]) leases.seen(lease(node, `t${atMs}`), atMs);
  // 3 of 5 observed are long expired; of the two lately live, one expired: half, not over the fraction.
  assert.equal(leases.guard(63_500).rule, "fresh");
  assert.ok(!leases.isLive("a", 63_500));
  // A silence pauses; when it lifts, a and b count from then, the long-gone do not.
  assert.equal(leases.guard(65_000).rule, "stale-view");
  leases.seen(lease("b", "t3"), 66_000);
  assert.equal(leases.guard(66_000).rule, "fresh");
  assert.ok(leases.isLive("a", 66_000) && !leases.isLive("gone1", 66_000));
});
