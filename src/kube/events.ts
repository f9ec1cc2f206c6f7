// Kubernetes Events (core/v1) with client-go-like de-duplication: the same event about the same
// object bumps `count` and `lastTimestamp` of one Event instead of creating another. Recording
// never blocks or fails the caller: writes are queued, coalesced and dropped (with onError) when
// the API refuses them.
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Event, Node, ObjectReference, Service } from "kubernetes-types/core/v1.js";
import type { KubeClient } from "./client.ts";
import { isApiError } from "./errors.ts";
import { Resource } from "./resource.ts";
import { sleep } from "../time/backoff.ts";

/** How long a program's shutdown waits for queued Events before it closes the client. */
const SHUTDOWN_FLUSH_MS = 5_000;

export type EventType = "Normal" | "Warning";

/** What an Event about a Node refers to (cached Nodes may be trimmed of their apiVersion and kind). */
export function nodeReference(node: Node): ObjectReference {
  return { apiVersion: "v1", kind: "Node", name: node.metadata?.name, uid: node.metadata?.uid };
}

/** What an Event about a Service refers to (its Events live in its namespace). */
export function serviceReference(service: Service): ObjectReference {
  const { namespace, name, uid, resourceVersion } = service.metadata ?? {};
  return { apiVersion: "v1", kind: "Service", namespace, name, uid, resourceVersion };
}

/** What an Event about a CertificateSigningRequest refers to (cluster-scoped too: its Events live in "default"). */
export function csrReference(csr: CertificateSigningRequest): ObjectReference {
  const { name, uid } = csr.metadata ?? {};
  return { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", name, uid };
}

export interface EventRecorderOptions {
  /** source.component / reportingComponent, e.g. "local-ccm". */
  component: string;
  /** source.host / reportingInstance, e.g. the node or pod name. */
  host?: string;
  /** Distinct events remembered for de-duplication (oldest forgotten first). */
  cacheSize?: number;
  onError?: (err: unknown) => void;
}

/** client-go's naming: the object's name and a hex timestamp (nanoseconds), unique enough per object. */
let sequence = 0;
function eventName(objectName: string | undefined): string {
  const nanos = BigInt(Date.now()) * 1_000_000n + BigInt(sequence++ % 1_000_000);
  return `${objectName}.${nanos.toString(16)}`;
}

interface Correlated {
  key: string;
  namespace: string;
  name: string;
  event: Event;
  count: number;
  /** Count already written to the API (0: not created yet). */
  written: number;
}

export class EventRecorder {
  private readonly client: KubeClient;
  private readonly options: Required<Omit<EventRecorderOptions, "onError" | "host">> &
    Pick<EventRecorderOptions, "onError" | "host">;
  private readonly cache = new Map<string, Correlated>();
  private readonly queue = new Set<Correlated>();
  private draining: Promise<void> | undefined;

  constructor(client: KubeClient, options: EventRecorderOptions) {
    this.client = client;
    this.options = { cacheSize: 256, ...options };
  }

  /** Records an event about `object`; returns at once. */
  record(object: ObjectReference, type: EventType, reason: string, message: string): void {
    const key = [object.kind, object.namespace, object.name, object.uid, type, reason, message].join(
      "\u0000",
    );
    let entry = this.cache.get(key);
    const now = new Date().toISOString();
    if (entry) {
      this.cache.delete(key); // re-insert: the Map's order is our LRU order
    } else {
      const namespace = object.namespace || "default"; // events about cluster-scoped objects live in "default"
      entry = {
        key,
        namespace,
        name: eventName(object.name),
        count: 0,
        written: 0,
        event: {
          apiVersion: "v1",
          kind: "Event",
          metadata: { namespace },
          involvedObject: object,
          type,
          reason,
          message,
          source: { component: this.options.component, host: this.options.host },
          reportingComponent: this.options.component,
          reportingInstance: this.options.host ?? "",
          firstTimestamp: now,
        },
      };
    }
    entry.count++;
    entry.event.lastTimestamp = now;
    this.cache.set(key, entry);
    if (this.cache.size > this.options.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
    this.queue.add(entry);
    this.draining ??= this.drain();
  }

  /** Resolves when every recorded event has been written (or dropped). */
  async flush(): Promise<void> {
    while (this.draining) await this.draining;
  }

  /**
   * The programs' last flush, at shutdown: as flush(), but at most SHUTDOWN_FLUSH_MS, since an API server that
   * does not answer must not hold the process past its grace period.
   */
  async flushAtShutdown(): Promise<void> {
    const done = new AbortController();
    await Promise.race([this.flush(), sleep(SHUTDOWN_FLUSH_MS, done.signal)]);
    done.abort();
  }

  private async drain(): Promise<void> {
    for (const entry of this.queue) {
      this.queue.delete(entry);
      try {
        await this.write(entry);
      } catch (err) {
        this.options.onError?.(err);
      }
    }
    this.draining = undefined;
  }

  private async write(entry: Correlated): Promise<void> {
    const events = new Resource<Event>(this.client, {
      group: "",
      version: "v1",
      plural: "events",
      namespace: entry.namespace,
    });
    const count = entry.count;
    if (entry.written > 0) {
      try {
        await events.patch(entry.name, "merge", { count, lastTimestamp: entry.event.lastTimestamp });
        entry.written = count;
        return;
      } catch (err) {
        // Events expire (TTL one hour): start a new one under a new name.
        if (!isApiError(err, "NotFound")) throw err;
        entry.name = eventName(entry.event.involvedObject.name);
      }
    }
    await events.create({ ...entry.event, metadata: { ...entry.event.metadata, name: entry.name }, count });
    entry.written = count;
  }
}
