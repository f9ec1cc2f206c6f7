// One watch per resource per process, shared by every consumer that asks for that resource (client-go's
// SharedInformerFactory). Each consumer declares its selectors and the fields it keeps; the one cache keeps
// the union of the fields. When all consumers of a resource ask the same selectors, the API server selects
// (CSRs by signer); when they differ, the watch is unselected and each consumer sees a view filtered here,
// which needs selectors that can be evaluated locally: labels, metadata.name and metadata.namespace.
import type { KubeClient } from "./client.ts";
import { type FieldPath, IDENTITY_FIELDS, projection } from "./fields.ts";
import { Informer, type InformerHandlers } from "./informer.ts";
import { matchesLabels, parseLabelSelector } from "./labelselector.ts";
import { type KubeObject, Resource, type ResourceRef } from "./resource.ts";

export interface Watch<T extends KubeObject> {
  /** Its namespace, if any, limits the watch to it. */
  resource: ResourceRef;
  labelSelector?: string;
  fieldSelector?: string;
  /**
   * The fields this consumer reads (see fields.ts), or a transform of its own, allowed while it is the
   * resource's only consumer (a transform cannot be unioned with another consumer's fields); a transform may
   * leave an object out of the cache (undefined).
   */
  keep: readonly FieldPath[] | ((obj: T) => T | undefined);
}

/** Any consumer's watch, whatever its object type (a registry of consumers holds these). */
export type AnyWatch = Omit<Watch<KubeObject>, "keep"> & { keep: readonly FieldPath[] | ((obj: never) => unknown) };

/** Identity that types a watch declaration by its object type: watch<Node>({ … }). */
export function watch<T extends KubeObject>(declaration: Watch<T>): Watch<T> {
  return declaration;
}

/** What a consumer reads and is told: the objects its watch selects, trimmed to at least its fields. */
export interface Cache<T> {
  get(key: string): T | undefined;
  list(): T[];
  hasSynced(): boolean;
  addHandlers(handlers: InformerHandlers<T>): void;
}

/** What a controller reads of its caches (its definition adds the handlers): all a fake in a pure test needs. */
export type CacheReader<T> = Pick<Cache<T>, "get" | "list">;

interface Registration {
  consumer: string;
  watch: Watch<KubeObject>;
  view: View<KubeObject>;
}

export class SharedInformers {
  private readonly client: KubeClient;
  private readonly onError: (resource: string, err: unknown) => void;
  private readonly registrations = new Map<string, Registration[]>();
  private readonly informers = new Map<string, Informer<KubeObject>>();

  constructor(client: KubeClient, options: { onError(resource: string, err: unknown): void }) {
    this.client = client;
    this.onError = options.onError;
  }

  /**
   * A cache of what `watch` selects, for `consumer` (named in errors). Call before start(). Throws a one-line
   * Error when it cannot share the resource's watch with the consumers registered before it.
   */
  watch<T extends KubeObject>(consumer: string, watch: Watch<T> | AnyWatch): Cache<T> {
    if (this.informers.size > 0) throw new Error(`${consumer}: watches are registered before the informers start`);
    const key = resourceKey(watch.resource);
    const view = new View<KubeObject>();
    const group = [
      ...(this.registrations.get(key) ?? []),
      { consumer, watch: watch as unknown as Watch<KubeObject>, view },
    ];
    // Refused here, at registration, rather than when the watches start: the registering consumer's create fails.
    for (const each of group) filterFor(group, each.watch);
    transformFor(group, sameSelection(group));
    this.registrations.set(key, group);
    return view as unknown as Cache<T>;
  }

  /** Starts one informer per resource. */
  start(): void {
    for (const [key, group] of this.registrations) {
      const informer = this.informerFor(group);
      for (const { view, watch } of group) view.attach(informer, filterFor(group, watch));
      this.informers.set(key, informer);
    }
    for (const informer of this.informers.values()) informer.start();
  }

  async stop(): Promise<void> {
    await Promise.all([...this.informers.values()].map((informer) => informer.stop()));
  }

  hasSynced(): boolean {
    return [...this.informers.values()].every((informer) => informer.hasSynced());
  }

  async waitForSync(): Promise<void> {
    await Promise.all([...this.informers.values()].map((informer) => informer.waitForSync()));
  }

  /** Cached objects per resource ("nodes", "certificatesigningrequests", …), for logs. */
  counts(): Record<string, number> {
    return Object.fromEntries(
      [...this.registrations].map(([key, group]) => [
        group[0]?.watch.resource.plural ?? key,
        this.informers.get(key)?.list().length ?? 0,
      ]),
    );
  }

  private informerFor(group: Registration[]): Informer<KubeObject> {
    const [first] = group as [Registration];
    const shared = sameSelection(group);
    const { namespace, ...cluster } = first.watch.resource;
    const resource = new Resource<KubeObject>(this.client, shared ? first.watch.resource : cluster);
    return new Informer(resource, {
      ...(shared ? { labelSelector: first.watch.labelSelector, fieldSelector: first.watch.fieldSelector } : {}),
      transform: transformFor(group, shared),
      onError: (err) => this.onError(shared && namespace ? `${cluster.plural} in ${namespace}` : cluster.plural, err),
    });
  }
}

