// The ARP/NDP (layer-2) method behind the announcing loop's interface (../method.ts): this node's announcer Lease
// (lease.ts), netlink's links and addresses, and one announcer per link in use (announcer.ts). Where each address the
// loop hands over is announced is decided in assignments.ts, and whether to hold it now in holding.ts; this file
// only applies the difference. Every trigger (a change the loop hands over, a netlink change, a renewal, a peer's
// answer or foreign claim, the Lease's deadline) runs the same reconcile, which also keeps a timer at the next
// deadline. Past the Lease's deadline (the API out of reach) a link keeps its addresses, IPv4 and IPv6 alike, while a
// peer there answers the probes (ARP, NDP) sent every PEER_PROBE_INTERVAL_MS, and yields an address another MAC
// claims; a link cut off too is withdrawn, and its addresses probed afresh once a peer answers again.
// Other hosts' claims the announcers meet (conflicts.ts) go to conflictreports.ts, which hands those of announced
// addresses to onForeignClaim here: the one way a node whose view may be stale learns it is to yield.
import { performance } from "node:perf_hooks";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Logger } from "../../../cli/log.ts";
import type { KubeClient } from "../../../kube/client.ts";
import type { EventType } from "../../../kube/events.ts";
import { leaseResource, Resource } from "../../../kube/resource.ts";
import type { Netlink } from "../../../net/netlink.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LABEL,
  announcerLabelValue,
  announcerLeaseName,
  conflictsAnnotation,
} from "../../../pools/announcement.ts";
import type { AnnounceFlags } from "../../flags.ts";
import type { AnnouncerMetrics } from "../../metrics.ts";
import { type AddressConflict, hasApplied } from "../../../pools/announcement.ts";
import { type Desired, newSkips } from "../desired.ts";
import type { AnnouncementMethod, MethodDefinition, ServiceView } from "../method.ts";
import { type Announcer, type Conflict, startAnnouncer } from "./announcer.ts";
import {
  assignedHere,
  type Assignment,
  decideAssignments,
  type LinkAnnouncements,
  type Skip,
  SKIP_RULES,
} from "./assignments.ts";
import { conflictReporter } from "./conflictreports.ts";
import {
  decideHolding,
  HELD_PROBES_PER_ROUND,
  HOLDING_RULES,
  hear,
  type HoldingRule,
  LinkPeers,
  type NeighborMessage,
  PEER_PROBE_INTERVAL_MS,
  restrictAnnouncements,
  shouldProbe,
} from "./holding.ts";
import { AnnouncerLease, deleteLeftoverLease } from "./lease.ts";
import { decideSelection, SELECTION_RULES } from "./selection.ts";
import { type AnnouncedLink, nodeSegments, type Segment, segmentsAnnotation, unusableInterfaces } from "./segments.ts";

export interface L2Options {
  client: KubeClient;
  netlink: Netlink;
  node: string;
  flags: AnnounceFlags;
  log: Logger;
  metrics: AnnouncerMetrics;
  /** Records an Event about this node's Node. */
  nodeEvent(type: EventType, reason: string, message: string): void;
}

/**
 * Layer 2: the Services whose announcer label names this node (its hash), announced when the annotation does too,
 * on nodes --lb-l2-node-selector selects (selection.ts). Started, it opens the Lease; when this node does not
 * announce, a Lease an earlier run left is deleted.
 */
export function l2Method(options: L2Options): MethodDefinition<"other-announcer"> {
  const log = options.log.with({ node: options.node });
  return {
    name: "L2",
    watch: {
      labelSelector: `${ANNOUNCER_LABEL}=${announcerLabelValue(options.node)}`,
      annotations: [ANNOUNCER_ANNOTATION],
    },
    refuse: assignedHere(options.node),
    select: (labels) => decideSelection(options.flags.nodeSelector, labels),
    selectionRules: SELECTION_RULES,
    start: (services) => startL2(options, services),
    clearLeftovers: () => deleteLeftoverLease(leaseAccess(options, log)),
  };
}

/** Netlink events come in bursts: one refresh per burst. */
const NETLINK_DEBOUNCE_MS = 200;

/** This node's announcer Lease: where it lives, its name and holder. */
function leaseAccess({ client, node, flags }: L2Options, log: Logger) {
  const name = announcerLeaseName(node) as string; // checked with the flags
  const leases = new Resource<Lease>(client, leaseResource(flags.leaseNamespace));
  return { leases, identity: { node, name, namespace: flags.leaseNamespace }, log };
}

