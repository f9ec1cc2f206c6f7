// Which node announces each allocated address, as a pure function of the Services, the announcer Leases as this
// controller observes them, the Nodes and the ready endpoints. Every answer carries a rule id for metrics and a
// reason for logs and Events.
//
// Services that share an address form a group (connected components over their addresses): a group has one
// announcer, eligible for every Service of it, so one address is never assigned to two nodes. Eligible: its Lease
// is live, its segments hold every address of the group, it passes the node rules (loadbalancer/nodes.ts) and the
// Services' node-selector annotations, and for a Service with externalTrafficPolicy Local it holds a ready
// endpoint. Order of the rules, per group:
// 1. sticky: a current announcer that is eligible stays (a node joining moves nothing).
// 2. held: while the Lease guard pauses (leases.ts: this controller's view is not fresh), a current announcer whose
//    Lease is not live stays, and so does the rest of its group: its agent may well be announcing.
// 3. released: a current announcer whose Lease is live but that is no longer eligible (or not the group's one) is
//    removed now, and the removal names it (RELEASED_FROM_ANNOTATION). A current announcer whose Lease is not live
//    is replaced at once: its agent has withdrawn, or yields to the new announcer's first claim (announcement.ts).
// 4. release-ack: a Service released from a node gets a new announcer only once that node acknowledged the
//    removal (hasApplied(), its Lease's applied resourceVersion) or its Lease is no longer live: never on a timer,
//    since the node's Service watch may be dead or lagging for minutes. The group waits with it.
// 5. A new announcer, when needed: rendezvous hashing keyed by the group's smallest address, among the eligible.
import type { Service } from "kubernetes-types/core/v1.js";
import { type LabelSelector, matchesLabels } from "../kube/labelselector.ts";
import { hashString, topByScore } from "../loadbalancer/rendezvous.ts";
import { annotationSelector, NODE_SELECTOR_ANNOTATION } from "../loadbalancer/service.ts";
import { type Cidr, cidrContains } from "../net/ip.ts";
import { ANNOUNCER_ANNOTATION, ANNOUNCER_LABEL, hasApplied, RELEASED_FROM_ANNOTATION } from "./announcement.ts";
import { ipNumber } from "./ranges.ts";

export interface AnnouncedService {
  /** namespace/name */
  key: string;
  /** Its allocated addresses, as its status shows them. */
  ips: string[];
  /** externalTrafficPolicy Local: only a node with a ready endpoint of it. */
  local: boolean;
  /** The node its announcer annotation names. */
  announcer: string | undefined;
  /** Its node-selector annotation (loadbalancer/service.ts), or why it does not parse. */
  nodeSelector?: LabelSelector | string;
  /** The node its addresses were last taken from while its Lease was live (RELEASED_FROM_ANNOTATION). */
  releasedFrom?: string;
  /** The resourceVersion that node must have applied: the removal's own, or a later one of the Service. */
  releaseVersion?: string;
}

/** An announcer Lease as this controller sees it. */
export interface Announcer {
  name: string;
  /** hashString(name), for rendezvous hashing. */
  hash: number;
  /** Renewed within its duration, by this controller's observation. */
  live: boolean;
  /** When it stops being live unless renewed (monotonic ms). */
  expiresAtMs: number;
  /** Its agent's applied resourceVersion (APPLIED_ANNOTATION), if it says one. */
  applied?: string;
  /** The on-link prefixes where it can announce. */
  segments: readonly Cidr[];
}

export interface AnnouncersInput {
  services: readonly AnnouncedService[];
  /** The rendezvous picks of the plan before, reused (the answer is the same with or without them). */
  picks?: Picks;
  announcers: readonly Announcer[];
  /** Why a node may not carry LoadBalancer traffic (loadbalancer/nodes.ts rules); absent when it may. */
  ineligible(node: string): { rule: string; reason: string } | undefined;
  /** A node's labels, for the Services' node selectors. */
  nodeLabels(node: string): Record<string, string>;
  /** Nodes with a ready endpoint of a Service. */
  readyNodes(service: string): ReadonlySet<string>;
  /** While set, this controller's view of the Leases is not fresh: an expired Lease moves nothing (leases.ts). */
  paused?: { rule: string; reason: string };
}

