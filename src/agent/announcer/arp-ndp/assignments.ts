// Where this node announces each address it must (../desired.ts: from the Services its watch selects by the
// announcer label, which may be a hash), on which link, as a pure function of plain data: the desired addresses, and
// the node's segments and addresses. Each address left out carries a rule id (metrics) and a reason (logs). Whether
// the node may hold them now is holding.ts's question.
import type { Service } from "kubernetes-types/core/v1.js";
import { canonicalIp, cidrContains } from "../../../net/ip.ts";
import { ANNOUNCER_ANNOTATION } from "../../../pools/announcement.ts";
import { type Desired, type Refusal, SERVICE_SKIP_RULES, type Skip as SkipOf } from "../desired.ts";
import type { AnnouncedLink, Segment } from "./segments.ts";

export interface AssignmentInput {
  desired: Desired<"other-announcer">;
  segments: readonly Segment[];
  /** Every address of the node: never claimed by the announcer (the kernel answers for them). */
  hostAddresses: readonly string[];
}

/** Why an assigned Service or address is not announced (in order of the checks). */
export const SKIP_RULES = [
  "other-announcer", // the annotation names another node (the label matched by a hash): not ours
  ...SERVICE_SKIP_RULES,
  "host-address", // an address of this node itself
  "no-segment", // no link of this node has a prefix holding the address
  "yielded", // another MAC claimed it while this node could not reach the API (holding.ts)
  "catching-up", // not announced when the API came back, and the Service cache has not caught up yet (holding.ts)
] as const;
export type SkipRule = (typeof SKIP_RULES)[number];
export type Skip = SkipOf<SkipRule>;

export interface LinkAnnouncements {
  link: AnnouncedLink;
  addresses: string[];
}

export interface Assignment {
  reason: string;
  /** By link name: what to announce there. */
  byLink: Map<string, LinkAnnouncements>;
  skipped: Skip[];
}

/** The method's own Service rule (decideDesired's `refuse`): only a Service the annotation gives this node. */
export function assignedHere(node: string): (service: Service) => Refusal<"other-announcer"> | undefined {
  return (service) => {
    const announcer = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
    if (announcer === node) return undefined;
    return { rule: "other-announcer", reason: `announced by ${JSON.stringify(announcer)}` };
  };
}

export function decideAssignments(input: AssignmentInput): Assignment {
  const byLink = new Map<string, LinkAnnouncements>();
  const skipped: Skip[] = [...input.desired.skipped];
  const own = new Set(input.hostAddresses.map((address) => canonicalIp(address)));
  for (const { address, services } of input.desired.addresses) {
    const skip = (rule: SkipRule, reason: string) =>
      skipped.push(...services.map((service) => ({ service, address, rule, reason })));
    if (own.has(address)) {
      skip("host-address", `${address} is an address of this node: the kernel answers for it`);
      continue;
    }
    const segment = segmentOf(input.segments, address);
    if (!segment) {
      skip("no-segment", `no link of this node has a prefix holding ${address}`);
      continue;
    }
    const entry = byLink.get(segment.link.name) ?? { link: segment.link, addresses: [] };
    entry.addresses.push(address);
    byLink.set(segment.link.name, entry);
  }
  const count = [...byLink.values()].reduce((sum, entry) => sum + entry.addresses.length, 0);
  return { reason: `${count} address(es) assigned here`, byLink, skipped };
}

/** The segment holding `address`: the longest prefix, then the lowest link index (segments come sorted by prefix). */
function segmentOf(segments: readonly Segment[], address: string): Segment | undefined {
  let best: Segment | undefined;
  for (const segment of segments)
    if (cidrContains(segment.cidr, address)) {
      const longer = !best || segment.cidr.prefixLength > best.cidr.prefixLength;
      const tie = best && segment.cidr.prefixLength === best.cidr.prefixLength && segment.link.index < best.link.index;
      if (longer || tie) best = segment;
    }
  return best;
}
