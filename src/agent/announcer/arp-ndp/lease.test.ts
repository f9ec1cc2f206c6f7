// The announcer Lease's content, from plain data; its renewals against a real kube-apiserver: test/announce/.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ANNOUNCER_LEASE_LABEL,
  APPLIED_ANNOTATION,
  CONFLICTS_ANNOTATION,
  GATEWAYS_ANNOTATION,
  LEASE_DURATION_SECONDS,
  SEGMENTS_ANNOTATION,
} from "../../../pools/announcement.ts";
import { announcerLease } from "./lease.ts";

const identity = { node: "node-a", name: "local-ccm-l2-node-a", namespace: "kube-system" };
const [first, second] = [new Date("2026-11-24T16:00:00.123Z"), new Date("2026-11-24T16:00:01.456Z")];

const network = (segments: string, gateways = "198.18.0.1") => ({ segments, gateways });

test("a new Lease: label, segments, gateways, held for LEASE_DURATION_SECONDS, acquired and renewed now", () => {
  assert.deepEqual(announcerLease(identity, network("198.18.0.0/24,fd00::/64", "198.18.0.1,fe80::1"), first), {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: {
      name: "local-ccm-l2-node-a",
      namespace: "kube-system",
      labels: { [ANNOUNCER_LEASE_LABEL]: "true" },
      annotations: { [SEGMENTS_ANNOTATION]: "198.18.0.0/24,fd00::/64", [GATEWAYS_ANNOTATION]: "198.18.0.1,fe80::1" },
    },
    spec: {
      holderIdentity: "node-a",
      leaseDurationSeconds: LEASE_DURATION_SECONDS,
      acquireTime: "2026-11-24T16:00:00.123000Z",
      renewTime: "2026-11-24T16:00:00.123000Z",
    },
  });
});

test("a renewal keeps the resourceVersion read, others' labels, its acquireTime; taken back, acquired anew", () => {
  const read = announcerLease(identity, network("198.18.0.0/24"), first);
  read.metadata = { ...read.metadata, resourceVersion: "42", labels: { ...read.metadata?.labels, team: "net" } };
  const renewed = announcerLease(identity, network("198.18.1.0/24", "198.18.1.1"), second, read);
  assert.equal(renewed.metadata?.resourceVersion, "42");
  assert.deepEqual(renewed.metadata?.labels, { [ANNOUNCER_LEASE_LABEL]: "true", team: "net" });
  assert.equal(renewed.metadata?.annotations?.[SEGMENTS_ANNOTATION], "198.18.1.0/24");
  assert.equal(renewed.metadata?.annotations?.[GATEWAYS_ANNOTATION], "198.18.1.1");
  assert.equal(renewed.spec?.acquireTime, "2026-11-24T16:00:00.123000Z");
  assert.equal(renewed.spec?.renewTime, "2026-11-24T16:00:01.456000Z");
  const taken = { ...read, spec: { ...read.spec, holderIdentity: "someone-else" } };
  const back = announcerLease(identity, network("198.18.0.0/24"), second, taken);
  assert.equal(back.spec?.holderIdentity, "node-a");
  assert.equal(back.spec?.acquireTime, "2026-11-24T16:00:01.456000Z");
});

test("the applied resourceVersion: written when known, left out (not kept from before) while unknown", () => {
  const read = announcerLease(identity, { ...network("198.18.0.0/24"), applied: "41" }, first);
  assert.equal(read.metadata?.annotations?.[APPLIED_ANNOTATION], "41");
  const renewed = announcerLease(identity, { ...network("198.18.0.0/24"), applied: "57" }, second, read);
  assert.equal(renewed.metadata?.annotations?.[APPLIED_ANNOTATION], "57");
  // A run that has not listed its Services yet acknowledges nothing, whatever an earlier run wrote.
  const restarted = announcerLease(identity, network("198.18.0.0/24"), second, read);
  assert.equal(restarted.metadata?.annotations?.[APPLIED_ANNOTATION], undefined);
  assert.equal(restarted.metadata?.annotations?.[SEGMENTS_ANNOTATION], "198.18.0.0/24");
  assert.equal(restarted.metadata?.annotations?.[GATEWAYS_ANNOTATION], "198.18.0.1");
});

test("the conflicts: written while there are any, gone (not kept from before) once none", () => {
  const text = "198.18.0.57=02:00:00:00:00:09";
  const read = announcerLease(identity, { ...network("198.18.0.0/24"), conflicts: text }, first);
  assert.equal(read.metadata?.annotations?.[CONFLICTS_ANNOTATION], text);
  const same = announcerLease(identity, { ...network("198.18.0.0/24"), conflicts: text }, second, read);
  assert.equal(same.metadata?.annotations?.[CONFLICTS_ANNOTATION], text);
  const ended = announcerLease(identity, { ...network("198.18.0.0/24"), conflicts: "" }, second, read);
  assert.equal(CONFLICTS_ANNOTATION in (ended.metadata?.annotations ?? {}), false);
});
