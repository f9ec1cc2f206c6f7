// Layer-2 announcing on this node, wired: its announcer Lease (lease.ts), one watch of the Services assigned to it
// (by the announcer label), netlink's links and addresses, and one announcer per link in use (announcer.ts). What
// to announce where is decided in assignments.ts from those; this file only applies the difference. Every
// trigger (a Service event, a netlink change, a renewal, the Lease's deadline) runs the same reconcile, which
// also keeps a timer at the Lease's deadline: when renewals stop succeeding, everything is withdrawn then. Other
// hosts' claims the announcers meet go to conflictreports.ts.
import { performance } from "node:perf_hooks";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Service } from "kubernetes-types/core/v1.js";
import type { Logger } from "../../cli/log.ts";
import type { KubeClient } from "../../kube/client.ts";
import type { EventType } from "../../kube/events.ts";
import { Informer } from "../../kube/informer.ts";
import { leaseResource, Resource, SERVICE_RESOURCE } from "../../kube/resource.ts";
import { WorkQueue } from "../../kube/workqueue.ts";
import type { Netlink } from "../../net/netlink.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LABEL,
  announcerLabelValue,
  announcerLeaseName,
} from "../../pools/announcement.ts";
import type { AnnounceFlags } from "../flags.ts";
import type { AnnouncerMetrics } from "../metrics.ts";
import { type AnnouncedLink, type Announcer, type Conflict, startAnnouncer } from "./announcer.ts";
import { type Assignment, decideAssignments, type LinkAnnouncements, SKIP_RULES } from "./assignments.ts";
import { conflictReporter } from "./conflictreports.ts";
import { AnnouncerLease, deleteLeftoverLease } from "./lease.ts";
import { nodeSegments, type Segment, segmentsAnnotation, unusableInterfaces } from "./segments.ts";
import { decideSelection, SELECTION_RULES, type Selection, type SelectionRule } from "./selection.ts";

export interface AnnouncingOptions {
  client: KubeClient;
  netlink: Netlink;
  node: string;
  flags: AnnounceFlags;
  log: Logger;
  metrics: AnnouncerMetrics;
  /** Records an Event about this node's Node. */
  nodeEvent(type: EventType, reason: string, message: string): void;
  /**
   * Another MAC claims an address announced here on `link` (reported, not fought over): the signal on which an
   * announcer that has lost the API can yield the address to the node that took it over.
   */
  onForeignClaim?(address: string, mac: string, link: string): void;
}

export interface Announcing {
  /** Withdraws everything, then deletes the Lease (a successor need not wait for it to expire). */
  stop(): Promise<void>;
}

export interface SelectedAnnouncing {
  /** Decides again from the Node's labels (its watch saw a change). */
  update(): void;
  /** Stops deciding, then stops announcing as on SIGTERM (everything withdrawn, the Lease deleted). */
  stop(): Promise<void>;
}

/**
 * Announcing only while this node is selected (selection.ts, from `nodeLabels()`): started when the decision turns
 * to announce; when it turns away, everything is withdrawn at once and the Lease deleted, so the pool controller
 * moves the node's addresses without waiting for it to expire. Not selected, the node opens no Lease (one left by
 * an earlier run that crashed is deleted), no Service watch and no raw socket. Decisions run one at a time, through
 * a work queue of one key.
 */
export function announceWhileSelected(
  options: AnnouncingOptions,
  nodeLabels: () => Record<string, string> | undefined,
): SelectedAnnouncing {
  const { node, flags, metrics } = options;
  const log = options.log.with({ node });
  let announcing: Announcing | undefined;
  let lastRule: SelectionRule | undefined;
  /** Until this run first announces or looks: a Lease of an earlier run may be left. */
  let leftoverPossible = true;
  /** Logs a change of rule once, and sets the gauge. */
  const report = (selection: Selection) => {
    if (selection.rule !== lastRule) {
      const what = selection.announce ? "this node announces" : "this node does not announce";
      log.info(`L2: ${what}: ${selection.reason}`, { rule: selection.rule });
    }
    lastRule = selection.rule;
    for (const rule of SELECTION_RULES) metrics.selection.with({ rule }).set(rule === selection.rule ? 1 : 0);
  };
  const follow = async (selection: Selection) => {
    if (selection.announce) {
      leftoverPossible = false; // renewed from now on, and deleted when it stops
      announcing ??= await startAnnouncing(options);
      return;
    }
    const stopping = announcing;
    announcing = undefined;
    await stopping?.stop();
    if (selection.rule === "not-selected" && leftoverPossible) {
      await deleteLeftoverLease(leaseAccess(options, log));
      leftoverPossible = false;
    }
  };
  const queue = new WorkQueue({
    async sync() {
      const selection = decideSelection(flags.nodeSelector, nodeLabels());
      report(selection);
      await follow(selection);
    },
    onError: (_, err, retryInMs) => log.error("L2: following the node selection failed", { err, retryInMs }),
  });
  queue.add(node);
  return {
    update: () => queue.add(node),
    async stop() {
      await queue.stop();
      await announcing?.stop();
    },
  };
}

/** Netlink events come in bursts: one refresh per burst. */
const NETLINK_DEBOUNCE_MS = 200;

/** What assignments.ts reads of a Service: the rest is never cached. */
function trimService(service: Service): Service {
  const { namespace, name, resourceVersion, deletionTimestamp, annotations } = service.metadata ?? {};
  const announcer = annotations?.[ANNOUNCER_ANNOTATION];
  return {
    metadata: {
      namespace,
      name,
      resourceVersion,
      deletionTimestamp,
      annotations: announcer === undefined ? {} : { [ANNOUNCER_ANNOTATION]: announcer },
    },
    spec: { type: service.spec?.type },
    status: { loadBalancer: { ingress: (service.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ({ ip })) } },
  };
}

