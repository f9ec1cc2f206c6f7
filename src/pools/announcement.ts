// What the address pool controller and the agents' announcers agree on: who may announce, and what.
//
// Each agent that may announce keeps a Lease of its own (ANNOUNCER_LEASE_PREFIX + node name, in the release
// namespace), renewed every RENEW_INTERVAL_MS, holding the node name and the on-link prefixes of the node's links
// that are up (SEGMENTS_ANNOTATION) and the next hops of its default routes (GATEWAYS_ANNOTATION), which the
// controller never hands out (exclusions.ts). The controller assigns each Service's addresses to one live announcer on
// their segment and records it on the Service (ANNOUNCER_ANNOTATION, and ANNOUNCER_LABEL for the agents' filtered
// watch). It times each Lease by its own clock and its own duration (LEASE_DURATION_SECONDS, never the Lease's),
// from when it saw the renewal, and trusts a segment only where the node's Node object has an address inside it.
//
// While the API is reachable: an agent's Lease is valid until announceDeadline(), before the controller can count
// it expired (it saw the renewal after the agent sent it; only clock rates matter, not offsets).
//
// A move waits for the old announcer. The agent writes with each renewal how far it has applied its Services
// (APPLIED_ANNOTATION: the resourceVersion its Service watch has reached; every change up to it is in effect on its
// links, a release included). When the controller takes an address from a node whose Lease is live, it writes the
// removal together with RELEASED_FROM_ANNOTATION (that node), and names a new announcer only once that node's
// Lease says it applied the removal's version (hasApplied()), or its Lease expired, or went. A dead or lagging
// watch therefore delays a move; it never makes two nodes answer. The annotation persists the wait across a change
// of leader. One resourceVersion a Lease: its size and write rate do not grow with the number of Services.
//
// The data plane outlives the control plane. An unreachable API says nothing about the link, so an agent past its
// Lease's deadline goes on answering on a link while a peer there answers its ARP probes (the hosts it heard ask
// recently; agent/announcer/arp-ndp/holding.ts), and stops at once when another MAC claims one of its addresses. A node cut
// off from the API and from its peers hears none: it withdraws within PEER_FRESH_MS of its deadline, inside the
// failover budget; a process that was stopped answers nothing until it has fresh proof. The controller acts on an
// expired Lease only while its own view is fresh (pools/leases.ts: no stale-view, no mass-expiry; when the guard
// lifts every Lease gets RECOVERY_GRACE_MS), so an API outage moves nothing. When it does move an address away from
// an expired Lease, either that node has withdrawn (cut off: nobody on the link hears it anyway), or it hears the
// new announcer's probe (which it would answer while its view is fresh, agent/announcer/arp-ndp/conflicts.ts's "held") or
// gratuitous ARP, a claim, and yields before it answers: the new one's probes then find nobody, and one address
// has one announcer. When its renewals succeed again it relists its Services and announces nothing it was not
// announcing until that list is in.
//
// Another host on the segment. The agent lists on its Lease the addresses it was told to announce that another host
// answers for (CONFLICTS_ANNOTATION: refused by its probes, or claimed by another MAC while announced), and clears
// each when that ends. The controller takes a Lease's list only for the Services that node announces (a node says
// what it meets on its own links, nothing about another's), reports it on the Service and its pool, and moves
// nothing: on that segment another host holds the address, and a node on the same segment would meet it too.
import { createHash } from "node:crypto";
import { canonicalIp, ipProblem } from "../net/ip.ts";

/** The announcer Lease of a node is this prefix plus the node's name (never the name alone: other Leases share the namespace). */
export const ANNOUNCER_LEASE_PREFIX = "local-ccm-l2-";
/** On every announcer Lease (value "true"): what the controller's Lease watch selects. */
export const ANNOUNCER_LEASE_LABEL = "local-ccm.io/l2-announcer";
/** On the Lease: the node's on-link prefixes (CIDRs, comma-separated) where it can announce. */
export const SEGMENTS_ANNOTATION = "local-ccm.io/l2-segments";
/** On the Lease: the next hops of the node's default routes (IPs, comma-separated). */
export const GATEWAYS_ANNOTATION = "local-ccm.io/l2-gateways";
/** On the Lease: the resourceVersion up to which the agent's Service watch has applied what it announces. */
export const APPLIED_ANNOTATION = "local-ccm.io/l2-applied";
/** On the Lease: the assigned addresses another host answers for on this node's links ("address=mac", sorted). */
export const CONFLICTS_ANNOTATION = "local-ccm.io/l2-conflicts";
/** On the Service: the node its addresses were last taken from while its Lease was live (until a new announcer). */
export const RELEASED_FROM_ANNOTATION = "local-ccm.io/released-from";
/** On the Service: the name of the node that announces its addresses. */
export const ANNOUNCER_ANNOTATION = "local-ccm.io/announcer";
/** On the Service: announcerLabelValue() of that node, so that each agent watches only its own Services. */
export const ANNOUNCER_LABEL = "local-ccm.io/announcer";

export const LEASE_DURATION_SECONDS = 3;
export const RENEW_INTERVAL_MS = 1000;
/** How long before the Lease could expire in the controller's eyes the agent stops announcing (clock rates, GC). */
export const STOP_MARGIN_MS = 500;

const MAX_NAME = 253;

