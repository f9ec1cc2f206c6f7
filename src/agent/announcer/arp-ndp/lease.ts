// This node's announcer Lease (src/pools/announcement.ts is the contract): created when missing, renewed every
// RENEW_INTERVAL_MS by an update pinned to the resourceVersion last read, deleted on a graceful stop so that the
// pool controller moves the node's addresses at once. After each renewal that succeeded the node may announce
// until announceDeadline() of the moment that renewal was SENT: the controller times the Lease from when it saw
// it, which is later. Only the monotonic clock measures that; the Lease's times are for people. Each write also says
// how far this node has applied its Services (APPLIED_ANNOTATION) and which of its addresses another host answers
// for (CONFLICTS_ANNOTATION, gone when none), both read when the write is made.
import { performance } from "node:perf_hooks";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Logger } from "../../../cli/log.ts";
import { isApiError } from "../../../kube/errors.ts";
import { microTime } from "../../../kube/leaderelection.ts";
import type { Resource } from "../../../kube/resource.ts";
import {
  ANNOUNCER_LEASE_LABEL,
  announceDeadline,
  APPLIED_ANNOTATION,
  CONFLICTS_ANNOTATION,
  GATEWAYS_ANNOTATION,
  LEASE_DURATION_SECONDS,
  RENEW_INTERVAL_MS,
  SEGMENTS_ANNOTATION,
} from "../../../pools/announcement.ts";
import { sleep } from "../../../time/backoff.ts";

export interface LeaseIdentity {
  node: string;
  /** announcerLeaseName(node), checked at start. */
  name: string;
  namespace: string;
}

/** What this node says in its Lease beside its holding of it. */
export interface LeaseFacts {
  /** SEGMENTS_ANNOTATION. */
  segments: string;
  /** GATEWAYS_ANNOTATION: the next hops of the node's default routes. */
  gateways: string;
  /** APPLIED_ANNOTATION; left out while the Service watch has not listed yet. */
  applied?: string;
  /** CONFLICTS_ANNOTATION (conflictsAnnotation()); left out when "" or missing. */
  conflicts?: string;
}

/** The Lease as this node keeps it, from `current` (the one read) if any: acquireTime stays while it holds it. */
export function announcerLease(identity: LeaseIdentity, facts: LeaseFacts, now: Date, current?: Lease): Lease {
  const time = microTime(now);
  const { [APPLIED_ANNOTATION]: _, [CONFLICTS_ANNOTATION]: __, ...annotations } = current?.metadata?.annotations ?? {};
  const applied: Record<string, string> = facts.applied === undefined ? {} : { [APPLIED_ANNOTATION]: facts.applied };
  const conflicts: Record<string, string> = facts.conflicts ? { [CONFLICTS_ANNOTATION]: facts.conflicts } : {};
  const held = current?.spec?.holderIdentity === identity.node && current.spec.acquireTime;
  return {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: {
      ...current?.metadata,
      name: identity.name,
      namespace: identity.namespace,
      labels: { ...current?.metadata?.labels, [ANNOUNCER_LEASE_LABEL]: "true" },
      annotations: {
        ...annotations,
        [SEGMENTS_ANNOTATION]: facts.segments,
        [GATEWAYS_ANNOTATION]: facts.gateways,
        ...applied,
        ...conflicts,
      },
    },
    spec: {
      ...current?.spec,
      holderIdentity: identity.node,
      leaseDurationSeconds: LEASE_DURATION_SECONDS,
      acquireTime: held || time,
      renewTime: time,
    },
  };
}

export interface AnnouncerLeaseOptions {
  leases: Resource<Lease>;
  identity: LeaseIdentity;
  log: Logger;
  /** The resourceVersion up to which this node has applied its Services (APPLIED_ANNOTATION), at each write. */
  applied(): string | undefined;
  /** The addresses another host answers for on this node's links (CONFLICTS_ANNOTATION's value), at each write. */
  conflicts(): string;
  /** After each renewal that succeeded: until when (performance.now() ms) the Lease is valid, and its version. */
  onRenewed(deadlineMs: number, version: string | undefined): void;
  /** Each renewal's result, for metrics. */
  onResult(result: "ok" | "error"): void;
}

/** Conflicts (someone else wrote it) and deletions met in one renewal before it gives up until the next. */
const WRITE_ATTEMPTS = 3;
/** A renewal still unanswered after the Lease's duration can no longer give any validity. */
const ROUND_TIMEOUT_MS = LEASE_DURATION_SECONDS * 1000;
const DELETE_TIMEOUT_MS = 5000;

