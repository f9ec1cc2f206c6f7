// What this node must announce, whatever the method, as a pure function of plain data: the Services its watch
// lists, each checked first by the method's own rule (ARP/NDP: the announcer annotation names this node), then by
// the rules every method shares. Each address left out carries a rule id (metrics) and a reason (logs); where and
// how an address is announced (a link, a peer) is the method's question.
import type { Service } from "kubernetes-types/core/v1.js";
import { canonicalIp, ipProblem } from "../../net/ip.ts";

/** Why a Service's addresses are not announced whatever the method (in order of the checks). */
export const SERVICE_SKIP_RULES = [
  "not-load-balancer", // the Service is no longer of type LoadBalancer
  "deleting", // the Service is being deleted
  "not-an-ip", // an ingress entry that is no IP address Kubernetes accepts
] as const;
export type ServiceSkipRule = (typeof SERVICE_SKIP_RULES)[number];

/** An address left out, by a rule of `Rule`: the shared ones, or a method's. */
export interface Skip<Rule extends string = string> {
  /** Absent where the address is left out whichever Service has it. */
  service?: string;
  address?: string;
  rule: Rule;
  reason: string;
}

/**
 * What to log of each decision's skips: those that were not among the last decision's (a new Service, a new rule or
 * reason). Logging the whole list on every change wrote O(Services²) lines: with 1,000 Services on an excluded node
 * the agent was OOM-killed, its log lines queued on stdout.
 */
export function newSkips<S extends Skip>(): (skipped: readonly S[]) => S[] {
  let last = new Set<string>();
  return (skipped) => {
    const keys = skipped.map(({ service, address, rule, reason }) => JSON.stringify([service, address, rule, reason]));
    const fresh = skipped.filter((_, i) => !last.has(keys[i] as string));
    last = new Set(keys);
    return fresh;
  };
}

/** A method's reason not to announce a Service's addresses here. */
export interface Refusal<Rule extends string> {
  rule: Rule;
  reason: string;
}

/** One address this node must announce, and the Services ("namespace/name") that hold it, in the order listed. */
export interface DesiredAddress {
  /** Canonical (canonicalIp). */
  address: string;
  services: string[];
}

export interface Desired<Rule extends string = string> {
  /** Each address once, in the order the Services list them. */
  addresses: DesiredAddress[];
  skipped: Skip<Rule | ServiceSkipRule>[];
}

export function decideDesired<Rule extends string>(
  services: readonly Service[],
  refuse: (service: Service) => Refusal<Rule> | undefined,
): Desired<Rule> {
  const byAddress = new Map<string, DesiredAddress>();
  const skipped: Skip<Rule | ServiceSkipRule>[] = [];
  for (const service of services) {
    const name = `${service.metadata?.namespace}/${service.metadata?.name}`;
    const refusal = refuse(service) ?? serviceRefusal(service);
    if (refusal) {
      skipped.push({ service: name, ...refusal });
      continue;
    }
    for (const ingress of ingressIps(service)) {
      if ("problem" in ingress) {
        skipped.push({ service: name, address: ingress.ip, rule: "not-an-ip", reason: ingress.problem });
        continue;
      }
      const { address } = ingress;
      const entry = byAddress.get(address) ?? { address, services: [] };
      if (!entry.services.includes(name)) entry.services.push(name);
      byAddress.set(address, entry);
    }
  }
  return { addresses: [...byAddress.values()], skipped };
}

/** An ingress IP as read: canonical (canonicalIp), or why it is none (ipProblem). */
export type IngressIp = { ip: string; address: string } | { ip: string; problem: string };

const readIngress = new WeakMap<Service, readonly IngressIp[]>();

/**
 * A Service's ingress IPs (hostnames left out: nothing to announce), read once per object: the informer replaces an
 * object on each change and never changes one. Reading every Service's addresses again on every change was most of
 * an apply's time with 1,000 Services.
 */
export function ingressIps(service: Service): readonly IngressIp[] {
  let read = readIngress.get(service);
  if (!read) {
    read = (service.status?.loadBalancer?.ingress ?? []).flatMap(({ ip }): IngressIp[] => {
      if (ip === undefined) return [];
      const problem = ipProblem(ip);
      return [problem ? { ip, problem } : { ip, address: canonicalIp(ip) as string }];
    });
    readIngress.set(service, read);
  }
  return read;
}

function serviceRefusal(service: Service): Refusal<ServiceSkipRule> | undefined {
  if (service.spec?.type !== "LoadBalancer")
    return { rule: "not-load-balancer", reason: `of type ${service.spec?.type}, not LoadBalancer` };
  if (service.metadata?.deletionTimestamp) return { rule: "deleting", reason: "being deleted" };
  return undefined;
}
