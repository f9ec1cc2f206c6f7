// Addresses another host on the network answers for, as the announcers' Leases report them (CONFLICTS_ANNOTATION,
// announcement.ts), turned into what the controller tells: a Warning on the Service that holds the address, and a
// line in its pool's status. A report is taken only from the node that announces the Service: a node says what it
// meets on its own links (its agent probes only the addresses it announces), and its Lease is all it may write, so a
// node's credentials can make the controller report against the Services it announces and nothing else. Nothing
// moves: another host holds the address on that segment, and any node there would meet it too (a move would only
// withdraw it from the node that meets the host, for one that meets it again, and fight over it on the way).
import type { AddressConflict } from "./announcement.ts";

/** An address of a Service that another host answers for on its announcer's segment. */
export interface InUse {
  /** namespace/name of the Service holding it. */
  service: string;
  address: string;
  /** The other host's MAC. */
  mac: string;
  /** The announcer that reported it. */
  node: string;
}

export interface InUseInput {
  /** Services with addresses, and the node that announces them (the controller's announcer annotation). */
  services: readonly { key: string; ips: readonly string[]; announcer: string | undefined }[];
  /** Each announcer Lease's conflicts, as parseConflicts() read them. */
  reports: readonly { node: string; conflicts: readonly AddressConflict[] }[];
}

export interface InUseResult {
  /** By Service key, in the order of its addresses. */
  byService: Map<string, InUse[]>;
  /** Reports not taken: the node announces no Service holding that address. */
  ignored: { node: string; address: string; mac: string; rule: "not-its-announcer"; reason: string }[];
}

export function addressesInUse({ services, reports }: InUseInput): InUseResult {
  const announced = new Map<string, string>(); // "node address" → Service key
  for (const { key, ips, announcer } of services)
    if (announcer !== undefined) for (const ip of ips) announced.set(`${announcer} ${ip}`, key);
  const byService = new Map<string, InUse[]>();
  const ignored: InUseResult["ignored"] = [];
  for (const { node, conflicts } of reports)
    for (const { address, mac } of conflicts) {
      const service = announced.get(`${node} ${address}`);
      if (service === undefined) {
        const reason = `node ${node} reports ${address} answered by ${mac}, but announces no Service holding it`;
        ignored.push({ node, address, mac, rule: "not-its-announcer", reason });
        continue;
      }
      byService.set(service, [...(byService.get(service) ?? []), { service, address, mac, node }]);
    }
  return { byService, ignored };
}

/** The Warning about a Service whose addresses another host answers for; undefined when none. */
export function inUseWarning(inUse: readonly InUse[]): { reason: string; message: string } | undefined {
  if (!inUse.length) return undefined;
  const each = inUse.map(
    ({ address, mac, node }) => `another host (${mac}) answers for ${address} on the segment of node ${node}`,
  );
  const message =
    `(reported-by-announcer) ${each.join("; ")}: the address stays assigned there and moves nowhere (a node on ` +
    "that segment would meet the same host); take the address off that host, or the Service off the address";
  return { reason: "AddressInUseOnNetwork", message };
}

/** A pool's status line for an address of it that another host answers for. */
export function inUseLine({ service, address, mac, node }: InUse): string {
  return `${address} (Service ${service}) is answered by another host, ${mac}, on the segment of node ${node}`;
}
