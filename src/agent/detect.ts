// Node IP detection for one address type (ExternalIP or InternalIP) by one method: route sources towards
// targets, host addresses inside CIDRs, or an interface's addresses. The selection is pure; the kernel
// is asked through the netlink adapter. Input is valid: the flag layer rejects bad IPs, CIDRs and conflicts.
// A target's source is the kernel's own choice, taken as is: for IPv6 that is RFC 6724 selection, which
// may prefer a plain /128 VIP to the /64 address, so IPv6 VIPs belong in deprecated (preferred_lft 0,
// keepalived's default) — or use the CIDR or interface method, which skip VIPs.
import { type Cidr, cidrContains, cidrWithin, parseCidr, uniqueIPs } from "../net/ip.ts";
import type { Netlink } from "../net/netlink.ts";
import type { HostAddress } from "../net/rtnetlink.ts";

export type DetectionMethod =
  | { kind: "target"; targets: readonly string[] }
  | { kind: "cidr"; cidrs: readonly string[] }
  | { kind: "interface"; interfaces: readonly string[] };

export interface DetectionConfig {
  external?: DetectionMethod;
  internal?: DetectionMethod;
}

export type AddressType = "ExternalIP" | "InternalIP";

export interface DetectionProblem {
  type: AddressType;
  reason: "NoRoute" | "NoAddress";
  message: string;
}

export interface Detection {
  /**
   * Addresses in flag order without duplicates; undefined = not configured, or nothing found (keep the
   * current ones).
   */
  external?: string[];
  internal?: string[];
  /** One per target, CIDR or interface that yielded nothing, even when other items of its type did. */
  problems: DetectionProblem[];
}

export async function detectAddresses(netlink: Netlink, config: DetectionConfig): Promise<Detection> {
  const methods = [config.external, config.internal];
  const host = methods.some((method) => method && method.kind !== "target")
    ? await netlink.listAddresses()
    : [];
  const detect = async (type: AddressType, method: DetectionMethod | undefined) =>
    method && summarize(type, method, await lookup(netlink, method, host));
  const [external, internal] = await Promise.all([
    detect("ExternalIP", config.external),
    detect("InternalIP", config.internal),
  ]);
  return {
    external: external?.addresses,
    internal: internal?.addresses,
    problems: [...(external?.problems ?? []), ...(internal?.problems ?? [])],
  };
}

/**
 * What each item of the method yields: the kernel's route source per target, usable addresses per CIDR
 * or interface.
 */
async function lookup(netlink: Netlink, method: DetectionMethod, host: HostAddress[]): Promise<string[][]> {
  switch (method.kind) {
    case "target":
      return Promise.all(
        method.targets.map(async (target) => {
          const source = await netlink.routeSource(target);
          return source === undefined ? [] : [source];
        }),
      );
    case "cidr":
      return method.cidrs.map((cidr) => selectByCidr(host, cidr));
    case "interface":
      return method.interfaces.map((name) => selectByInterface(host, name));
  }
}

/** One type's result from what each item yielded (found[i] belongs to the method's i-th item). */
export function summarize(
  type: AddressType,
  method: DetectionMethod,
  found: string[][],
): { addresses?: string[]; problems: DetectionProblem[] } {
  const items =
    method.kind === "target" ? method.targets : method.kind === "cidr" ? method.cidrs : method.interfaces;
  const problems = items.flatMap((item, i): DetectionProblem[] => {
    if ((found[i] ?? []).length > 0) return [];
    if (method.kind === "target") return [{ type, reason: "NoRoute", message: `no route to ${item}` }];
    const where = method.kind === "cidr" ? `in ${item}` : `on interface ${item}`;
    return [{ type, reason: "NoAddress", message: `no usable address ${where}` }];
  });
  const addresses = uniqueIPs(found.flat());
  return { addresses: addresses.length > 0 ? addresses : undefined, problems };
}

/**
 * The host's addresses inside `cidr`, in listing order; skipped kinds only when the CIDR asks for them
 * (see `claims`).
 */
export function selectByCidr(host: HostAddress[], cidr: string): string[] {
  const wanted = parseCidr(cidr);
  if (!wanted) return [];
  return uniqueIPs(
    host
      .filter((entry) => cidrContains(wanted, entry.address))
      .filter((entry) =>
        claims(entry, host).every((claim) => claim !== undefined && cidrWithin(wanted, claim)),
      )
      .map((entry) => entry.address),
  );
}

/** The interface's usable addresses: IPv4 first, then IPv6, each in the kernel's order (IPv4 primary first). */
export function selectByInterface(host: HostAddress[], name: string): string[] {
  return uniqueIPs(
    host
      .filter((entry) => entry.interfaceName === name && claims(entry, host).length === 0)
      .sort((a, b) => a.family - b.family)
      .map((entry) => entry.address),
  );
}

const LOOPBACK = ["127.0.0.0/8", "::1/128"].map(cidrOf);
const LINK_LOCAL = ["169.254.0.0/16", "fe80::/10"].map(cidrOf);

/**
 * Why an address is not a node address by default: one entry per reason, each the CIDR that a requested
 * CIDR must lie within to ask for it anyway (undefined: never taken). Empty = usable.
 * - tentative / DAD-failed IPv6: not usable as a source at all (a tentative one becomes usable and is
 *   reported as an address change).
 * - loopback, link-local: asked for by a CIDR inside 127.0.0.0/8, ::1/128, 169.254.0.0/16 or fe80::/10.
 * - extras that move or go away — VIPs, secondary/temporary and deprecated addresses: asked for only by
 *   naming the address itself (/32 or /128), so a VIP never joins a node's addresses through a broad CIDR.
 */
export function claims(entry: HostAddress, host: HostAddress[]): (Cidr | undefined)[] {
  const result: (Cidr | undefined)[] = [];
  if (entry.flags.tentative || entry.flags.dadFailed) result.push(undefined);
  for (const range of [...LOOPBACK, ...LINK_LOCAL])
    if (cidrContains(range, entry.address)) result.push(range);
  if (entry.flags.secondary || entry.flags.deprecated || isVip(entry, host))
    result.push(cidrOf(entry.address));
  return result;
}

/** A host-prefix address (/32, /128) on an interface that also has a regular subnet address of its family. */
function isVip(entry: HostAddress, host: HostAddress[]): boolean {
  const hostPrefix = entry.family === 4 ? 32 : 128;
  return (
    entry.prefixLength === hostPrefix &&
    host.some(
      (other) =>
        other.interfaceIndex === entry.interfaceIndex &&
        other.family === entry.family &&
        other.prefixLength < hostPrefix &&
        ![...LOOPBACK, ...LINK_LOCAL].some((range) => cidrContains(range, other.address)),
    )
  );
}

function cidrOf(text: string): Cidr {
  const cidr = parseCidr(text);
  if (!cidr) throw new Error(`not a CIDR: ${text}`);
  return cidr;
}