const resourceKey = ({ group, version, plural }: ResourceRef) => `${group}/${version}/${plural}`;

const selection = ({ resource, labelSelector, fieldSelector }: Watch<KubeObject>) =>
  JSON.stringify([resource.namespace ?? "", labelSelector ?? "", fieldSelector ?? ""]);

function sameSelection(group: Registration[]): boolean {
  return new Set(group.map(({ watch }) => selection(watch))).size === 1;
}

function transformFor(group: Registration[], shared: boolean): (obj: KubeObject) => KubeObject | undefined {
  const [first] = group as [Registration];
  if (typeof first.watch.keep === "function") {
    if (group.length > 1) throw new Error(sharingProblem(group, "keeps its own transform"));
    return first.watch.keep;
  }
  const paths = group.flatMap(({ consumer, watch }) => {
    if (typeof watch.keep === "function") throw new Error(sharingProblem(group, `${consumer} keeps its own transform`));
    return watch.keep;
  });
  // Views filter by labels here when the server does not.
  const labels: FieldPath[] = shared ? [] : [["metadata", "labels"]];
  return projection([...IDENTITY_FIELDS, ...labels, ...paths]);
}

function sharingProblem(group: Registration[], why: string): string {
  const consumers = group.map(({ consumer }) => consumer).join(", ");
  return `${consumers} watch ${group[0]?.watch.resource.plural}, and ${why}: one watch cannot serve them all`;
}

/** The view's filter when the informer is unselected; undefined when the server selects. */
function filterFor(group: Registration[], watch: Watch<KubeObject>): ((obj: KubeObject) => boolean) | undefined {
  if (sameSelection(group)) return undefined;
  const { namespace } = watch.resource;
  const labels = watch.labelSelector ? parseLabelSelector(watch.labelSelector) : undefined;
  const fields = watch.fieldSelector ? parseLocalFieldSelector(watch.fieldSelector, group) : [];
  return (obj) =>
    (namespace === undefined || obj.metadata?.namespace === namespace) &&
    (labels === undefined || matchesLabels(labels, obj.metadata?.labels)) &&
    fields.every((term) => term(obj));
}

/** The metadata fields a field selector may name when it is evaluated here rather than by the server. */
const LOCAL_FIELDS = {
  "metadata.name": (obj: KubeObject) => obj.metadata?.name,
  "metadata.namespace": (obj: KubeObject) => obj.metadata?.namespace,
} as const;

function parseLocalFieldSelector(text: string, group: Registration[]): ((obj: KubeObject) => boolean)[] {
  return text.split(",").map((term) => {
    const match = /^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$/.exec(term);
    const field = match?.[1] as keyof typeof LOCAL_FIELDS | undefined;
    const read = field !== undefined && Object.hasOwn(LOCAL_FIELDS, field) ? LOCAL_FIELDS[field] : undefined;
    if (!match || !read) {
      throw new Error(sharingProblem(group, `the field selector "${text}" cannot be evaluated locally`));
    }
    const [, , operator, value] = match;
    return operator === "!=" ? (obj) => read(obj) !== value : (obj) => read(obj) === value;
  });
}

/** One consumer's cache: the shared informer's, through its filter when the server does not select. */
class View<T extends KubeObject> implements Cache<T> {
  private informer: Informer<T> | undefined;
  private filter: ((obj: T) => boolean) | undefined;
  private readonly pending: InformerHandlers<T>[] = [];

  attach(informer: Informer<T>, filter: ((obj: T) => boolean) | undefined): void {
    this.informer = informer;
    this.filter = filter;
    for (const handlers of this.pending.splice(0)) this.addHandlers(handlers);
  }

  get(key: string): T | undefined {
    const obj = this.informer?.get(key);
    return obj && this.selects(obj) ? obj : undefined;
  }

  list(): T[] {
    const all = this.informer?.list() ?? [];
    return this.filter ? all.filter(this.filter) : all;
  }

  hasSynced(): boolean {
    return this.informer?.hasSynced() ?? false;
  }

  /** An object that leaves the view is a delete to its consumer, one that enters it an add. */
  addHandlers(handlers: InformerHandlers<T>): void {
    if (!this.informer) {
      this.pending.push(handlers);
      return;
    }
    if (!this.filter) {
      this.informer.addHandlers(handlers);
      return;
    }
    this.informer.addHandlers({
      onAdd: (obj) => {
        if (this.selects(obj)) handlers.onAdd?.(obj);
      },
      onUpdate: (before, after) => {
        const [was, is] = [this.selects(before), this.selects(after)];
        if (was && is) handlers.onUpdate?.(before, after);
        else if (was) handlers.onDelete?.(before);
        else if (is) handlers.onAdd?.(after);
      },
      onDelete: (obj) => {
        if (this.selects(obj)) handlers.onDelete?.(obj);
      },
    });
  }

  private selects(obj: T): boolean {
    return this.filter?.(obj) ?? true;
  }
}