async function startL2(options: L2Options, services: ServiceView): Promise<AnnouncementMethod<"other-announcer">> {
  const { netlink, node, flags, metrics } = options;
  const log = options.log.with({ node });
  const access = leaseAccess(options, log);
  const name = access.identity.name;
  const lease = new AnnouncerLease({
    ...access,
    // Handlers run (and reconcile applies) before the informer moves its resourceVersion: read at each write.
    applied: () => services.lastResourceVersion(),
    conflicts: () => conflictsAnnotation(announcers.conflictsAll()),
    onRenewed: (_, version) => {
      // The renewal that ends a lapse: until the Service cache has caught up with it, nothing new (holding.ts).
      if (lapsed && version !== undefined) {
        rejoin = { since: version, kept: new Set(announcers.announcedAll()) };
        services.relist(); // its watch may have missed the lapse's changes for minutes: a list is as of now
      }
      lapsed = false;
      reconcile();
    },
    onResult: (result) => metrics.renewals.with({ result }).inc(),
  });
  /** Per link name: its peers, kept across announcers. */
  const peers = new Map<string, LinkPeers>();
  const peersOf = (link: string) => peers.get(link) ?? peers.set(link, new LinkPeers()).get(link) as LinkPeers;
  /** Whether `link` may hold its addresses at this very moment (asked before each answer). */
  const holds = (link: string) =>
    decideHolding({
      nowMs: performance.now(),
      validUntilMs: lease.validUntil(),
      peerAnsweredAtMs: peersOf(link).answeredAtMs,
    }).announce;
  const onConflict = conflictReporter({ ...options, log, services: () => services.list(), onForeignClaim });
  // An address is announced once its probes found nobody, after the pass that asked for it: counted then.
  const announcers: LinkAnnouncers = new LinkAnnouncers(log, {
    holds,
    held: () => viewMayBeStale(),
    onNeighbor: (link, message, announced) => {
      const before = peersOf(link.name).answeredAtMs;
      peersOf(link.name).note(hear(message, link.mac, announced), performance.now());
      if (peersOf(link.name).answeredAtMs !== before && performance.now() >= lease.validUntil()) reconcile();
    },
    onConflict,
    onAnnounced: () => metrics.announced.set(announcers.count()),
  });
  let desired: Desired<"other-announcer"> = { addresses: [], skipped: [] };
  let segments: Segment[] = [];
  let hostAddresses: string[] = [];
  let deadlineTimer: NodeJS.Timeout | undefined;
  let lastReason: string | undefined;
  const lastHolding = new Map<string, HoldingRule>();
  const unlogged = newSkips<Skip>();
  let lastUnusable = "";
  let stopped = false;
  /** Past the deadline of a Lease renewed before (a first renewal ends no lapse: the cache was just listed). */
  let lapsed = false;
  /** After a lapse, until the Service cache shows the renewal that ended it. */
  let rejoin: { since: string | undefined; kept: ReadonlySet<string> } | undefined;
  /**
   * After that relist: the resourceVersion it listed at, until the watch shows a later one (an event, a bookmark).
   * Until then a change the controller made just after the list may not reach this node: a claim is still obeyed.
   */
  let unconfirmed: string | undefined;
  /** Addresses another MAC claimed while this node could not trust its view: not announced until it can again. */
  const yielded = new Set<string>();

  /** Past the Lease's deadline, or the Service cache not caught up (or not confirmed by its watch) since a lapse. */
  function viewMayBeStale(): boolean {
    return performance.now() >= lease.validUntil() || rejoin !== undefined || unconfirmed !== undefined;
  }

  /**
   * Another MAC claims an address announced here (conflicts.ts's "report": a taker, or while the view may be stale a
   * prober too). With the API in reach that is only reported (conflictreports.ts), never a reason to give way;
   * without it, it is the one way this node learns that the controller gave the address to another node: it yields
   * at once, before it would answer the frame that claimed it.
   */
  function onForeignClaim(address: string, mac: string, link: string): void {
    if (stopped || yielded.has(address) || !viewMayBeStale()) return;
    yielded.add(address);
    log.warn("L2: another MAC claims an address while this node's view may be stale: yielded", { address, mac, link });
    reconcile();
  }

  function reconcile(): void {
    if (stopped) return;
    const nowMs = performance.now();
    const validUntilMs = lease.validUntil();
    if (validUntilMs !== -Infinity && nowMs >= validUntilMs) lapsed = true;
    if (rejoin && hasApplied(services.lastResourceVersion(), rejoin.since)) {
      rejoin = undefined;
      unconfirmed = services.lastResourceVersion();
      log.info("L2: the Service cache has caught up after the Lease lapsed");
    }
    if (unconfirmed !== undefined && services.lastResourceVersion() !== unconfirmed) {
      unconfirmed = undefined;
      yielded.clear();
      log.info("L2: the Service watch delivers again: claims are reported, no longer obeyed");
    }
    const assignment = decideAssignments({ desired, segments, hostAddresses });
    const skipped = [...assignment.skipped];
    const byLink = new Map<string, LinkAnnouncements>();
    let wakeAtMs = Infinity;
    const links = new Map<HoldingRule, number>();
    for (const [name, assigned] of assignment.byLink) {
      const holding = decideHolding({ nowMs, validUntilMs, peerAnsweredAtMs: peersOf(name).answeredAtMs });
      wakeAtMs = Math.min(wakeAtMs, holding.untilMs);
      if (holding.rule !== lastHolding.get(name)) {
        const fields = { link: name, rule: holding.rule };
        if (holding.rule === "lease-valid") log.info(`L2: ${holding.reason}`, fields);
        else log.warn(`L2: ${holding.reason}`, fields);
      }
      lastHolding.set(name, holding.rule);
      links.set(holding.rule, (links.get(holding.rule) ?? 0) + 1);
      // Cut off, the link keeps its announcer with nothing announced: it goes on asking its peers, and once one
      // answers, each address comes back as a new one, probed first (a node given it meanwhile answers the probe
      // and keeps it). A process that did not run for a while (CPU starvation, SIGSTOP) looks cut off from inside.
      if (holding.rule === "cut-off") byLink.set(name, { link: assigned.link, addresses: [] });
      if (!holding.announce) continue;
      const { kept, left } = restrictAnnouncements(assigned, yielded, rejoin?.kept);
      for (const { address, rule } of left) skipped.push(leftOut(address, rule));
      byLink.set(name, { link: assigned.link, addresses: kept });
    }
    clearTimeout(deadlineTimer);
    // Re-armed on every pass: a timer that fires a little early finds the holding unchanged and waits again.
    if (wakeAtMs !== Infinity) deadlineTimer = setTimeout(reconcile, Math.max(0, wakeAtMs - nowMs));
    report(assignment, skipped);
    for (const rule of HOLDING_RULES) metrics.holding.with({ rule }).set(links.get(rule) ?? 0);
    metrics.announced.set(announcers.apply(byLink));
  }

  /** Logs what changed (the assignment, the skipped addresses) once, and sets the gauges. */
  function report(assignment: Assignment, skipped: Skip[]): void {
    if (assignment.reason !== lastReason) log.info(`L2: ${assignment.reason}`);
    lastReason = assignment.reason;
    for (const { service, address, rule, reason } of unlogged(skipped))
      log.info(`L2: not announcing: ${reason}`, { service, address, rule });
    for (const rule of SKIP_RULES)
      metrics.skipped.with({ rule }).set(skipped.filter((skip) => skip.rule === rule).length);
  }

  /** Near and past the Lease's deadline, every link in use asks its peers whether they are there. */
  // Past the deadline, they also ask who else has a few of the addresses they hold, in turn: a node the controller
  // gave one to while its link was cut off from this one's answers that probe, which is a claim (holding.ts).
  let heldTurn = 0;
  const probes = setInterval(() => {
    const nowMs = performance.now();
    if (!shouldProbe(nowMs, lease.validUntil())) return;
    const held = nowMs >= lease.validUntil() ? (heldTurn += HELD_PROBES_PER_ROUND) : undefined;
    announcers.probe((link) => peersOf(link).targets(), (link) => peersOf(link).probed(nowMs), held);
  }, PEER_PROBE_INTERVAL_MS);

  async function refreshLinks(): Promise<void> {
    try {
      const [addresses, links, gateways] = await Promise.all([
        netlink.listAddresses(),
        netlink.listLinks(),
        netlink.listDefaultGateways(),
      ]);
      segments = nodeSegments(addresses, links, flags.interfaces);
      const unusable = unusableInterfaces(links, flags.interfaces).join(",");
      if (unusable !== lastUnusable && unusable !== "")
        log.warn("L2: --lb-l2-interfaces names no link with a MAC here: nothing announced there", { unusable });
      lastUnusable = unusable;
      hostAddresses = addresses.map((address) => address.address);
      lease.setSegments(segmentsAnnotation(segments));
      lease.setGateways(gateways.join(",")); // never handed out by the pool controller
      reconcile();
    } catch (err) {
      log.error("L2: listing the links and addresses failed", { err });
    }
  }

  await refreshLinks();
  const changes = netlink.watchChanges(() => void refreshLinks(), NETLINK_DEBOUNCE_MS);
  lease.start();
  log.info("L2 announcing started", { lease: `${flags.leaseNamespace}/${name}`, segments: segmentsAnnotation(segments) });

  return {
    apply(next) {
      desired = next;
      reconcile();
    },
    async stop() {
      stopped = true;
      clearTimeout(deadlineTimer);
      clearInterval(probes);
      changes.close();
      announcers.closeAll();
      metrics.announced.set(0);
      log.info("L2: withdrawn everything (stopping)");
      await lease.stop();
    },
  };
}

