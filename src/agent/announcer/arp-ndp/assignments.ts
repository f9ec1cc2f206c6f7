// Which addresses this node announces, on which link, as a pure function of plain data: the Services its watch
// selects (by the announcer label, which may be a hash), and the node's segments and addresses. Each address left
// out carries a rule id (metrics) and a reason (logs). Whether the node may hold them now is holding.ts's question.
import type { Service } from "kubernetes-types/core/v1.js";
import { canonicalIp, cidrContains, ipProblem } from "../../../net/ip.ts";
import { ANNOUNCER_ANNOTATION } from "../../../pools/announcement.ts";
import type { AnnouncedLink } from "./announcer.ts";
import type { Segment } from "./segments.ts";

export interface AssignmentInput {
  node: string;
  services: readonly Service[];
  segments: readonly Segment[];
  /** Every address of the node: never claimed by the announcer (the kernel answers for them). */
  hostAddresses: readonly string[];
}

/** Why an assigned Service or address is not announced (in order of the checks). */
export const SKIP_RULES = [
  "other-announcer", // the annotation names another node (the label matched by a hash): not ours
  "not-load-balancer", // the Service is no longer of type LoadBalancer
  "deleting", // the Service is being deleted
  "not-an-ip", // an ingress entry that is no IP address Kubernetes accepts
  "host-address", // an address of this node itself
  "no-segment", // no link of this node has a prefix holding the address
  "yielded", // another MAC claimed it while this node could not reach the API (holding.ts)
  "catching-up", // not announced when the API came back, and the Service cache has not caught up yet (holding.ts)
] as const;
export type SkipRule = (typeof SKIP_RULES)[number];

export interface Skip {
  /** Absent where the address is left out whichever Service has it. */
  service?: string;
  address?: string;
  rule: SkipRule;
  reason: string;
}

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

export function decideAssignments(input: AssignmentInput): Assignment {
  const byLink = new Map<string, LinkAnnouncements>();
  const skipped: Skip[] = [];
  const own = new Set(input.hostAddresses.map((address) => canonicalIp(address)));
  for (const service of input.services) {
    const name = `${service.metadata?.namespace}/${service.metadata?.name}`;
    const refusal = serviceRefusal(service, input.node);
    if (refusal) {
      skipped.push({ service: name, ...refusal });
      continue;
    }
    for (const ingress of service.status?.loadBalancer?.ingress ?? []) {
      if (ingress.ip === undefined) continue; // a hostname: nothing to announce
      const skip = (rule: SkipRule, reason: string) => skipped.push({ service: name, address: ingress.ip, rule, reason });
      const problem = ipProblem(ingress.ip);
      if (problem) {
        skip("not-an-ip", problem);
        continue;
      }
      const address = canonicalIp(ingress.ip) as string;
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
      if (!entry.addresses.includes(address)) entry.addresses.push(address);
      byLink.set(segment.link.name, entry);
    }
  }
  const count = [...byLink.values()].reduce((sum, entry) => sum + entry.addresses.length, 0);
  return { reason: `${count} address(es) assigned here`, byLink, skipped };
}

function serviceRefusal(service: Service, node: string): { rule: SkipRule; reason: string } | undefined {
  const announcer = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
  if (announcer !== node) return { rule: "other-announcer", reason: `announced by ${JSON.stringify(announcer)}` };
  if (service.spec?.type !== "LoadBalancer")
    return { rule: "not-load-balancer", reason: `of type ${service.spec?.type}, not LoadBalancer` };
  if (service.metadata?.deletionTimestamp) return { rule: "deleting", reason: "being deleted" };
  return undefined;
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
