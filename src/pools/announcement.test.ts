import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  ANNOUNCER_LEASE_PREFIX,
  announceDeadline,
  announcerLabelValue,
  announcerLeaseName,
  LEASE_DURATION_SECONDS,
  leaseExpiry,
  leaseNode,
  RENEW_INTERVAL_MS,
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