/** What the link announcers ask of the loop. */
interface LinkHooks {
  /** Whether the link may answer at this very moment. */
  holds(link: string): boolean;
  /** Whether this node's view may be stale (AnnouncerOptions.held). */
  held(): boolean;
  /** Another host's claim met on `link` (conflictreports.ts). */
  onConflict(link: string, conflict: Conflict): void;
  /** An address announced after its probes found nobody. */
  onAnnounced(): void;
  /** Every ARP packet and NDP message another host sent there (holding.ts), with what the link announces. */
  onNeighbor(link: AnnouncedLink, message: NeighborMessage, announced: ReadonlySet<string>): void;
}

/** One announcer per link in use, brought in line with what to announce on each. */
class LinkAnnouncers {
  private readonly log: Logger;
  private readonly hooks: LinkHooks;
  private readonly byLink = new Map<string, { link: AnnouncedLink; announcer: Announcer }>();
  /** "<address> <link>" whose announce() threw: retried on every pass (each second), said once. */
  private readonly failing = new Set<string>();

  constructor(log: Logger, hooks: LinkHooks) {
    this.log = log;
    this.hooks = hooks;
  }

  /** The addresses another host answers for, on any link (Announcer.conflicts()). */
  conflictsAll(): AddressConflict[] {
    return [...this.byLink.values()].flatMap(({ announcer }) => announcer.conflicts());
  }

