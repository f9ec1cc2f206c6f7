// List + watch into a local cache, with client-go's informer semantics: resume watches from the
// last resourceVersion (bookmarks keep it fresh), relist on 410 Gone, reconnect with backoff when
// the connection drops or the apiserver restarts, and on request (relist()). No periodic relist: the watch is the
// only steady-state traffic.
import { backoffDelay, sleep } from "../time/backoff.ts";
import { isApiError } from "./errors.ts";
import type { KubeObject, Resource, Selectors } from "./resource.ts";

export interface InformerHandlers<T> {
  onAdd?(obj: T): void;
  onUpdate?(oldObj: T, newObj: T): void;
  onDelete?(obj: T): void;
}

export interface InformerOptions<T> extends Selectors {
  /** Page size of the initial list (and of relists). */
  pageSize?: number;
  /**
   * Trims each object before it is cached (e.g. drop managedFields), like client-go's SetTransform; undefined
   * leaves it out of the cache, as if the API did not hold it (an object that turns so is told as deleted).
   */
  transform?: (obj: T) => T | undefined;
  /**
   * Seconds after which the server ends each watch and the informer renews it, drawn at random from
   * this range so that many watchers do not reconnect in step. Default 300–600 (client-go's).
   */
  watchTimeoutSeconds?: { min: number; max: number };
  /** Called when a list or watch fails (for logs and metrics); the informer retries by itself. */
  onError?: (err: unknown) => void;
}

export function objectKey(obj: KubeObject): string {
  const { namespace, name } = obj.metadata ?? {};
  return namespace ? `${namespace}/${name}` : String(name);
}

export class Informer<T extends KubeObject> {
  private readonly resource: Resource<T>;
  private readonly options: InformerOptions<T>;
  private readonly handlers: InformerHandlers<T>[] = [];
  private readonly cache = new Map<string, T>();
  private readonly abort = new AbortController();
  private resourceVersion: string | undefined;
  /** relist() was asked for: the watch under way is ended, and the next round lists. */
  private relistWanted = false;
  private watchAbort = new AbortController();
  private synced = false;
  private syncWaiters: (() => void)[] = [];
  private loop: Promise<void> | undefined;

  constructor(resource: Resource<T>, options: InformerOptions<T> = {}) {
    this.resource = resource;
    this.options = options;
  }

  addHandlers(handlers: InformerHandlers<T>): void {
    this.handlers.push(handlers);
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /** Resolves once the first list has been loaded into the cache. */
  waitForSync(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  /**
   * The resourceVersion the cache has reached (a list's, the last event's or bookmark's): every change up to it has
   * been handed to the handlers, which ran before it was set.
   */
  lastResourceVersion(): string | undefined {
    return this.resourceVersion;
  }

  /**
   * Lists afresh at once, ending the watch under way: the cache then shows the objects as of a read made after this
   * call, however late that watch was (a silently dead connection is noticed only at its idle timeout).
   */
  relist(): void {
    this.relistWanted = true;
    this.watchAbort.abort();
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  list(): T[] {
    return [...this.cache.values()];
  }

  private async run(): Promise<void> {
    const signal = this.abort.signal;
    let failures = 0;
    while (!signal.aborted) {
      try {
        if (this.resourceVersion === undefined || this.relistWanted) {
          this.relistWanted = false;
          await this.listAll();
        }
        const started = Date.now();
        await this.watchOnce();
        if (this.relistWanted) continue;
        // A watch the server ends at once (rather than at timeoutSeconds) must not become a busy loop.
        if (Date.now() - started < 1000)
          await sleep(backoffDelay(failures++, { baseMs: 500, capMs: 30_000 }), signal);
        else failures = 0;
      } catch (err) {
        if (signal.aborted) break;
        if (this.relistWanted) continue; // relist() ended the watch
        if (isApiError(err) && (err.code === 410 || err.reason === "Expired" || err.reason === "Gone")) {
          // Our resourceVersion was compacted away: only a fresh list can tell what we missed.
          this.resourceVersion = undefined;
          continue;
        }
        this.options.onError?.(err);
        await sleep(backoffDelay(failures++, { baseMs: 500, capMs: 30_000 }), signal);
      }
    }
  }

  private async listAll(): Promise<void> {
    const { labelSelector, fieldSelector, pageSize = 500 } = this.options;
    const seen = new Set<string>();
    let resourceVersion = "";
    // Each page trimmed as it comes: 20,000 EndpointSlices held whole first cost the program ~40 MiB of peak RSS.
    for await (const page of this.resource.pages({ labelSelector, fieldSelector, limit: pageSize })) {
      for (const item of page.items) {
        seen.add(objectKey(item));
        this.upsert(item);
      }
      resourceVersion = page.metadata.resourceVersion ?? resourceVersion;
    }
    for (const [key, obj] of this.cache) {
      if (!seen.has(key)) {
        this.cache.delete(key);
        for (const h of this.handlers) h.onDelete?.(obj);
      }
    }
    this.resourceVersion = resourceVersion;
    if (!this.synced) {
      this.synced = true;
      for (const resolve of this.syncWaiters.splice(0)) resolve();
    }
  }

  private async watchOnce(): Promise<void> {
    const { labelSelector, fieldSelector } = this.options;
    const { min, max } = this.options.watchTimeoutSeconds ?? { min: 300, max: 600 };
    const timeoutSeconds = min + Math.floor(Math.random() * (max - min));
    this.watchAbort = new AbortController();
    if (this.relistWanted) return; // asked for while listing
    const events = this.resource.watch({
      labelSelector,
      fieldSelector,
      resourceVersion: this.resourceVersion,
      timeoutSeconds,
      signal: AbortSignal.any([this.abort.signal, this.watchAbort.signal]),
    });
    for await (const event of events) {
      const rv = event.object.metadata?.resourceVersion;
      if (event.type === "DELETED") {
        const key = objectKey(event.object);
        const gone = this.cache.get(key) ?? this.trim(event.object);
        this.cache.delete(key);
        if (gone) for (const h of this.handlers) h.onDelete?.(gone);
      } else if (event.type !== "BOOKMARK") {
        this.upsert(event.object);
      }
      if (rv) this.resourceVersion = rv;
    }
  }

  private upsert(raw: T): void {
    const obj = this.trim(raw);
    const key = objectKey(raw);
    const old = this.cache.get(key);
    if (obj === undefined) {
      if (!old) return;
      this.cache.delete(key);
      for (const h of this.handlers) h.onDelete?.(old);
      return;
    }
    // A relist returns unchanged objects too; only a new resourceVersion is news.
    if (old?.metadata?.resourceVersion === obj.metadata?.resourceVersion && old !== undefined) return;
    this.cache.set(key, obj);
    for (const h of this.handlers) {
      if (old) h.onUpdate?.(old, obj);
      else h.onAdd?.(obj);
    }
  }

  private trim(obj: T): T | undefined {
    return this.options.transform ? this.options.transform(obj) : obj;
  }
}