export type AnnouncerRule =
  | "sticky"
  | "held"
  | "assigned"
  | "failover"
  | "released"
  | "release-ack"
  | "no-announcer";

export type AnnouncerDecision =
  | { action: "announce"; node: string; rule: "sticky" | "held" | "assigned" | "failover"; reason: string }
  /** No announcer for now; `untilMs` is when to decide again (the old announcer's Lease may expire). */
  | { action: "wait"; rule: "released" | "release-ack"; reason: string; untilMs: number }
  | { action: "refuse"; rule: "no-announcer"; reason: string };

export interface AnnouncersResult {
  /** Per Service key. */
  decisions: Map<string, AnnouncerDecision>;
  /** The earliest time a wait ends, if any Service waits. */
  wakeAtMs: number | undefined;
}

export function assignAnnouncers(input: AnnouncersInput): AnnouncersResult {
  const decisions = new Map<string, AnnouncerDecision>();
  const byNode = new Map(input.announcers.map((announcer) => [announcer.name, announcer]));
  // By name, so that reasons list nodes alike whatever order the Leases came in.
  const announcers = [...input.announcers].sort(byName);
  const shares = liveBySegments(announcers, input);
  for (const group of groups(input.services)) {
    const eligible = eligibility(group, shares, input);
    for (const [key, decision] of decideGroup(group, byNode, eligible, input)) decisions.set(key, decision);
  }
  input.picks?.planned();
  let wakeAtMs: number | undefined;
  for (const decision of decisions.values())
    if (decision.action === "wait" && decision.untilMs !== Infinity)
      wakeAtMs = Math.min(wakeAtMs ?? Infinity, decision.untilMs);
  return { decisions, wakeAtMs };
}

/** What the announcement reads of a Service beside its allocation, and the announcer label its write sets. */
export function announcedFacts(
  service: Service,
): Pick<AnnouncedService, "local" | "announcer" | "nodeSelector" | "releasedFrom"> & { label?: string } {
  const annotations = service.metadata?.annotations;
  return {
    local: service.spec?.externalTrafficPolicy === "Local",
    nodeSelector: annotationSelector(annotations?.[NODE_SELECTOR_ANNOTATION]),
    announcer: annotations?.[ANNOUNCER_ANNOTATION],
    releasedFrom: annotations?.[RELEASED_FROM_ANNOTATION],
    label: service.metadata?.labels?.[ANNOUNCER_LABEL],
  };
}

/** The node each Service should name now (undefined: none). */
export function announcerOf(decision: AnnouncerDecision): string | undefined {
  return decision.action === "announce" ? decision.node : undefined;
}

interface Group {
  services: AnnouncedService[];
  /** Every address of the group. */
  ips: string[];
  /** Its smallest address, canonical order (family, then number): the rendezvous key. */
  key: string;
}

/** Services sharing an address, transitively; a Service without addresses is left out. */
function groups(services: readonly AnnouncedService[]): Group[] {
  const parent = new Map<string, string>();
  const root = (ip: string): string => {
    let at = ip;
    while (parent.get(at) !== at) at = parent.get(at) as string;
    parent.set(ip, at);
    return at;
  };
  for (const { ips } of services) for (const ip of ips) if (!parent.has(ip)) parent.set(ip, ip);
  for (const { ips } of services) for (const ip of ips.slice(1)) parent.set(root(ip), root(ips[0] as string));
  const byRoot = new Map<string, Group>();
  for (const service of services) {
    if (!service.ips.length) continue;
    const at = root(service.ips[0] as string);
    const group = byRoot.get(at) ?? { services: [], ips: [], key: "" };
    group.services.push(service);
    byRoot.set(at, group);
  }
  for (const group of byRoot.values()) {
    group.services.sort((a, b) => (a.key < b.key ? -1 : 1));
    group.ips = [...new Set(group.services.flatMap(({ ips }) => ips))].sort(compareIps);
    group.key = group.ips[0] as string;
  }
  return [...byRoot.values()];
}