  /** Every address announced, on any link. */
  announcedAll(): string[] {
    return [...this.byLink.values()].flatMap(({ announcer }) => announcer.announced());
  }

  /**
   * Asks each link's peers (`targets`) whether they are there; `asked` is told of each link asked. With `turn`,
   * also asks who has HELD_PROBES_PER_ROUND of each link's addresses, from that turn on.
   */
  probe(
    targets: (link: string) => { address: string; mac: string }[],
    asked: (link: string) => void,
    turn?: number,
  ): void {
    for (const [name, { announcer }] of this.byLink) {
      const peers = targets(name);
      for (const peer of peers) announcer.probe(peer);
      if (peers.length) asked(name);
      const held = turn === undefined ? [] : announcer.announced();
      for (let i = 0; i < Math.min(HELD_PROBES_PER_ROUND, held.length); i++)
        announcer.recheck(held[((turn ?? 0) + i) % held.length] as string);
    }
  }

  /** Announces and withdraws as `wanted` says; a link no longer in use (or replaced) loses its announcer. */
  apply(wanted: Map<string, LinkAnnouncements>): number {
    for (const [name, current] of this.byLink) {
      const next = wanted.get(name);
      if (next && next.link.index === current.link.index && next.link.mac === current.link.mac) continue;
      current.announcer.close(); // withdraws what it announced there
      this.byLink.delete(name);
      this.log.info("L2: announcer closed", { link: name });
    }
    for (const [name, { link, addresses }] of wanted) {
      const entry = this.byLink.get(name) ?? { link, announcer: this.start(link) };
      this.byLink.set(name, entry);
      for (const address of entry.announcer.addresses())
        if (!addresses.includes(address)) entry.announcer.withdraw(address);
      for (const address of addresses) this.announce(entry.announcer, name, address);
    }
    return this.count();
  }

  /** Addresses announced now, on every link. */
  count(): number {
    return [...this.byLink.values()].reduce((sum, { announcer }) => sum + announcer.announced().length, 0);
  }

  private start(link: AnnouncedLink): Announcer {
    const announcer: Announcer = startAnnouncer({
      link,
      log: this.log,
      mayAnswer: () => this.hooks.holds(link.name),
      held: () => this.hooks.held(),
      onNeighbor: (message) => this.hooks.onNeighbor(link, message, new Set(announcer.announced())),
      onConflict: (conflict) => this.hooks.onConflict(link.name, conflict),
      onAnnounced: () => this.hooks.onAnnounced(),
    });
    return announcer;
  }

  closeAll(): void {
    for (const { announcer } of this.byLink.values()) announcer.close();
    this.byLink.clear();
  }

  private announce(announcer: Announcer, link: string, address: string): void {
    const key = `${address} ${link}`;
    try {
      announcer.announce(address);
      this.failing.delete(key);
    } catch (err) {
      if (!this.failing.has(key)) this.log.error("L2: announcing failed", { err, address, link });
      this.failing.add(key);
    }
  }
}

function leftOut(address: string, rule: "yielded" | "catching-up"): Skip {
  const reasons = {
    yielded: `another MAC claimed ${address} while this node's view may be stale`,
    "catching-up": `${address} was not announced when the API came back, and the Service cache has not caught up yet`,
  };
  return { address, rule, reason: reasons[rule] };
}
