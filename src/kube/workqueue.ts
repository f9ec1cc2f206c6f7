// The keyed work queue every central controller syncs through, in client-go's shape: informer handlers add
// keys, workers take them one at a time and call sync(key). A key waiting in the queue is there once however
// often it is added; a key being synced is never synced twice at once, and a key added meanwhile is synced
// again after. A sync that throws is retried with per-key exponential backoff up to a cap; one that returns
// forgets the key's failures. stop() lets the syncs under way finish and starts no other.
// Syncs start on the next turn of the event loop, never inside add(): a burst of informer events (a relist)
// is taken in whole first, so what the syncs share (an index of every Node) is built once for the burst.
import { type BackoffOptions, backoffDelay } from "../time/backoff.ts";

export interface WorkQueueOptions {
  /** What one key's work is; throwing retries the key later (backoff). */
  sync(key: string): Promise<void>;
  /** Keys synced at once (default 1). */
  workers?: number;
  /** Per-key retry delays after failed syncs (default 100 ms doubling to 60 s). */
  backoff?: BackoffOptions;
  /** Told of each failed sync and when the key is tried again. */
  onError?(key: string, err: unknown, retryInMs: number): void;
}

const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 100, capMs: 60_000 };

export class WorkQueue {
  private readonly options: Required<Omit<WorkQueueOptions, "onError">> & Pick<WorkQueueOptions, "onError">;
  /** Keys to sync, in order; each at most once. */
  private readonly queue = new Set<string>();
  /** Keys being synced now. */
  private readonly active = new Set<string>();
  /** Keys added while being synced: queued again when their sync ends. */
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly delayed = new Map<string, { timer: NodeJS.Timeout; due: number }>();
  private readonly running = new Set<Promise<void>>();
  private stopped = false;
  private pumpScheduled = false;
  private idleWaiters: (() => void)[] = [];

  constructor(options: WorkQueueOptions) {
    this.options = { workers: 1, backoff: DEFAULT_BACKOFF, ...options };
  }

  /** Sync `key` soon: once, however often it is added before its sync starts. */
  add(key: string): void {
    if (this.stopped) return;
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    this.queue.add(key);
    this.schedulePump();
  }

  /** Add `key` after `ms`; an earlier pending addAfter of the same key wins. */
  addAfter(key: string, ms: number): void {
    if (this.stopped) return;
    const due = Date.now() + ms;
    const pending = this.delayed.get(key);
    if (pending && pending.due <= due) return;
    clearTimeout(pending?.timer);
    const timer = setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    timer.unref();
    this.delayed.set(key, { timer, due });
  }

  /** Keys waiting or being synced (not those waiting for a delay). */
  get length(): number {
    return this.queue.size + this.active.size;
  }

  /** Resolves once nothing is queued or being synced (delayed keys do not count). */
  idle(): Promise<void> {
    if (this.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** No sync starts after this; resolves when those under way have ended. Delayed keys are dropped. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.queue.clear();
    this.dirty.clear();
    for (const { timer } of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    await Promise.all(this.running);
    this.notifyIdle();
  }

  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (!this.stopped && this.active.size < this.options.workers) {
      const next = this.queue.values().next();
      if (next.done) break;
      this.queue.delete(next.value);
      this.active.add(next.value);
      const work = this.work(next.value);
      this.running.add(work);
      void work.finally(() => this.running.delete(work));
    }
    if (this.length === 0) this.notifyIdle();
  }

  private async work(key: string): Promise<void> {
    try {
      await this.options.sync(key);
      this.failures.delete(key);
    } catch (err) {
      const attempt = this.failures.get(key) ?? 0;
      this.failures.set(key, attempt + 1);
      const delay = backoffDelay(attempt, this.options.backoff);
      this.options.onError?.(key, err, delay);
      this.addAfter(key, delay);
    } finally {
      this.active.delete(key);
      if (this.dirty.delete(key)) this.queue.add(key);
      this.pump();
    }
  }

  private notifyIdle(): void {
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }
}
