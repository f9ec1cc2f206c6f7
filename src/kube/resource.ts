// Typed verbs for one kind of object: get, list (paged), create, update, patch, delete, watch.
import type { IncomingMessage } from "node:http";
import type { ListMeta, ObjectMeta, Preconditions, Status } from "kubernetes-types/meta/v1.js";
import type { KubeClient, Query } from "./client.ts";
import { ApiError } from "./errors.ts";

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

export interface ResourceRef {
  /** "" for the core group. */
  group: string;
  version: string;
  plural: string;
  namespace?: string;
}

/** The resources more than one controller or program reads: one definition each. */
export const NODE_RESOURCE: ResourceRef = { group: "", version: "v1", plural: "nodes" };
export const SERVICE_RESOURCE: ResourceRef = { group: "", version: "v1", plural: "services" };
/** Secrets of a namespace: add it (`{ ...SECRET_RESOURCE, namespace }`). */
export const SECRET_RESOURCE: ResourceRef = { group: "", version: "v1", plural: "secrets" };
/** coordination.k8s.io Leases of one namespace (leader election, the L2 announcers'). */
export const leaseResource = (namespace: string): ResourceRef => ({
  group: "coordination.k8s.io",
  version: "v1",
  plural: "leases",
  namespace,
});
export const ENDPOINT_SLICE_RESOURCE: ResourceRef = { group: "discovery.k8s.io", version: "v1", plural: "endpointslices" };

export interface Selectors {
  labelSelector?: string;
  fieldSelector?: string;
}

export interface ListOptions extends Selectors {
  /** Page size; the whole list is still returned, fetched page by page. */
  limit?: number;
  resourceVersion?: string;
}

export interface List<T> {
  items: T[];
  metadata: ListMeta;
}

export interface WriteOptions {
  signal?: AbortSignal;
  dryRun?: boolean;
  subresource?: string;
  fieldManager?: string;
}

export type PatchType = "json" | "merge" | "strategic" | "apply";

const PATCH_CONTENT_TYPES: Record<PatchType, string> = {
  json: "application/json-patch+json",
  merge: "application/merge-patch+json",
  strategic: "application/strategic-merge-patch+json",
  apply: "application/apply-patch+yaml",
};

export interface WatchOptions extends Selectors {
  resourceVersion?: string;
  timeoutSeconds: number;
  signal?: AbortSignal;
}

export interface WatchEvent<T> {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object: T;
}

export class Resource<T extends KubeObject> {
  private readonly client: KubeClient;
  readonly ref: ResourceRef;

  constructor(client: KubeClient, ref: ResourceRef) {
    this.client = client;
    this.ref = ref;
  }

  /** API path of the collection, or of one object and optionally its subresource. */
  path(name?: string, subresource?: string): string {
    const { group, version, plural, namespace } = this.ref;
    let p = group ? `/apis/${group}/${version}` : `/api/${version}`;
    if (namespace) p += `/namespaces/${encodeURIComponent(namespace)}`;
    p += `/${plural}`;
    if (name !== undefined) p += `/${encodeURIComponent(name)}`;
    if (subresource) p += `/${subresource}`;
    return p;
  }

  get(name: string, options: { subresource?: string; signal?: AbortSignal } = {}): Promise<T> {
    return this.client.request<T>({
      method: "GET",
      verb: "get",
      path: this.path(name, options.subresource),
      signal: options.signal,
    });
  }

  /** One page; pass `continue` from the previous page's metadata to get the next. */
  listPage(options: ListOptions & { continue?: string } = {}): Promise<List<T>> {
    const query: Query = {
      labelSelector: options.labelSelector,
      fieldSelector: options.fieldSelector,
      limit: options.limit,
      continue: options.continue,
      resourceVersion: options.continue ? undefined : options.resourceVersion,
    };
    return this.client.request<List<T>>({ method: "GET", verb: "list", path: this.path(), query });
  }

  /** All pages, with the resourceVersion of the consistent snapshot they came from. */
  async list(options: ListOptions = {}): Promise<{ items: T[]; resourceVersion: string }> {
    const items: T[] = [];
    let resourceVersion = "";
    for await (const page of this.pages(options)) {
      items.push(...page.items);
      resourceVersion = page.metadata.resourceVersion ?? resourceVersion;
    }
    return { items, resourceVersion };
  }

  /** Page after page of one consistent snapshot: a caller that trims each page never holds the whole list. */
  async *pages(options: ListOptions = {}): AsyncGenerator<List<T>> {
    let next: string | undefined;
    do {
      const page = await this.listPage({ ...options, continue: next });
      yield page;
      next = page.metadata.continue || undefined;
    } while (next);
  }

