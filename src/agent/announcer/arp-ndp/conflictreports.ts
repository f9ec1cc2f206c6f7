// How the agent tells of the conflicts its announcers meet (conflicts.ts decides them): each is counted in
// local_ccm_l2_address_conflicts_total{phase, rule}; a warning in the log and a Warning Event about this node's Node
// (AddressConflict: refused before announcing; AddressClaimed: another MAC claims an address announced here) name the
// address, the Services holding it, the link and the other MAC, at most once per REPORT_INTERVAL_MS per address and
// MAC (a host sending gratuitous ARP in a loop costs a counter, not an API write per frame). The Events are about the
// Node because that is all the agent may write Events about (the chart's local-ccm-events policy): letting a node's
// credentials write Warnings on any Service of the cluster would hand a stolen token a way to cry wolf everywhere.
import { performance } from "node:perf_hooks";
import type { Service } from "kubernetes-types/core/v1.js";
import type { Logger } from "../../../cli/log.ts";
import type { EventType } from "../../../kube/events.ts";
import { canonicalIp } from "../../../net/ip.ts";
import type { AnnouncerMetrics } from "../../metrics.ts";
import type { Conflict } from "./announcer.ts";
import { REPORT_INTERVAL_MS } from "./conflicts.ts";

export const CONFLICT_EVENT_REASONS = { refuse: "AddressConflict", report: "AddressClaimed" } as const;

export interface ConflictReporterOptions {
  log: Logger;
  metrics: Pick<AnnouncerMetrics, "conflicts">;
  /** Records an Event about this node's Node. */
  nodeEvent(type: EventType, reason: string, message: string): void;
  /** The Services assigned to this node now (to name those holding the address). */
  services(): readonly Service[];
  /** Another MAC claims an address announced here (after it is reported). */
  onForeignClaim?(address: string, mac: string, link: string): void;
}

/** The handler of every announcer's conflicts (AnnouncerOptions.onConflict) on `link`. */
export function conflictReporter(options: ConflictReporterOptions): (link: string, conflict: Conflict) => void {
  const reportedAt = new Map<string, number>();
  return (link, { claim, decision, reprobeInMs }) => {
    const phase = decision.action === "refuse" ? "probing" : "announced";
    options.metrics.conflicts.with({ phase, rule: decision.rule }).inc();
    if (decision.action === "report") options.onForeignClaim?.(claim.address, claim.mac, link);
    const key = `${decision.action} ${claim.address} ${claim.mac}`;
    const now = performance.now();
    const last = reportedAt.get(key);
    if (last !== undefined && now - last < REPORT_INTERVAL_MS) return;
    reportedAt.set(key, now);
    for (const [known, at] of reportedAt) if (now - at >= REPORT_INTERVAL_MS) reportedAt.delete(known);
    const holders = servicesHolding(options.services(), claim.address);
    const services = holders.length > 0 ? ` (Service ${holders.join(", ")})` : "";
    const later = reprobeInMs === undefined ? "" : `; probed again in ${Math.round(reprobeInMs / 1000)} s`;
    const message = `L2 on ${link}: ${decision.reason}${services}${later}`;
    options.log.warn(message, { address: claim.address, mac: claim.mac, link, rule: decision.rule });
    options.nodeEvent("Warning", CONFLICT_EVENT_REASONS[decision.action], message);
  };
}

/** namespace/name of each Service whose status holds `address`. */
export function servicesHolding(services: readonly Service[], address: string): string[] {
  return services
    .filter((service) => service.status?.loadBalancer?.ingress?.some(({ ip }) => ip && canonicalIp(ip) === address))
    .map((service) => `${service.metadata?.namespace}/${service.metadata?.name}`);
}
