// The announcer Leases as this controller observes them: a Lease is live until leaseExpiry() after this process
// last saw its renewTime change, on this process's monotonic clock (as client-go's leader election times a
// leader's Lease), so neither the agents' clocks nor the API server's matter. A Lease first seen counts live for
// its duration from then: an agent that had stopped is found out one duration after a restart.
//
// A renewal of a Lease that is live changes no announcer: seen() says so, and the controller plans nothing for it
// (every agent renews each second: with 5,000 nodes, a plan per renewal would keep a core busy). An expiry is
// found by the plan the controller makes at announcers().nextExpiryMs.
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { type Cidr, parseCidr } from "../net/ip.ts";
import { hashString } from "../service/rendezvous.ts";
import {
  announcerLeaseName,
  GATEWAYS_ANNOTATION,
  LEASE_DURATION_SECONDS,
  leaseExpiry,
  leaseNode,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";
import type { Announcer } from "./announcers.ts";

interface Observed {
  node: string;
  hash: number;
  renewTime: string | undefined;
  seenAtMs: number;
  durationSeconds: number;
  /** The annotation as written: a change of it is a change of announcer. */
  segmentsText: string | undefined;
  segments: Cidr[];
  /** GATEWAYS_ANNOTATION as written. */
  gatewaysText: string | undefined;
}

export class AnnouncerLeases {
  /** By Lease name. */
  private readonly observed = new Map<string, Observed>();

  /**
   * Takes in a Lease seen at `nowMs`. True when the announcers change: a Lease new or not live until now, other
   * segments or another duration; false for a live Lease renewed, or a Lease that is no node's announcer Lease.
   */
  seen(lease: Lease, nowMs: number): boolean {
    const name = lease.metadata?.name ?? "";
    const node = leaseNode(name);
    if (node === undefined) return false;
    const before = this.observed.get(name);
    const renewTime = lease.spec?.renewTime;
    const renewed = !before || before.renewTime !== renewTime;
    const durationSeconds = lease.spec?.leaseDurationSeconds ?? LEASE_DURATION_SECONDS;
    const segmentsText = lease.metadata?.annotations?.[SEGMENTS_ANNOTATION];
    const same =
      before !== undefined &&
      nowMs < leaseExpiry(before.seenAtMs, before.durationSeconds) &&
      before.durationSeconds === durationSeconds &&
      before.segmentsText === segmentsText;
    this.observed.set(name, {
      node,
      hash: before?.hash ?? hashString(node),
      renewTime,
      seenAtMs: renewed ? nowMs : before.seenAtMs,
      durationSeconds,
      segmentsText,
      segments: same ? before.segments : segments(segmentsText),
      gatewaysText: lease.metadata?.annotations?.[GATEWAYS_ANNOTATION],
    });
    return !same;
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
    return observed !== undefined && nowMs < leaseExpiry(observed.seenAtMs, observed.durationSeconds);
  }

  /** Every announcer at `nowMs`, and when the first live one expires. */
  announcers(nowMs: number): { announcers: Announcer[]; nextExpiryMs: number | undefined } {
    const announcers: Announcer[] = [];
    let nextExpiryMs: number | undefined;
    for (const { node, hash, seenAtMs, durationSeconds, segments } of this.observed.values()) {
      const expiry = leaseExpiry(seenAtMs, durationSeconds);
      const live = nowMs < expiry;
      if (live) nextExpiryMs = Math.min(nextExpiryMs ?? Infinity, expiry);
      announcers.push({ name: node, hash, live, segments });
    }
    return { announcers, nextExpiryMs };
  }
}

/** The segments annotation: CIDRs, comma-separated; what does not parse is left out. */
function segments(text: string | undefined): Cidr[] {
  return (text ?? "").split(",").flatMap((item) => {
    const cidr = parseCidr(item.trim());
    return cidr ? [cidr] : [];
  });
}
