import assert from "node:assert/strict";
import { test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { ANNOUNCER_LEASE_PREFIX, SEGMENTS_ANNOTATION } from "./announcement.ts";
import { AnnouncerLeases } from "./leases.ts";

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