function compareIps(a: string, b: string): number {
  const [x, y] = [ipNumber(a), ipNumber(b)];
  if (!x || !y) return a < b ? -1 : a > b ? 1 : 0;
  if (x.family !== y.family) return x.family === "IPv4" ? -1 : 1;
  return x.value < y.value ? -1 : x.value > y.value ? 1 : 0;
}

const byName = (a: Announcer, b: Announcer) => (a.name < b.name ? -1 : 1);

/** Live announcers with the same segments, and those of them that pass the node rules; each list by name. */
interface SegmentShare {
  segments: readonly Cidr[];
  live: Announcer[];
  fit: Announcer[];
}

/**
 * The live announcers by their segments, which most share: a group's eligibility then tests its addresses against
 * each set of segments once, not against every announcer (2,000 groups × 5,000 announcers took seconds a plan).
 */
function liveBySegments(announcers: readonly Announcer[], input: AnnouncersInput): SegmentShare[] {
  const shares = new Map<string, SegmentShare>();
  for (const announcer of announcers) {
    if (!announcer.live) continue;
    const key = announcer.segments.map(({ address, prefixLength }) => `${address}/${prefixLength}`).join(",");
    const share = shares.get(key) ?? { segments: announcer.segments, live: [], fit: [] };
    shares.set(key, share);
    share.live.push(announcer);
    if (mayAnnounce(input.ineligible(announcer.name))) share.fit.push(announcer);
  }
  return [...shares.values()];
}

/**
 * Whether a node whose announcer Lease is live may announce. Ready Unknown says only that kubelet's heartbeat went
 * missing: kube-controller-manager marks every Node so for a while after its own view was stale (an API outage),
 * and that would take every address from its announcer at once. The agent renewing its Lease is a fresher heartbeat
 * of the same node; kube-proxy there forwards whether kubelet reports or not. Ready False (kubelet's own word) and
 * every other rule stand.
 */
const mayAnnounce = (ineligible: ReturnType<AnnouncersInput["ineligible"]>) =>
  ineligible === undefined || ineligible.rule === "ready-unknown";

/** The eligible announcers of a group, or why there are none. */
function eligibility(group: Group, shares: readonly SegmentShare[], input: AnnouncersInput): Announcer[] | string {
  // Where Leases come from: a --lb-l2-node-selector that selects no node looks the same as announcing off.
  if (!shares.length)
    return "no announcer Lease is live (kept by agents with --lb-l2-announce, on nodes --lb-l2-node-selector selects)";
  const holding = shares.filter(({ segments }) =>
    group.ips.every((ip) => segments.some((segment) => cidrContains(segment, ip))),
  );
  const merged = (list: (share: SegmentShare) => Announcer[]) =>
    holding.length === 1 ? list(holding[0] as SegmentShare) : holding.flatMap(list).sort(byName);
  const onSegment = merged(({ live }) => live);
  if (!onSegment.length) return `no live announcer has a segment holding ${group.ips.join(", ")}`;
  const fit = merged(({ fit }) => fit);
  if (!fit.length) {
    const why = onSegment.slice(0, 3).map(({ name }) => `${name} ${input.ineligible(name)?.reason}`);
    return `no live announcer on the segment may carry traffic: ${why.join("; ")}`;
  }
  const unparsed = group.services.find(({ nodeSelector }) => typeof nodeSelector === "string");
  if (unparsed) return `${unparsed.key}: ${unparsed.nodeSelector}`;
  const selectors = group.services.flatMap(({ nodeSelector }) => (nodeSelector ? [nodeSelector as LabelSelector] : []));
  const matches = (node: string) => selectors.every((selector) => matchesLabels(selector, input.nodeLabels(node)));
  const selected = selectors.length ? fit.filter(({ name }) => matches(name)) : fit;
  if (!selected.length)
    return `no live announcer on the segment matches ${selectors.map(({ text }) => text).join(" and ")}`;
  const local = group.services.filter((service) => service.local);
  const ready = local.length
    ? selected.filter(({ name }) => local.every(({ key }) => input.readyNodes(key).has(name)))
    : selected;
  if (!ready.length)
    return `no live announcer on the segment has a ready endpoint of ${local.map(({ key }) => key).join(", ")}`;
  return ready;
}