/** The announcer Lease's name for a node; undefined when it would be longer than a Kubernetes name may be. */
export function announcerLeaseName(node: string): string | undefined {
  const name = ANNOUNCER_LEASE_PREFIX + node;
  return name.length <= MAX_NAME ? name : undefined;
}

/** The node an announcer Lease is for; undefined for any other Lease. */
export function leaseNode(leaseName: string): string | undefined {
  return leaseName.startsWith(ANNOUNCER_LEASE_PREFIX) && leaseName.length > ANNOUNCER_LEASE_PREFIX.length
    ? leaseName.slice(ANNOUNCER_LEASE_PREFIX.length)
    : undefined;
}

// A label value: at most 63 characters, alphanumerics with '-', '_', '.' inside.
const LABEL_VALUE = /^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$/;

/**
 * The node's name when it is a valid label value, else "sha256." and the first 48 hex digits of its SHA-256 (node
 * names may be 253 characters long; label values 63). The annotation holds the name itself, so a collision of
 * hashes could only widen an agent's watch, never make it announce another node's addresses.
 */
export function announcerLabelValue(node: string): string {
  if (LABEL_VALUE.test(node)) return node;
  return `sha256.${createHash("sha256").update(node).digest("hex").slice(0, 48)}`;
}

/** Until when (agent's monotonic clock, ms) it may announce, after a renewal it sent at `sentAtMs` succeeded. */
export function announceDeadline(sentAtMs: number, leaseDurationSeconds: number): number {
  return sentAtMs + leaseDurationSeconds * 1000 - STOP_MARGIN_MS;
}

/** Until when (controller's monotonic clock, ms) a Lease whose renewal it saw at `observedAtMs` counts as live. */
export function leaseExpiry(observedAtMs: number, leaseDurationSeconds: number): number {
  return observedAtMs + leaseDurationSeconds * 1000;
}

/**
 * Whether a Lease's APPLIED_ANNOTATION covers `version`. Both are etcd revisions (decimal, one counter for every
 * resource); anything else is never taken for an acknowledgement, so the move then waits for the Lease to expire.
 */
export function hasApplied(applied: string | undefined, version: string | undefined): boolean {
  const decimal = /^[0-9]{1,30}$/;
  if (applied === undefined || version === undefined || !decimal.test(applied) || !decimal.test(version)) return false;
  return BigInt(applied) >= BigInt(version);
}

/** An address another host answers for, and that host's MAC, as a node's Lease says (CONFLICTS_ANNOTATION). */
export interface AddressConflict {
  address: string;
  mac: string;
}

/** Entries on one Lease, at most: the Lease stays small whatever the segment holds (about 1.2 KB). */
export const MAX_LEASE_CONFLICTS = 20;
const MAX_CONFLICTS_TEXT = MAX_LEASE_CONFLICTS * ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".length + 19);
const MAC = /^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$/;

/**
 * CONFLICTS_ANNOTATION's value: one entry per address (its lowest MAC when several claim it), canonical, sorted,
 * the first MAX_LEASE_CONFLICTS; "" for none (the annotation then goes).
 */
export function conflictsAnnotation(conflicts: readonly AddressConflict[]): string {
  const byAddress = new Map<string, string>();
  for (const { address, mac } of conflicts) {
    const ip = canonicalIp(address);
    const lower = mac.toLowerCase();
    if (ip === undefined || !MAC.test(lower)) continue;
    const before = byAddress.get(ip);
    if (before === undefined || lower < before) byAddress.set(ip, lower);
  }
  return [...byAddress]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .slice(0, MAX_LEASE_CONFLICTS)
    .map(([address, mac]) => `${address}=${mac}`)
    .join(",");
}

export const CONFLICTS_RULES = ["too-long", "too-many", "malformed-entry", "not-canonical", "repeated"] as const;
export type ConflictsRule = (typeof CONFLICTS_RULES)[number];

/**
 * CONFLICTS_ANNOTATION read back, only as conflictsAnnotation() writes it: anything else is refused whole, with the
 * rule it breaks (a node's credentials write the Lease; a value the agent would never write is not believed in part).
 */
export function parseConflicts(
  text: string | undefined,
): { conflicts: AddressConflict[] } | { rule: ConflictsRule; reason: string } {
  if (text === undefined || text === "") return { conflicts: [] };
  if (text.length > MAX_CONFLICTS_TEXT)
    return { rule: "too-long", reason: `${text.length} characters, over ${MAX_CONFLICTS_TEXT}` };
  const entries = text.split(",");
  if (entries.length > MAX_LEASE_CONFLICTS)
    return { rule: "too-many", reason: `${entries.length} entries, over ${MAX_LEASE_CONFLICTS}` };
  const conflicts: AddressConflict[] = [];
  for (const entry of entries) {
    const [address = "", mac = "", ...rest] = entry.split("=");
    const shown = JSON.stringify(entry.slice(0, 80));
    if (rest.length || !MAC.test(mac) || ipProblem(address) !== undefined)
      return { rule: "malformed-entry", reason: `${shown} is not address=mac` };
    if (canonicalIp(address) !== address)
      return { rule: "not-canonical", reason: `${shown}: write ${canonicalIp(address)}` };
    const last = conflicts.at(-1)?.address;
    if (last !== undefined && !(last < address))
      return { rule: "repeated", reason: `${shown}: entries are sorted, one per address` };
    conflicts.push({ address, mac });
  }
  return { conflicts };
}
