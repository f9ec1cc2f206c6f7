// The announcer Leases as this controller observes them: a Lease is live until leaseExpiry() after this process
// last saw its renewTime change, on this process's monotonic clock (as client-go's leader election times a
// leader's Lease), so neither the agents' clocks nor the API server's matter. The duration is this controller's own
// (LEASE_DURATION_SECONDS, the contract's), never the Lease's spec.leaseDurationSeconds: a node's stolen credentials
// could set that to a day. A Lease first seen counts live for a duration from then: an agent that had stopped is
// found out one duration after a restart. What a Lease says of segments is trusted only where the node's Node
// object has an address inside them (provenSegments()).
//
// The guard (decideLeaseGuard): an expiry this controller counts is acted on only while its own view is fresh. When
// it has seen no renewal at all for STALE_VIEW_MS (its Lease watch broken, the API server away), or more than
// MASS_EXPIRY_FRACTION of the Leases live or lately expired (within MASS_EXPIRY_WINDOW_MS: a Lease left by a node
// long gone counts for nothing) expired lately, it moves nothing away from an expired Lease; when a stale view ends,
// each of those counts live for RECOVERY_GRACE_MS from then before anything moves (node-lifecycle's partition guard,
// for Leases). Not one duration: a kube-apiserver back from a stall re-initialises its caches and takes every
// client's queued requests at once, and on a loaded machine one agent's renewal came more than a duration after
// another's (CI saw an announcer move so; which request was late was not established).
//
// A renewal of a Lease that is live changes no announcer: seen() says so, and the controller plans nothing for it
// (every agent renews each second: with 5,000 nodes, a plan per renewal would keep a core busy), unless a Service
// waits for that node to acknowledge a release and its applied resourceVersion moved (the controller asks
// applied()). An expiry is found by the plan the controller makes at announcers().nextExpiryMs. What a Lease says
// another host answers for (CONFLICTS_ANNOTATION) is kept as parseConflicts() reads it: refused whole when malformed.
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { hashString } from "../loadbalancer/rendezvous.ts";
import { type Cidr, cidrContains, parseCidr } from "../net/ip.ts";
import {
  announcerLeaseName,
  type AddressConflict,
  APPLIED_ANNOTATION,
  CONFLICTS_ANNOTATION,
  type ConflictsRule,
  GATEWAYS_ANNOTATION,
  LEASE_DURATION_SECONDS,
  leaseExpiry,
  leaseNode,
  parseConflicts,
  RENEW_INTERVAL_MS,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";
import type { Announcer } from "./announcers.ts";

interface Observed {
  node: string;
  hash: number;
  renewTime: string | undefined;
  seenAtMs: number;
  /** Live at least until then, whatever its renewals: the grace given when a stale view ended. */
  graceUntilMs: number;
  /** The annotation as written: a change of it is a change of announcer. */
  segmentsText: string | undefined;
  segments: Cidr[];
  /** GATEWAYS_ANNOTATION as written. */
  gatewaysText: string | undefined;
  /** APPLIED_ANNOTATION as written. */
  applied: string | undefined;
  /** CONFLICTS_ANNOTATION as written, and as read (none when refused). */
  conflictsText: string | undefined;
  conflicts: AddressConflict[];
  conflictsRefused: { rule: ConflictsRule; reason: string } | undefined;
}

/** No renewal seen at all for this long: this controller's view of the Leases is not fresh. */
export const STALE_VIEW_MS = 2 * RENEW_INTERVAL_MS;
/** More than this fraction of the Leases expired at once: more likely this controller's view than the nodes. */
export const MASS_EXPIRY_FRACTION = 0.55;

export const GUARD_RULES = ["fresh", "stale-view", "mass-expiry"] as const;
export type GuardRule = (typeof GUARD_RULES)[number];
export interface LeaseGuard {
  /** True while no expiry is acted on. */
  paused: boolean;
  rule: GuardRule;
  reason: string;
}

/** When a stale view ends, each Lease that may have been renewed through it counts live this long from then. */
export const RECOVERY_GRACE_MS = 5 * LEASE_DURATION_SECONDS * 1000;

/** "At once": Leases that expired within this long count against those still live. */
export const MASS_EXPIRY_WINDOW_MS = 2 * LEASE_DURATION_SECONDS * 1000;

export interface LeaseView {
  nowMs: number;
  /** Announcer Leases observed (deleted ones are gone, not expired). */
  observed: number;
  /** Of them, live or expired within MASS_EXPIRY_WINDOW_MS. */
  leases: number;
  /** Of those, not live. */
  expired: number;
  /** When this controller last saw any Lease renewed (monotonic ms). */
  lastRenewalSeenMs: number;
}

export function decideLeaseGuard({ nowMs, observed, leases, expired, lastRenewalSeenMs }: LeaseView): LeaseGuard {
  const silentMs = nowMs - lastRenewalSeenMs;
  if (observed > 0 && silentMs > STALE_VIEW_MS)
    return {
      paused: true,
      rule: "stale-view",
      reason: `no announcer Lease renewal seen for ${Math.round(silentMs)} ms: this controller's view may be stale`,
    };
  if (leases >= 2 && expired / leases > MASS_EXPIRY_FRACTION)
    return {
      paused: true,
      rule: "mass-expiry",
      reason: `${expired} of ${leases} announcer Leases expired at once (over ${percent(MASS_EXPIRY_FRACTION)})`,
    };
  return { paused: false, rule: "fresh", reason: "this controller sees the announcer Leases renewed" };
}

const percent = (fraction: number) => `${Math.round(fraction * 100)}%`;

export class AnnouncerLeases {
  /** By Lease name. */
  private readonly observed = new Map<string, Observed>();
  private lastRenewalSeenMs = -Infinity;

  /**
   * Takes in a Lease seen at `nowMs`. True when the announcers change: a Lease new or not live until now, or other
   * segments; false for a live Lease renewed, or a Lease that is no node's announcer Lease.
   */
  seen(lease: Lease, nowMs: number): boolean {
    const name = lease.metadata?.name ?? "";
    const node = leaseNode(name);
    if (node === undefined) return false;
    const before = this.observed.get(name);
    const renewTime = lease.spec?.renewTime;
    const renewed = !before || before.renewTime !== renewTime;
    // The first renewal after a silence ends a stale view: the guard is decided again.
    const silence = renewed && nowMs - this.lastRenewalSeenMs > STALE_VIEW_MS;
    if (silence) this.endSilence(nowMs);
    if (renewed) this.lastRenewalSeenMs = nowMs;
    const segmentsText = lease.metadata?.annotations?.[SEGMENTS_ANNOTATION];
    const conflictsText = lease.metadata?.annotations?.[CONFLICTS_ANNOTATION];
    const parsed = before !== undefined && before.conflictsText === conflictsText ? before : conflictsOf(conflictsText);
    const same =
      before !== undefined &&
      nowMs < expiryOf(before) &&
      before.segmentsText === segmentsText;
    this.observed.set(name, {
      node,
      hash: before?.hash ?? hashString(node),
      renewTime,
      seenAtMs: renewed ? nowMs : before.seenAtMs,
      graceUntilMs: before?.graceUntilMs ?? -Infinity,
      segmentsText,
      segments: same ? before.segments : segments(segmentsText),
      gatewaysText: lease.metadata?.annotations?.[GATEWAYS_ANNOTATION],
      applied: lease.metadata?.annotations?.[APPLIED_ANNOTATION],
      conflictsText,
      conflicts: parsed.conflicts,
      conflictsRefused: parsed.conflictsRefused,
    });
    return !same || silence;
  }

  /** What a node's Lease says it has applied (APPLIED_ANNOTATION), as last seen. */
  applied(node: string): string | undefined {
    return this.observed.get(announcerLeaseName(node) ?? "")?.applied;
  }

  /** CONFLICTS_ANNOTATION of a node's Lease as last seen: the text, and what was read of it or why it was refused. */
  conflicts(node: string): Pick<Observed, "conflictsText" | "conflicts" | "conflictsRefused"> | undefined {
    return this.observed.get(announcerLeaseName(node) ?? "");
  }

  /** What every Lease says another host answers for (refused values say nothing), live or not. */
  reportedConflicts(): { node: string; conflicts: AddressConflict[] }[] {
    return [...this.observed.values()].flatMap(({ node, conflicts }) => (conflicts.length ? [{ node, conflicts }] : []));
  }

  /** Each announcer's segments and default gateways as written (live or not): what the network uses. */
  network(): { node: string; segments: string[]; gateways: string[] }[] {
    const list = (text: string | undefined) => (text ? text.split(",").map((item) => item.trim()) : []);
    return [...this.observed.values()]
      .map(({ node, segmentsText: segments, gatewaysText: gateways }) => ({
        node,
        segments: list(segments),
        gateways: list(gateways),
      }))
      .sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  }

  gone(lease: Lease): void {
    this.observed.delete(lease.metadata?.name ?? "");
  }

  isLive(node: string, nowMs: number): boolean {
    const observed = this.observed.get(announcerLeaseName(node) ?? "");
    return observed !== undefined && nowMs < expiryOf(observed);
  }

  /**
   * The guard at `nowMs`. A mass expiry lifts as Leases renew, or as the expired ones leave the window: those are
   * dead, and move. A stale view lifts at the first renewal seen (endSilence).
   */
  guard(nowMs: number): LeaseGuard {
    const lately = [...this.observed.values()].filter((each) => expiryOf(each) > nowMs - MASS_EXPIRY_WINDOW_MS);
    return decideLeaseGuard({
      nowMs,
      observed: this.observed.size,
      leases: lately.length,
      expired: lately.filter((each) => nowMs >= expiryOf(each)).length,
      lastRenewalSeenMs: this.lastRenewalSeenMs,
    });
  }

  /**
   * A renewal seen at `nowMs` ends a silence: what was live or lately expired when the silence began counts live
   * for RECOVERY_GRACE_MS from now, since it may have been renewed all along (not Leases long dead before). Here,
   * not in guard(): a replica that did not lead through the silence never asked the guard, and must not move on it.
   */
  private endSilence(nowMs: number): void {
    const began = this.lastRenewalSeenMs + STALE_VIEW_MS;
    for (const each of this.observed.values())
      if (expiryOf(each) > began - MASS_EXPIRY_WINDOW_MS) each.graceUntilMs = nowMs + RECOVERY_GRACE_MS;
  }

  /** Every announcer at `nowMs`, and when the first live one expires. */
  announcers(nowMs: number): { announcers: Announcer[]; nextExpiryMs: number | undefined } {
    const announcers: Announcer[] = [];
    let nextExpiryMs: number | undefined;
    for (const each of this.observed.values()) {
      const { node, hash, segments, applied } = each;
      const expiresAtMs = expiryOf(each);
      const live = nowMs < expiresAtMs;
      if (live) nextExpiryMs = Math.min(nextExpiryMs ?? Infinity, expiresAtMs);
      announcers.push({ name: node, hash, live, expiresAtMs, segments, ...(applied === undefined ? {} : { applied }) });
    }
    return { announcers, nextExpiryMs };
  }
}

const expiryOf = (observed: Observed) =>
  Math.max(leaseExpiry(observed.seenAtMs, LEASE_DURATION_SECONDS), observed.graceUntilMs);

function conflictsOf(text: string | undefined): Pick<Observed, "conflicts" | "conflictsRefused"> {
  const parsed = parseConflicts(text);
  return "conflicts" in parsed
    ? { conflicts: parsed.conflicts, conflictsRefused: undefined }
    : { conflicts: [], conflictsRefused: parsed };
}

/** The segments annotation: CIDRs, comma-separated; what does not parse is left out. */
function segments(text: string | undefined): Cidr[] {
  return (text ?? "").split(",").flatMap((item) => {
    const cidr = parseCidr(item.trim());
    return cidr ? [cidr] : [];
  });
}

/**
 * The segments of a Lease that its node's Node object proves: those holding one of the Node's addresses. A node's
 * credentials write its Lease; a segment it has no address in would let it answer for another segment's addresses.
 */
export function provenSegments(
  segments: readonly Cidr[],
  nodeAddresses: readonly string[],
): { proven: Cidr[]; refused: Cidr[] } {
  const proven: Cidr[] = [];
  const refused: Cidr[] = [];
  for (const segment of segments)
    (nodeAddresses.some((address) => cidrContains(segment, address)) ? proven : refused).push(segment);
  return { proven, refused };
}