// The names in a list of eligible announcers: most groups share one list (a segment's), whose set is made once.
const names = new WeakMap<readonly Announcer[], ReadonlySet<string>>();
function namesOf(list: readonly Announcer[]): ReadonlySet<string> {
  let set = names.get(list);
  if (!set) names.set(list, (set = new Set(list.map(({ name }) => name))));
  return set;
}

/** The rendezvous pick for a group among its candidates, from `picks` when an earlier plan made it. */
function pick(
  candidates: readonly Announcer[],
  key: string,
  byNode: ReadonlyMap<string, Announcer>,
  picks: Picks | undefined,
): Announcer | undefined {
  const known = picks?.get(candidates, key);
  if (known !== undefined) return byNode.get(known); // one of the candidates: they have the same names
  const chosen = topByScore(candidates, hashString(key), 1)[0];
  if (chosen) picks?.set(candidates, key, chosen.name);
  return chosen;
}

/**
 * Rendezvous picks kept from one plan to the next, per list of candidates (by their names) and group. A pick scores
 * every candidate: 1.5 ms with 5,000 of them under --jitless, so 2,000 new Services waiting for their announcer to
 * be written cost seconds a plan when each plan picked again. A pick is kept while the plans ask for it: until its
 * group has its announcer, or its candidates change.
 */
export class Picks {
  private asked = new Map<string, Map<string, string>>();
  private before = new Map<string, Map<string, string>>();
  private readonly listKeys = new WeakMap<readonly Announcer[], string>();

  get(candidates: readonly Announcer[], key: string): string | undefined {
    const list = this.listKey(candidates);
    const name = this.asked.get(list)?.get(key) ?? this.before.get(list)?.get(key);
    if (name !== undefined) this.set(candidates, key, name);
    return name;
  }

  set(candidates: readonly Announcer[], key: string, name: string): void {
    const list = this.listKey(candidates);
    this.asked.set(list, (this.asked.get(list) ?? new Map<string, string>()).set(key, name));
  }

  /** Ends a plan: only the picks it asked for are kept. */
  planned(): void {
    this.before = this.asked;
    this.asked = new Map();
  }

  private listKey(candidates: readonly Announcer[]): string {
    let list = this.listKeys.get(candidates);
    if (list === undefined) this.listKeys.set(candidates, (list = candidates.map(({ name }) => name).join("\n")));
    return list;
  }
}

