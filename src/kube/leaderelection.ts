// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics:
// - a lease held by someone else is taken only after it has not changed for leaseDuration, as
//   measured by OUR monotonic clock from when we observed it (no trust in other nodes' clocks);
// - the leader renews every retryPeriod; if it cannot renew within renewDeadline it stops leading
//   at once (a watchdog aborts the work signal even if a request hangs), and isLeader() is false
//   from that moment, so callers can check it right before every destructive call;
// - on shutdown the leader releases the lease so a successor need not wait for it to expire.
import { performance } from "node:perf_hooks";
import type { Lease, LeaseSpec } from "kubernetes-types/coordination/v1.js";
import { sleep } from "../time/backoff.ts";
import type { KubeClient } from "./client.ts";
import { isApiError } from "./errors.ts";
import { leaseResource, Resource } from "./resource.ts";

export interface LeaderElectionOptions {
  lease: { name: string; namespace: string };
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  /** Work to do while leading; `signal` aborts the moment leadership is lost or released. */
  onStartedLeading(signal: AbortSignal): void;
  onStoppedLeading(): void;
  onNewLeader?(identity: string): void;
  onError?(err: unknown): void;
}

/** MicroTime wants exactly six fractional digits. */
export function microTime(date: Date): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

const jittered = (ms: number) => ms * (1 + Math.random() * 0.2);

export class LeaderElector {
  private readonly leases: Resource<Lease>;
  private readonly options: LeaderElectionOptions;
  private observed: { lease: Lease; at: number } | undefined;
  private leading = false;
  private lastRenew = 0;
  private lastLeader: string | undefined;

  constructor(client: KubeClient, options: LeaderElectionOptions) {
    if (
      !(options.leaseDurationMs > options.renewDeadlineMs && options.renewDeadlineMs > options.retryPeriodMs)
    ) {
      throw new Error("leader election needs lease duration > renew deadline > retry period");
    }
    this.options = options;
    this.leases = new Resource<Lease>(client, leaseResource(options.lease.namespace));
  }

  /** True only while we hold a lease renewed within the renew deadline. */
  isLeader(): boolean {
    return this.leading && performance.now() - this.lastRenew < this.options.renewDeadlineMs;
  }

  /** Campaigns, leads, and campaigns again after a loss, until `signal` aborts; then releases. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (!(await this.acquire(signal)) || signal.aborted) break;
      await this.lead(signal);
    }
    await this.release();
  }

  private async acquire(signal: AbortSignal): Promise<boolean> {
    while (!signal.aborted) {
      // An attempt runs to its end even when we are stopped meanwhile: a write cut off in flight may still have
      // taken the lease, which then nobody would release (run() releases what an attempt took).
      if (await this.tryAcquireOrRenew(AbortSignal.timeout(this.options.renewDeadlineMs))) return true;
      await sleep(jittered(this.options.retryPeriodMs), signal);
    }
    return false;
  }

  private async lead(signal: AbortSignal): Promise<void> {
    const work = new AbortController();
    this.leading = true;
    this.lastRenew = performance.now();
    let watchdog: NodeJS.Timeout | undefined;
    const armWatchdog = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(
        () => work.abort(),
        this.lastRenew + this.options.renewDeadlineMs - performance.now(),
      );
    };
    armWatchdog();
    this.options.onStartedLeading(work.signal);
    try {
      while (!signal.aborted && !work.signal.aborted) {
        await sleep(this.options.retryPeriodMs, AbortSignal.any([signal, work.signal]));
        if (signal.aborted || work.signal.aborted) break;
        if (await this.renewWithinDeadline(work.signal)) armWatchdog();
      }
    } finally {
      clearTimeout(watchdog);
      this.leading = false;
      work.abort();
      this.options.onStoppedLeading();
    }
  }

  /** Retries renewal until it succeeds or the renew deadline (since the last renewal) passes. */
  private async renewWithinDeadline(stop: AbortSignal): Promise<boolean> {
    while (!stop.aborted) {
      const remaining = this.lastRenew + this.options.renewDeadlineMs - performance.now();
      if (remaining <= 0) return false;
      const attempt = AbortSignal.any([stop, AbortSignal.timeout(Math.max(1, Math.floor(remaining)))]);
      if (await this.tryAcquireOrRenew(attempt)) {
        this.lastRenew = performance.now();
        return true;
      }
      await sleep(Math.min(this.options.retryPeriodMs / 2, remaining), stop);
    }
    return false;
  }

  private async tryAcquireOrRenew(signal: AbortSignal): Promise<boolean> {
    const { identity, lease } = this.options;
    const now = microTime(new Date());
    const durationSeconds = Math.ceil(this.options.leaseDurationMs / 1000);
    try {
      let current: Lease;
      try {
        current = await this.leases.get(lease.name, { signal });
      } catch (err) {
        if (!isApiError(err, "NotFound")) throw err;
        const created = await this.leases.create(
          {
            metadata: { name: lease.name, namespace: lease.namespace },
            spec: {
              holderIdentity: identity,
              leaseDurationSeconds: durationSeconds,
              acquireTime: now,
              renewTime: now,
              leaseTransitions: 0,
            },
          },
          { signal },
        );
        this.observe(created);
        return true;
      }
      if (signal.aborted) return false;
      this.observe(current);
      const spec: LeaseSpec = current.spec ?? {};
      const holder = spec.holderIdentity ?? "";
      const observedAt = this.observed?.at ?? performance.now();
      const expired = observedAt + (spec.leaseDurationSeconds ?? 0) * 1000 <= performance.now();
      if (holder && holder !== identity && !expired) return false;
      const next: LeaseSpec = {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: durationSeconds,
        renewTime: now,
      };
      if (holder !== identity) {
        next.acquireTime = now;
        next.leaseTransitions = (spec.leaseTransitions ?? 0) + 1;
      }
      const updated = await this.leases.update({ ...current, spec: next }, { signal });
      this.observe(updated);
      return true;
    } catch (err) {
      // Conflict: someone else wrote first; anything else: we could not talk to the API. Either way, not now.
      if (!signal.aborted) this.options.onError?.(err);
      return false;
    }
  }

  /** Remembers when the lease last CHANGED, by our clock: that is what expiry is measured from. */
  private observe(lease: Lease): void {
    const changed = JSON.stringify(lease.spec) !== JSON.stringify(this.observed?.lease.spec);
    if (changed || !this.observed) this.observed = { lease, at: performance.now() };
    else this.observed.lease = lease;
    const holder = lease.spec?.holderIdentity ?? "";
    if (holder && holder !== this.lastLeader) {
      this.lastLeader = holder;
      this.options.onNewLeader?.(holder);
    }
  }

  /** Hands the lease back if we hold it as last seen, so that a successor need not wait for it to expire. */
  private async release(): Promise<void> {
    const current = this.observed?.lease;
    if (current?.spec?.holderIdentity !== this.options.identity) return;
    const now = microTime(new Date());
    try {
      await this.leases.update({
        ...current,
        spec: {
          ...current.spec,
          holderIdentity: "",
          leaseDurationSeconds: 1,
          acquireTime: now,
          renewTime: now,
        },
      });
    } catch (err) {
      this.options.onError?.(err);
    }
  }
}