/** This node's announcer Lease: where it lives, its name and holder. */
function leaseAccess({ client, node, flags }: AnnouncingOptions, log: Logger) {
  const name = announcerLeaseName(node) as string; // checked with the flags
  const leases = new Resource<Lease>(client, leaseResource(flags.leaseNamespace));
  return { leases, identity: { node, name, namespace: flags.leaseNamespace }, log };
}

export async function startAnnouncing(options: AnnouncingOptions): Promise<Announcing> {
  const { client, netlink, node, flags, metrics } = options;
  const log = options.log.with({ node });
  const access = leaseAccess(options, log);
  const name = access.identity.name;
  const lease = new AnnouncerLease({
    ...access,
    onRenewed: () => reconcile(),
    onResult: (result) => metrics.renewals.with({ result }).inc(),
  });
  // Only this node's Services. The watch is renewed every 1-2 min, not 30-60 as the Node's: a connection that died
  // silently is then noticed within minutes (its idle timeout), not an hour in which the node might go on announcing
  // an address since assigned to another. Beside the renewals every second it costs nothing.
  const services = new Informer(new Resource<Service>(client, SERVICE_RESOURCE), {
    labelSelector: `${ANNOUNCER_LABEL}=${announcerLabelValue(node)}`,
    transform: trimService,
    watchTimeoutSeconds: { min: 60, max: 120 },
    onError: (err) => log.error("watching the Services to announce failed", { err }),
  });
  const onConflict = conflictReporter({ ...options, log, services: () => services.list() });
  // An address is announced once its probes found nobody, after the pass that asked for it: counted then.
  const announcers: LinkAnnouncers = new LinkAnnouncers(log, onConflict, () =>
    metrics.announced.set(announcers.count()),
  );
  let segments: Segment[] = [];
  let hostAddresses: string[] = [];
  let deadlineTimer: NodeJS.Timeout | undefined;
  let lastRule: Assignment["rule"] | undefined;
  let lastSkipped = "";
  let lastUnusable = "";
  let stopped = false;

  function reconcile(): void {
    if (stopped) return;
    const validUntil = lease.validUntil();
    const leaseValid = performance.now() < validUntil;
    clearTimeout(deadlineTimer);
    // Re-armed on every pass: a timer that fires a little early finds the Lease still valid and waits again.
    if (leaseValid) deadlineTimer = setTimeout(reconcile, validUntil - performance.now());
    const assignment = decideAssignments({ node, services: services.list(), segments, hostAddresses, leaseValid });
    report(assignment, validUntil);
    metrics.announced.set(announcers.apply(assignment.byLink));
  }

  /** Logs what changed (the rule, the skipped addresses) once, and sets the gauges. */
  function report(assignment: Assignment, validUntil: number): void {
    if (assignment.rule !== lastRule) {
      // How long after the deadline the withdrawal came (a late timer: a busy event loop), for the record.
      const lateMs = Math.round(performance.now() - validUntil);
      if (assignment.rule === "lease-not-valid" && lastRule !== undefined)
        log.warn(`L2: ${assignment.reason}`, { afterDeadlineMs: lateMs });
      else log.info(`L2: ${assignment.reason}`);
      lastRule = assignment.rule;
    }
    const skipped = JSON.stringify(assignment.skipped);
    if (skipped !== lastSkipped)
      for (const { service, address, rule, reason } of assignment.skipped)
        log.info(`L2: not announcing: ${reason}`, { service, address, rule });
    lastSkipped = skipped;
    for (const rule of SKIP_RULES)
      metrics.skipped.with({ rule }).set(assignment.skipped.filter((skip) => skip.rule === rule).length);
  }

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

  services.addHandlers({ onAdd: reconcile, onUpdate: reconcile, onDelete: reconcile });
  await refreshLinks();
  const changes = netlink.watchChanges(() => void refreshLinks(), NETLINK_DEBOUNCE_MS);
  services.start();
  lease.start();
  log.info("L2 announcing started", { lease: `${flags.leaseNamespace}/${name}`, segments: segmentsAnnotation(segments) });

  return {
    async stop() {
      stopped = true;
      clearTimeout(deadlineTimer);
      changes.close();
      announcers.closeAll();
      metrics.announced.set(0);
      log.info("L2: withdrawn everything (stopping)");
      await services.stop();
      await lease.stop();
    },
  };
}

/** One announcer per link in use, brought in line with what to announce on each. */
class LinkAnnouncers {
  private readonly log: Logger;
  private readonly onConflict: (link: string, conflict: Conflict) => void;
  private readonly onAnnounced: () => void;
  private readonly byLink = new Map<string, { link: AnnouncedLink; announcer: Announcer }>();
  /** "<address> <link>" whose announce() threw: retried on every pass (each second), said once. */
  private readonly failing = new Set<string>();

  constructor(log: Logger, onConflict: (link: string, conflict: Conflict) => void, onAnnounced: () => void) {
    this.log = log;
    this.onConflict = onConflict;
    this.onAnnounced = onAnnounced;
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
      const onConflict = (conflict: Conflict) => this.onConflict(name, conflict);
      const { log, onAnnounced } = this;
      const entry = this.byLink.get(name) ?? {
        link,
        announcer: startAnnouncer({ link, log, onConflict, onAnnounced }),
      };
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
