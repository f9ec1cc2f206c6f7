// The address rules of the node agent: which status.addresses entries the agent owns, where they go, and
// which disagreements it reports. Pure and idempotent, so a second reconcile with the same detection writes
// nothing.
import type { NodeAddress } from "kubernetes-types/core/v1.js";
import { canonicalIp, uniqueIPs } from "../net/ip.ts";

const INTERNAL_IP = "InternalIP";
const EXTERNAL_IP = "ExternalIP";

export interface DetectedAddresses {
  /**
   * ExternalIPs found this round, in flag order. undefined = detection not configured or failed this
   * round: keep the current ExternalIPs exactly as they are. An array (even empty) replaces them.
   */
  external?: string[];
  /** Same for InternalIPs. undefined = unmanaged: kubelet's InternalIPs are kept as they are. */
  internal?: string[];
}

export interface AddressPlan {
  addresses: NodeAddress[];
  /**
   * Disagreements to report as warnings/events, never forced (e.g. detected internal IP differs from
   * provided-node-ip). Deterministic text.
   */
  notes: string[];
}

/**
 * kubelet's alpha.kubernetes.io/provided-node-ip annotation (comma list, may be absent/empty/spaced)
 * → IPs in canonical form, each read as Kubernetes reads it (canonicalIp: "010.0.0.1" is 10.0.0.1).
 */
export function parseProvidedNodeIPs(annotation: string | undefined): string[] {
  // Unspecified addresses (kubelet --node-ip=0.0.0.0 / ::) name a family preference, not a node IP.
  const ips = (annotation ?? "").split(",").map((part) => canonicalIp(part.trim()));
  return uniqueIPs(ips.filter((ip): ip is string => ip !== undefined && ip !== "0.0.0.0" && ip !== "::"));
}

/** The node counts as initialised (taint may go) once it has at least one InternalIP. */
export function hasInternalIP(addresses: NodeAddress[]): boolean {
  return addresses.some((entry) => entry.type === INTERNAL_IP && entry.address !== "");
}

/** Order-sensitive equality of two address lists (the reconcile loop writes only when this is false). */
export function sameAddresses(a: NodeAddress[], b: NodeAddress[]): boolean {
  return (
    a.length === b.length &&
    a.every((entry, i) => entry.type === b[i]?.type && entry.address === b[i]?.address)
  );
}

/**
 * The addresses the Node should carry: managed types (those with a detection) replaced in place, all else
 * kept in order, exact duplicates and ExternalIPs equal to an InternalIP dropped. Applying it twice
 * changes nothing.
 */
export function desiredAddresses(
  current: NodeAddress[],
  detected: DetectedAddresses,
  context: { providedNodeIPs: string[] },
): AddressPlan {
  const provided = canonicalList(context.providedNodeIPs);
  const detectedInternal = detected.internal && canonicalList(detected.internal);
  // Kubernetes takes the first InternalIP of each family as the node IP: kubelet's choice stays first.
  const internal = detectedInternal && uniqueIPs([...provided, ...detectedInternal]);
  const internalOfResult = new Set(
    internal ?? current.filter((entry) => entry.type === INTERNAL_IP).map((entry) => ipKey(entry.address)),
  );
  const external =
    detected.external && canonicalList(detected.external).filter((ip) => !internalOfResult.has(ip));
  return {
    addresses: withoutDuplicates(place(current, internal, external)),
    notes: detectedInternal ? disagreements(provided, detectedInternal) : [],
  };
}

/**
 * Puts each managed list where its type's first current entry was (kubelet's order is kept, so nothing
 * moves between reconciles); a type new to the Node goes where kubelet would put it: InternalIPs first,
 * ExternalIPs right after the last InternalIP.
 */
function place(current: NodeAddress[], internal?: string[], external?: string[]): NodeAddress[] {
  const managed = new Map<string, NodeAddress[]>();
  if (internal) managed.set(INTERNAL_IP, entries(INTERNAL_IP, internal));
  if (external) managed.set(EXTERNAL_IP, entries(EXTERNAL_IP, external));
  const placed = new Set<string>();
  const result: NodeAddress[] = [];
  for (const entry of current) {
    const replacement = managed.get(entry.type);
    if (!replacement) result.push({ ...entry });
    else if (!placed.has(entry.type)) result.push(...replacement);
    placed.add(entry.type);
  }
  if (!placed.has(INTERNAL_IP)) result.unshift(...(managed.get(INTERNAL_IP) ?? []));
  const afterInternal = result.findLastIndex((entry) => entry.type === INTERNAL_IP) + 1;
  if (!placed.has(EXTERNAL_IP)) result.splice(afterInternal, 0, ...(managed.get(EXTERNAL_IP) ?? []));
  return result;
}

function entries(type: string, ips: string[]): NodeAddress[] {
  return ips.map((address) => ({ type, address }));
}

/** Drops repeats of the same type and address (IPs compared canonically); the first occurrence stays. */
function withoutDuplicates(addresses: NodeAddress[]): NodeAddress[] {
  const seen = new Set<string>();
  return addresses.filter((entry) => {
    const isIP = entry.type === INTERNAL_IP || entry.type === EXTERNAL_IP;
    const key = `${entry.type}\n${isIP ? ipKey(entry.address) : entry.address}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** One note per provided IP whose family was detected without it: reported, never forced. */
function disagreements(provided: string[], detected: string[]): string[] {
  return provided.flatMap((ip) => {
    const sameFamily = detected.filter((candidate) => family(candidate) === family(ip));
    if (sameFamily.length === 0 || sameFamily.includes(ip)) return [];
    return [
      `detected InternalIP ${sameFamily.join(", ")} differs from provided-node-ip ${ip}; ` +
        `${ip} stays the first IPv${family(ip)} InternalIP`,
    ];
  });
}

/** Detection yields IPs; anything else is kept as written rather than silently lost. */
function ipKey(text: string): string {
  return canonicalIp(text) ?? text;
}

function canonicalList(ips: string[]): string[] {
  return uniqueIPs(ips.map(ipKey));
}

function family(canonical: string): 4 | 6 {
  return canonical.includes(":") ? 6 : 4;
}