  create(obj: T, options: WriteOptions = {}): Promise<T> {
    return this.client.request<T>({
      method: "POST",
      verb: "create",
      path: this.path(),
      query: writeQuery(options),
      body: obj,
      signal: options.signal,
    });
  }

  /** PUT: carries metadata.resourceVersion, so a concurrent change answers Conflict. */
  update(obj: T, options: WriteOptions = {}): Promise<T> {
    const name = obj.metadata?.name;
    if (!name) throw new Error("update needs metadata.name");
    return this.client.request<T>({
      method: "PUT",
      verb: "update",
      path: this.path(name, options.subresource),
      query: writeQuery(options),
      body: obj,
      signal: options.signal,
      // With a resourceVersion, a repeat is harmless: it either applies once or conflicts.
      idempotent: Boolean(obj.metadata?.resourceVersion),
    });
  }

  patch(
    name: string,
    type: PatchType,
    patch: unknown,
    options: WriteOptions & { force?: boolean } = {},
  ): Promise<T> {
    if (type === "apply" && !options.fieldManager) throw new Error("server-side apply needs a fieldManager");
    return this.client.request<T>({
      method: "PATCH",
      verb: "patch",
      path: this.path(name, options.subresource),
      query: { ...writeQuery(options), force: options.force },
      body: patch,
      contentType: PATCH_CONTENT_TYPES[type],
      signal: options.signal,
    });
  }

  /** DELETE; with preconditions the server refuses (Conflict) if the object is not the one we checked. */
  delete(
    name: string,
    options: { preconditions?: Preconditions; dryRun?: boolean; propagationPolicy?: string; signal?: AbortSignal } = {},
  ): Promise<T | Status> {
    // dryRun goes in the body: the apiserver decodes a DELETE body over the query parameters.
    const body = {
      apiVersion: "v1",
      kind: "DeleteOptions",
      preconditions: options.preconditions,
      propagationPolicy: options.propagationPolicy,
      dryRun: options.dryRun ? ["All"] : undefined,
    };
    const request = { method: "DELETE", verb: "delete", path: this.path(name), body, signal: options.signal } as const;
    return this.client.request<T | Status>(request);
  }

  /**
   * One watch request as a stream of events. It ends when the server closes it (timeoutSeconds)
   * or the signal aborts; resuming and relisting are the informer's job.
   */
  async *watch(options: WatchOptions): AsyncGenerator<WatchEvent<T>> {
    const res = await this.client.stream({
      method: "GET",
      verb: "watch",
      path: this.path(),
      query: {
        watch: true,
        allowWatchBookmarks: true,
        resourceVersion: options.resourceVersion,
        labelSelector: options.labelSelector,
        fieldSelector: options.fieldSelector,
        timeoutSeconds: options.timeoutSeconds,
      },
      signal: options.signal,
      // A silent connection (dead peer, partition) is dropped well after the server should have ended it.
      idleTimeoutMs: (options.timeoutSeconds + 30) * 1000,
    });
    yield* decodeWatchStream<T>(res, this.path());
  }
}

function writeQuery(options: WriteOptions): Query {
  return { dryRun: options.dryRun ? "All" : undefined, fieldManager: options.fieldManager };
}

/**
 * Newline-delimited JSON watch events; an ERROR event becomes a thrown ApiError (e.g. 410 Expired). Each chunk is
 * searched once: an event of hundreds of KiB (any client may create one, e.g. a CSR) arrives in many chunks, and
 * searching the whole line so far for each of them stalled the event loop for hundreds of ms.
 */
export async function* decodeWatchStream<T>(res: IncomingMessage, path: string): AsyncGenerator<WatchEvent<T>> {
  let pieces: string[] = []; // the current line so far
  res.setEncoding("utf8"); // never split a multi-byte character across chunks
  try {
    for await (const chunk of res as AsyncIterable<string>) {
      let start = 0;
      for (let newline = chunk.indexOf("\n"); newline >= 0; newline = chunk.indexOf("\n", start)) {
        pieces.push(chunk.slice(start, newline));
        start = newline + 1;
        const line = pieces.join("").trim();
        pieces = [];
        if (!line) continue;
        const event = JSON.parse(line) as WatchEvent<T>;
        if (event.type === "ERROR") {
          const status = event.object as Status;
          throw new ApiError(status.code ?? 500, status, `watch ${path}`);
        }
        yield event;
      }
      if (start < chunk.length) pieces.push(chunk.slice(start));
    }
  } finally {
    res.destroy();
  }
}