/** Deletes the Lease of that uid (not one written since by someone else); never throws. */
async function deleteLease(options: Pick<AnnouncerLeaseOptions, "leases" | "identity" | "log">, uid: string) {
  const { leases, identity, log } = options;
  try {
    const signal = AbortSignal.timeout(DELETE_TIMEOUT_MS);
    await leases.delete(identity.name, { preconditions: { uid }, signal });
    log.info("announcer Lease deleted", { lease: identity.name });
  } catch (err) {
    if (!isApiError(err, "NotFound")) log.warn("deleting the announcer Lease failed", { err });
  }
}

/**
 * Deletes this node's Lease left by an earlier run that did not stop gracefully (a crash, a kill), when this run is
 * not to announce: the controller counts it expired anyway, but an unselected node keeps no Lease at all.
 */
export async function deleteLeftoverLease(
  options: Pick<AnnouncerLeaseOptions, "leases" | "identity" | "log">,
): Promise<void> {
  const { leases, identity } = options;
  const leftover = await leases.get(identity.name).catch((err: unknown) => {
    if (isApiError(err, "NotFound")) return undefined;
    throw err;
  });
  const uid = leftover?.metadata?.uid;
  if (uid && leftover.spec?.holderIdentity === identity.node) await deleteLease(options, uid);
}

export class AnnouncerLease {
  private readonly options: AnnouncerLeaseOptions;
  private readonly abort = new AbortController();
  private current: Lease | undefined;
  private readonly network: Pick<LeaseFacts, "segments" | "gateways"> = { segments: "", gateways: "" };
  private deadline = -Infinity;
  private failing = false;
  private loop: Promise<void> | undefined;

  constructor(options: AnnouncerLeaseOptions) {
    this.options = options;
  }

  /** Until when (performance.now() ms) the node may announce; in the past until a renewal succeeds. */
  validUntil(): number {
    return this.deadline;
  }

  /** The node's on-link prefixes (SEGMENTS_ANNOTATION), written with the next renewal. */
  setSegments(segments: string): void {
    this.network.segments = segments;
  }

  /** The next hops of the node's default routes (GATEWAYS_ANNOTATION), written with the next renewal. */
  setGateways(gateways: string): void {
    this.network.gateways = gateways;
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** Stops renewing (the renewal under way is abandoned), then deletes the Lease this node wrote. */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
    this.deadline = -Infinity;
    const uid = this.current?.metadata?.uid;
    if (uid) await deleteLease(this.options, uid);
  }

  private async run(): Promise<void> {
    const stopped = this.abort.signal;
    while (!stopped.aborted) {
      const started = performance.now();
      await this.renew(AbortSignal.any([stopped, AbortSignal.timeout(ROUND_TIMEOUT_MS)]));
      await sleep(started + RENEW_INTERVAL_MS - performance.now(), stopped);
    }
  }

  private async renew(signal: AbortSignal): Promise<void> {
    const { log, onRenewed, onResult } = this.options;
    try {
      const sentAt = await this.write(signal);
      this.deadline = announceDeadline(sentAt, LEASE_DURATION_SECONDS);
      onResult("ok");
      if (this.failing) log.info("announcer Lease renewed again", { lease: this.options.identity.name });
      this.failing = false;
      onRenewed(this.deadline, this.current?.metadata?.resourceVersion);
    } catch (err) {
      if (this.abort.signal.aborted) return;
      onResult("error");
      // Said once per run of failures: the API may be away for long, and this runs every second.
      if (!this.failing)
        log.warn("renewing the announcer Lease failed; past its deadline, announcing goes on only where peers answer", {
          err,
        });
      this.failing = true;
    }
  }

  /** Creates or updates the Lease; returns when the write that succeeded was sent (monotonic ms). */
  private async write(signal: AbortSignal): Promise<number> {
    const { leases, identity } = this.options;
    for (let attempt = 1; ; attempt++) {
      const facts = { ...this.network, applied: this.options.applied(), conflicts: this.options.conflicts() };
      const lease = announcerLease(identity, facts, new Date(), this.current);
      const sentAt = performance.now();
      try {
        this.current = this.current ? await leases.update(lease, { signal }) : await leases.create(lease, { signal });
        return sentAt;
      } catch (err) {
        if (attempt >= WRITE_ATTEMPTS) throw err;
        if (isApiError(err, "NotFound")) this.current = undefined; // deleted: create it again
        else if (isApiError(err, "Conflict") || isApiError(err, "AlreadyExists")) this.current = await this.read(signal);
        else throw err;
      }
    }
  }

  private async read(signal: AbortSignal): Promise<Lease | undefined> {
    try {
      return await this.options.leases.get(this.options.identity.name, { signal });
    } catch (err) {
      if (isApiError(err, "NotFound")) return undefined;
      throw err;
    }
  }
}