function decideGroup(
  group: Group,
  byNode: ReadonlyMap<string, Announcer>,
  eligible: Announcer[] | string,
  input: AnnouncersInput,
): Map<string, AnnouncerDecision> {
  const decisions = new Map<string, AnnouncerDecision>();
  const candidates = typeof eligible === "string" ? [] : eligible;
  const isEligible = (node: string | undefined) => node !== undefined && namesOf(candidates).has(node);
  // Rule 1: an eligible current announcer stays; of several (from before the Services shared), the top one.
  const named = new Set(group.services.flatMap(({ announcer }) => announcer ?? []));
  const current = [...named].filter(isEligible).map((name) => byNode.get(name) as Announcer);
  const kept = topByScore(current, hashString(group.key), 1)[0];
  /** Rules 2 to 4: nodes that may still answer for an address of the group, and until when to wait for them. */
  const pending = new Map<string, { untilMs: number; reason: string }>();
  let held: Announcer | undefined;
  for (const service of group.services) {
    const { announcer } = service;
    if (announcer !== undefined && announcer === kept?.name) {
      decisions.set(service.key, { action: "announce", node: announcer, rule: "sticky", reason: `${announcer} stays` });
      continue;
    }
    // Rule 2: with the guard paused, a current announcer whose Lease expired stays: it may well be announcing. One
    // per group (the first Service's), and none beside an eligible one, as ever.
    const current = announcer === undefined ? undefined : byNode.get(announcer);
    if (!kept && current && !current.live && input.paused && (held === undefined || held === current)) {
      const reason = `the Lease of ${current.name} is not live, but ${input.paused.reason}: it stays`;
      decisions.set(service.key, { action: "announce", node: current.name, rule: "held", reason });
      pending.set(current.name, { untilMs: Infinity, reason: `${service.key} is held by ${current.name}` });
      held ??= current;
      continue;
    }
    // Another expired one, paused: may answer too; what else of the group is new to the held one waits for it.
    if (current && !current.live && input.paused)
      pending.set(current.name, { untilMs: Infinity, reason: `${service.key} may still be announced by ${announcer}` });
    // Rule 3: a live announcer that is not the group's one is released now.
    if (announcer !== undefined && current?.live) {
      const why = isEligible(announcer) ? `the group sharing ${group.key} is announced by ${kept?.name}` : "ineligible";
      const reason = `released ${announcer} (${why}); a new announcer once it acknowledges or its Lease expires`;
      decisions.set(service.key, { action: "wait", rule: "released", reason, untilMs: current.expiresAtMs });
      const wait = `${service.key} was just released from ${announcer}`;
      pending.set(announcer, { untilMs: current.expiresAtMs, reason: wait });
      continue;
    }
    // Rule 4: the node it was released from has not applied the removal, and may still answer; with the guard
    // paused, an expired Lease does not say it stopped.
    const from =
      announcer === undefined && service.releasedFrom !== undefined ? byNode.get(service.releasedFrom) : undefined;
    if (from && (from.live || input.paused) && !hasApplied(from.applied, service.releaseVersion))
      pending.set(from.name, {
        // Paused, its expiry is past: a renewal or the guard lifting decides again, not a timer.
        untilMs: from.live ? from.expiresAtMs : Infinity,
        reason:
          `released from ${from.name}, which has applied ${from.applied ?? "nothing"} of ${service.releaseVersion}: ` +
          "waiting until it acknowledges or its Lease expires",
      });
  }
  // Rule 5: the rest get the kept announcer (it announces their addresses already), else a new one; none while
  // another node may still answer for an address of the group (the released node itself may have it back).
  const rest = group.services.filter(({ key }) => !decisions.has(key));
  if (!rest.length) return decisions;
  const chosen = kept ?? held ?? pick(candidates, group.key, byNode, input.picks);
  const waitFor = [...pending].filter(([node]) => node !== chosen?.name).map(([, wait]) => wait);
  if (waitFor.length) {
    const untilMs = Math.max(...waitFor.map((wait) => wait.untilMs));
    const reason = waitFor.map((wait) => wait.reason).join("; ");
    for (const service of rest) decisions.set(service.key, { action: "wait", rule: "release-ack", reason, untilMs });
    return decisions;
  }
  for (const service of rest)
    decisions.set(
      service.key,
      chosen && chosen === held
        ? { action: "announce", node: held.name, rule: "held", reason: `${held.name} holds the group's addresses` }
        : assign(service, chosen, eligible),
    );
  return decisions;
}

function assign(
  service: AnnouncedService,
  chosen: Announcer | undefined,
  eligible: Announcer[] | string,
): AnnouncerDecision {
  if (chosen) {
    const rule = service.announcer === undefined ? "assigned" : "failover";
    const why = rule === "failover" ? `the Lease of ${service.announcer} is not live` : "it had none";
    return { action: "announce", node: chosen.name, rule, reason: `${chosen.name} announces (${why})` };
  }
  return { action: "refuse", rule: "no-announcer", reason: typeof eligible === "string" ? eligible : "none eligible" };
}
