// The one writer of LoadBalancer Services, whichever mode decided: the finalizer (with the mode's own annotations
// and labels in the same write), status.loadBalancer.ingress, and the Events about them.
//
// Every write is a merge patch pinned to the resourceVersion its decision was read from (each next write to the one
// the write before made). The finalizer list is shared with every controller built on k8s.io/cloud-provider and with
// users, and is written back whole: pinned, a list someone changed meanwhile is never overwritten, and neither is a
// status decided from a copy that is no longer current (a lapsed leader's, a Service edited meanwhile). The API
// server answers Conflict instead; the watch brings the newer version and the sync decides again from it. A merge
// patch rather than a JSON patch, so that a mode's metadata (allocated-from, announcer) rides in the finalizer's
// write, and null removes an annotation that may be absent.
import type { LoadBalancerIngress, Service } from "kubernetes-types/core/v1.js";
import type { Logger } from "../cli/log.ts";
import type { Counter } from "../cli/metrics.ts";
import { isApiError } from "../kube/errors.ts";
import { type EventRecorder, type EventType, serviceReference } from "../kube/events.ts";
import { objectKey } from "../kube/informer.ts";
import type { Resource } from "../kube/resource.ts";
import { LB_FINALIZER } from "./service.ts";

/** One write, named as the writes metric counts it. */
export type ServiceWrite =
  /** status.loadBalancer.ingress, through the status subresource. */
  | { name: string; ingress: LoadBalancerIngress[] }
  /** The finalizer added (true), removed (false) or left (absent); annotations and labels set, or removed (null). */
  | {
      name: string;
      ingress?: undefined;
      finalizer?: boolean;
      annotations?: Record<string, string | null>;
      labels?: Record<string, string | null>;
    };

export interface ServiceWriterOptions {
  /** The Service resource of a namespace (patches of the object and of its status). */
  serviceResource(namespace: string): Pick<Resource<Service>, "patch">;
  /** True while this replica may write. */
  isLeader(): boolean;
  events: Pick<EventRecorder, "record">;
  log: Logger;
  /** Counts each write by its name and result (ok, conflict, gone, error). */
  writes: Counter<"write" | "result">;
}

export class ServiceWriter {
  private readonly options: ServiceWriterOptions;
  /** Per Service, the versions its writes started from: not synced from again (the writes' own come next). */
  private readonly acted = new Map<string, Set<string | undefined>>();

  constructor(options: ServiceWriterOptions) {
    this.options = options;
  }

  /**
   * Whether writes to the Service started from this version: a sync from it would write the same again. Our own
   * write reaches the cache a moment later, and the watch may deliver a version a write made before it is answered.
   */
  startedFrom(key: string, resourceVersion: string | undefined): boolean {
    return this.acted.get(key)?.has(resourceVersion) ?? false;
  }

  /** The Service is gone, or must be synced afresh from whatever version the cache holds. */
  forget(key: string): void {
    this.acted.delete(key);
  }

  /**
   * The writes in order, the first pinned to the cached version, each next one to the version the one before made;
   * `written` hears of each. True once all are written. False when leadership lapsed (the resync on leading again
   * syncs the Service) or it changed or went meanwhile (its next version is synced). A failed write throws, for the
   * queue to retry.
   */
  async write(
    service: Service,
    writes: readonly ServiceWrite[],
    written?: (write: ServiceWrite, index: number, resourceVersion: string | undefined) => void,
  ): Promise<boolean> {
    const key = objectKey(service);
    const acted = new Set<string | undefined>();
    this.acted.set(key, acted);
    let version = service.metadata?.resourceVersion;
    try {
      for (const [index, write] of writes.entries()) {
        // Leadership can lapse between the decision and a write: the last check is right before each call.
        if (!this.options.isLeader()) return this.abandon(key);
        acted.add(version);
        const next = await this.send(service, version, write);
        if (next === null) return this.abandon(key);
        version = next;
        written?.(write, index, version);
      }
    } catch (err) {
      this.acted.delete(key);
      throw err;
    }
    return true;
  }

  /** An Event about the Service, from the controller that wrote it. */
  event(service: Service, type: EventType, reason: string, message: string): void {
    this.options.events.record(serviceReference(service), type, reason, message);
  }

  /** A new channel of warnings (one per concern of a controller: its allocation, its announcer, …). */
  warnings(): Warnings {
    return new Warnings(this, this.options);
  }

  private abandon(key: string): false {
    this.acted.delete(key);
    return false;
  }

  /** One write: the version it made, or null when the Service changed or went meanwhile. */
  private async send(service: Service, resourceVersion: string | undefined, write: ServiceWrite) {
    const { metadata = {} } = service;
    const resource = this.options.serviceResource(metadata.namespace ?? "");
    const name = metadata.name ?? "";
    try {
      let result: Service;
      if (write.ingress !== undefined) {
        const patch = { metadata: { resourceVersion }, status: { loadBalancer: { ingress: write.ingress } } };
        result = await resource.patch(name, "merge", patch, { subresource: "status" });
      } else {
        const { finalizer, annotations, labels } = write;
        const others = (metadata.finalizers ?? []).filter((each) => each !== LB_FINALIZER);
        const patch = {
          metadata: {
            resourceVersion,
            ...(finalizer === undefined ? {} : { finalizers: finalizer ? [...others, LB_FINALIZER] : others }),
            ...(annotations && { annotations }),
            ...(labels && { labels }),
          },
        };
        result = await resource.patch(name, "merge", patch);
      }
      this.options.writes.with({ write: write.name, result: "ok" }).inc();
      return result.metadata?.resourceVersion;
    } catch (err) {
      const result = isApiError(err, "Conflict") ? "conflict" : isApiError(err, "NotFound") ? "gone" : "error";
      this.options.writes.with({ write: write.name, result }).inc();
      if (result === "error") throw new Error(`${write.name} failed: ${(err as Error).message}`, { cause: err });
      this.options.log.v(2)?.("Service changed meanwhile; syncing it again", {
        service: objectKey(service),
        write: write.name,
        result,
      });
      return null;
    }
  }
}

/** A Warning Event and log when what is wrong with a Service changes; nothing while it stays the same. */
export class Warnings {
  /** The last warning told per Service. */
  private readonly told = new Map<string, string>();
  private readonly writer: ServiceWriter;
  private readonly options: Pick<ServiceWriterOptions, "isLeader" | "log">;

  constructor(writer: ServiceWriter, options: Pick<ServiceWriterOptions, "isLeader" | "log">) {
    this.writer = writer;
    this.options = options;
  }

  /** Tells the warning unless it was the last told (none: the Service is fine); true when told. */
  tell(service: Service, rule: string | undefined, warning: { reason: string; message: string } | undefined): boolean {
    const key = objectKey(service);
    if (!warning) return this.told.delete(key) && false;
    // A follower tells nothing, and remembers nothing: the leader tells it.
    if (this.told.get(key) === warning.message || !this.options.isLeader()) return false;
    this.told.set(key, warning.message);
    this.options.log.warn("Service not served as asked", { service: key, rule, ...warning });
    this.writer.event(service, "Warning", warning.reason, warning.message);
    return true;
  }

  forget(key: string): void {
    this.told.delete(key);
  }
}
