// Which addresses each LoadBalancer Service of class local-ccm.io/l2 holds, as a pure function of the pools, the
// Services and the Nodes' addresses: allocate() looks at all of them at once, because Services compete for
// addresses. Every answer carries a rule id for metrics and a reason for logs and Events.
//
// Order of the rules:
// 1. What Services hold is kept first, oldest Service first: an address in their status (written only by us, after
//    the allocation was recorded in the allocated-from annotation) stays theirs while it is in a pool they may use,
//    matches what they request, and no older Service holds it without a compatible sharing key. Two Services found
//    on one address: the older keeps it, the newer is moved, and its reason names the other. A restart rebuilds
//    exactly this from the Services, so no address is ever handed out twice, even with the pool exhausted.
// 2. Then, oldest first, each Service's missing families: the address it requests (annotation, else
//    spec.loadBalancerIP), else a compatible sharer's address, else the lowest free address of the first pool by
//    name that has one. A Service gets every family of spec.ipFamilies or nothing: a refusal releases what it held.
import type { Service } from "kubernetes-types/core/v1.js";
import { objectKey } from "../kube/informer.ts";
import { matchesLabels } from "../kube/labelselector.ts";
import { byAge, LB_FINALIZER, type ServicePort } from "../service/decide.ts";
import { ANNOUNCER_LABEL } from "./announcement.ts";
import type { PoolFacts } from "./pool.ts";
import { type IpFamily, ipNumber, ipText, isBuggyIp, rangeHolds } from "./ranges.ts";

export const L2_CLASS = "local-ccm.io/l2";
/** One address, or one of each family, comma-separated: the Service's addresses, from any pool it may use. */
export const REQUESTED_IPS_ANNOTATION = "local-ccm.io/load-balancer-ips";
/** The pool (by name) to draw from, even one with autoAssign false. */
export const POOL_ANNOTATION = "local-ccm.io/address-pool";
/** Services with the same key share an address when no protocol/port of theirs overlaps. */
export const SHARING_ANNOTATION = "local-ccm.io/allow-shared-ip";
/** Ours: the pool of each status.loadBalancer.ingress address, comma-separated in the same order. */
export const ALLOCATED_FROM_ANNOTATION = "local-ccm.io/allocated-from";

export interface L2ServiceFacts {
  /** namespace/name */
  key: string;
  namespace: string;
  uid: string;
  /** metadata.creationTimestamp as written (compares as text). */
  created: string;
  type: string;
  class: string | undefined;
  deleting: boolean;
  labels: Record<string, string>;
  ipFamilies: IpFamily[];
  ports: ServicePort[];
  requestedIps: string | undefined;
  loadBalancerIP: string | undefined;
  pool: string | undefined;
  sharingKey: string | undefined;
  finalizer: boolean;
  allocatedFrom: string | undefined;
  /** The IPs of status.loadBalancer.ingress, as written. */
  ingress: string[];
}

export function l2ServiceFacts(service: Service): L2ServiceFacts {
  const { metadata = {}, spec = {}, status } = service;
  const annotations = metadata.annotations ?? {};
  const families = (spec.ipFamilies ?? []).filter(
    (family): family is IpFamily => family === "IPv4" || family === "IPv6",
  );
  return {
    key: objectKey(service),
    namespace: metadata.namespace ?? "",
    uid: metadata.uid ?? "",
    created: metadata.creationTimestamp ?? "",
    type: spec.type ?? "ClusterIP",
    class: spec.loadBalancerClass,
    deleting: Boolean(metadata.deletionTimestamp),
    labels: withoutAnnouncerLabel(metadata.labels ?? {}),
    ipFamilies: families.length ? families : ["IPv4"],
    ports: (spec.ports ?? []).map(({ protocol, port }) => ({ protocol: protocol ?? "TCP", port })),
    requestedIps: annotations[REQUESTED_IPS_ANNOTATION],
    loadBalancerIP: spec.loadBalancerIP || undefined,
    pool: annotations[POOL_ANNOTATION],
    sharingKey: annotations[SHARING_ANNOTATION] || undefined,
    finalizer: (metadata.finalizers ?? []).includes(LB_FINALIZER),
    allocatedFrom: annotations[ALLOCATED_FROM_ANNOTATION],
    ingress: (status?.loadBalancer?.ingress ?? []).flatMap(({ ip }) => (ip ? [ip] : [])),
  };
}

/**
 * The Service's labels for pools' selectors, less the announcer label: this controller writes that one from the
 * allocation, so a pool selecting on it would make the allocation depend on itself.
 */
function withoutAnnouncerLabel(labels: Record<string, string>): Record<string, string> {
  if (!(ANNOUNCER_LABEL in labels)) return labels;
  const { [ANNOUNCER_LABEL]: _, ...rest } = labels;
  return rest;
}

/** Whether this controller serves the Service: of type LoadBalancer and of its class (or class-less, if claimed). */
export function isOurs(facts: L2ServiceFacts, claimClassless: boolean): boolean {
  return facts.type === "LoadBalancer" && (facts.class === L2_CLASS || (facts.class === undefined && claimClassless));
}

export type RefusalRule =
  | "bad-request"
  | "no-pool"
  | "pool-exhausted"
  | "address-in-no-pool"
  | "address-held"
  | "port-overlap"
  | "node-address";

export type Allocation =
  | {
      action: "allocate";
      /** kept: every address was held already; allocated: at least one is new. */
      rule: "kept" | "allocated";
      /** One per family of spec.ipFamilies, in its order. */
      ips: string[];
      /** The pool of each address. */
      pools: string[];
      reason: string;
      /** Why an address the Service held was taken from it, when one was. */
      moved: string | undefined;
    }
  | { action: "refuse"; rule: RefusalRule; reason: string; moved: string | undefined };

export interface AllocateInput {
  services: Iterable<L2ServiceFacts>;
  pools: readonly PoolFacts[];
  /** Every Node's addresses (canonical text) → the Node: never handed out. */
  nodeAddresses: ReadonlyMap<string, string>;
  claimClassless: boolean;
}

export interface AllocateResult {
  /** Every Service of ours that is not being deleted. */
  services: Map<string, Allocation>;
  /** Each pool's addresses in use (Services being deleted still hold theirs). */
  used: Map<string, Set<string>>;
}

interface Holder {
  key: string;
  sharingKey: string | undefined;
  ports: ServicePort[];
}

interface Held {
  ip: string;
  pool: string;
}

interface Refusal {
  refuse: RefusalRule;
  reason: string;
}

const refusal = (refuse: RefusalRule, reason: string): Refusal => ({ refuse, reason });

type Step = { ok: Held } | Refusal;

/** Where a missing address comes from: the one requested, in its pool, or the lowest free one of these pools. */
type Source = { ip: string; pool: PoolFacts } | { family: IpFamily; candidates: PoolFacts[] };

/** Whether two Services may hold one address: the same sharing key, and no protocol/port in common. */
function compatible(a: Holder, b: Holder): boolean {
  if (!a.sharingKey || a.sharingKey !== b.sharingKey) return false;
  return !a.ports.some((mine) => b.ports.some((theirs) => samePort(mine, theirs)));
}

const samePort = (a: ServicePort, b: ServicePort) => a.protocol === b.protocol && a.port === b.port;

/**
 * A refused Service releases what it held, which an older Service may have been refused for: allocation runs again
 * with the refused Services' addresses set aside from the start, until no refusal releases anything. Each run sets
 * aside more, so this ends; and its answer is what a restart would rebuild (a refused Service's status is cleared).
 */
export function allocate(input: AllocateInput): AllocateResult {
  const ours = [...input.services].filter((facts) => isOurs(facts, input.claimClassless)).sort(byAge);
  const setAside = new Set<string>();
  for (;;) {
    const { released, ...result } = allocateOnce(ours, input, setAside);
    if (!released.length) return result;
    for (const key of released) setAside.add(key);
  }
}

/** One allocation of `ours` (oldest first), the Services of `setAside` holding nothing. */
function allocateOnce(
  ours: readonly L2ServiceFacts[],
  { pools, nodeAddresses }: AllocateInput,
  setAside: ReadonlySet<string>,
): AllocateResult & { released: string[] } {
  const byName = [...pools].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const holders = new Map<string, Holder[]>();
  const held = new Map<string, Held[]>(); // Service key → what it holds
  const moved = new Map<string, string>();
  // Per pool and family, an address below which every one is held or a Node's. Addresses are taken as the Services
  // go, oldest first, so the search for the lowest free one goes on from there: each address is looked at about once
  // per allocation, not once per Service (2,000 new Services took 0.6 s an allocation). A release forgets them.
  const heldBelow = new Map<string, bigint>();

  const hold = (facts: L2ServiceFacts, entry: Held) => {
    holders.set(entry.ip, [...(holders.get(entry.ip) ?? []), holderOf(facts)]);
    held.set(facts.key, [...(held.get(facts.key) ?? []), entry]);
  };
  const conflict = (facts: L2ServiceFacts, ip: string) => {
    const others = (holders.get(ip) ?? []).filter((other) => !compatible(holderOf(facts), other));
    return others.length ? others.map(({ key }) => key).join(", ") : undefined;
  };
  /** Pools this Service may draw from: sound, its namespace and labels admitted, the one it names if it names one. */
  const usable = (facts: L2ServiceFacts) =>
    byName.filter(
      (pool) =>
        pool.problem === undefined &&
        (facts.pool === undefined || facts.pool === pool.name) &&
        (pool.namespaces.length === 0 || pool.namespaces.includes(facts.namespace)) &&
        (pool.serviceSelector === undefined || matchesLabels(pool.serviceSelector, facts.labels)),
    );

  // 1. Keep what is held, oldest first.
  for (const facts of ours) {
    if (setAside.has(facts.key)) continue;
    const request = requestedIps(facts);
    const recorded = (facts.allocatedFrom ?? "").split(",");
    const pools = usable(facts);
    const families = new Set<IpFamily>();
    facts.ingress.forEach((text, index) => {
      const ip = ipNumber(text);
      if (!ip) return;
      const canonical = ipText(ip.family, ip.value);
      const holding = pools.filter((pool) => poolHolds(pool, ip.family, ip.value));
      const pool = holding.find(({ name }) => name === recorded[index]) ?? holding[0];
      const wanted = typeof request === "string" ? undefined : request.get(ip.family);
      const why = facts.deleting
        ? undefined
        : families.has(ip.family) || !facts.ipFamilies.includes(ip.family)
          ? `${canonical} is of a family the Service no longer holds an address of`
          : !pool
            ? `${canonical} is in no pool this Service may use`
            : wanted !== undefined && wanted !== canonical
              ? `${canonical} is not the address it requests`
              : nodeAddresses.has(canonical)
                ? `${canonical} is an address of node ${nodeAddresses.get(canonical)}`
                : undefined;
      const older = conflict(facts, canonical);
      const reason = why ?? (older ? `${canonical} is held by the older Service ${older}` : undefined);
      if (reason !== undefined) {
        moved.set(facts.key, reason);
        return;
      }
      families.add(ip.family);
      hold(facts, { ip: canonical, pool: pool?.name ?? "" });
    });
  }

  // 2. Complete each Service, oldest first, or refuse it and release what it held.
  const result = new Map<string, Allocation>();
  const released: string[] = [];
  for (const facts of ours) {
    if (facts.deleting) continue;
    const kept = held.get(facts.key) ?? [];
    const outcome = complete(facts, kept, usable(facts));
    const movedReason = moved.get(facts.key);
    if ("refuse" in outcome) {
      if (kept.length) released.push(facts.key);
      release(facts.key);
      result.set(facts.key, { action: "refuse", rule: outcome.refuse, reason: outcome.reason, moved: movedReason });
      continue;
    }
    for (const entry of outcome.added) hold(facts, entry);
    const all = held.get(facts.key) ?? [];
    const ordered = facts.ipFamilies.map((family) => all.find((entry) => familyOf(entry.ip) === family) as Held);
    const reason = ordered.map(({ ip, pool }) => `${ip} from pool ${pool}`).join(", ");
    const rule = outcome.added.length ? "allocated" : "kept";
    const ips = ordered.map(({ ip }) => ip);
    const pools = ordered.map(({ pool }) => pool);
    result.set(facts.key, { action: "allocate", rule, ips, pools, reason, moved: movedReason });
  }

  function release(key: string): void {
    heldBelow.clear();
    for (const { ip } of held.get(key) ?? []) {
      const rest = (holders.get(ip) ?? []).filter((holder) => holder.key !== key);
      if (rest.length) holders.set(ip, rest);
      else holders.delete(ip);
    }
    held.delete(key);
  }

  /**
   * The addresses a Service lacks, per family of spec.ipFamilies, or a refusal. What cannot change with other
   * Services (a bad request, no pool, an address outside the pools or a Node's) is checked for every family before
   * what can (an address held, a pool exhausted): the reason a Service is told stays the same across restarts.
   */
  function complete(facts: L2ServiceFacts, kept: Held[], pools: PoolFacts[]): { added: Held[] } | Refusal {
    const request = requestedIps(facts);
    if (typeof request === "string") return { refuse: "bad-request", reason: request };
    if (facts.pool !== undefined && !pools.some(({ name }) => name === facts.pool))
      return { refuse: "no-pool", reason: namedPoolProblem(facts, byName) };
    const missing = facts.ipFamilies.filter((family) => !kept.some(({ ip }) => familyOf(ip) === family));
    const sources: Source[] = [];
    for (const family of missing) {
      const source = sourceOf(facts, family, request.get(family), pools);
      if ("refuse" in source) return source;
      sources.push(source);
    }
    const added: Held[] = [];
    for (const source of sources) {
      const step = "ip" in source ? requested(facts, source) : automatic(facts, source, added);
      if ("refuse" in step) return step;
      added.push(step.ok);
    }
    return { added };
  }

  /** Where a family's address may come from: the requested address's pool, or the pools to draw from. */
  function sourceOf(facts: L2ServiceFacts, family: IpFamily, wanted: string | undefined, pools: PoolFacts[]) {
    if (wanted !== undefined) {
      const number = ipNumber(wanted) as { family: IpFamily; value: bigint };
      if (nodeAddresses.has(wanted))
        return refusal("node-address", `${wanted} is an address of node ${nodeAddresses.get(wanted)}`);
      const pool = pools.find((each) => poolHolds(each, number.family, number.value));
      if (pool) return { ip: wanted, pool };
      return refusal("address-in-no-pool", `${wanted} is in no pool this Service may use`);
    }
    const candidates = pools.filter(
      (pool) => (facts.pool !== undefined || pool.autoAssign) && pool.ranges.some((range) => range.family === family),
    );
    if (!candidates.length) return refusal("no-pool", `no pool offers ${family} addresses to this Service`);
    return { family, candidates };
  }

  function requested(facts: L2ServiceFacts, { ip, pool }: { ip: string; pool: PoolFacts }): Step {
    const others = holders.get(ip) ?? [];
    const sharer = others.find((other) => other.sharingKey !== undefined && other.sharingKey === facts.sharingKey);
    const holder = conflict(facts, ip);
    if (holder !== undefined && sharer && others.every((other) => other.sharingKey === facts.sharingKey))
      return refusal("port-overlap", `${ip} is shared with ${holder}, whose ports overlap this Service's`);
    if (holder !== undefined) return refusal("address-held", `${ip} is held by the Service ${holder}`);
    return { ok: { ip, pool: pool.name } };
  }

  function automatic(
    facts: L2ServiceFacts,
    { family, candidates }: { family: IpFamily; candidates: PoolFacts[] },
    added: Held[],
  ): Step {
    const taken = new Set(added.map(({ ip }) => ip));
    if (facts.sharingKey !== undefined) {
      const shared = sharedAddress(facts, family, candidates, taken);
      if (shared) return { ok: shared };
    }
    for (const pool of candidates) {
      const ip = lowestFree(pool, family, taken);
      if (ip !== undefined) return { ok: { ip, pool: pool.name } };
    }
    const names = candidates.map(({ name }) => name).join(", ");
    return refusal("pool-exhausted", `no free ${family} address in pool(s) ${names}`);
  }

  /** The pool's lowest address of the family that is neither held, a Node's nor `taken`. */
  function lowestFree(pool: PoolFacts, family: IpFamily, taken: ReadonlySet<string>): string | undefined {
    const cursor = `${pool.name}/${family}`;
    const from = heldBelow.get(cursor) ?? -1n;
    for (const range of pool.ranges) {
      if (range.family !== family || range.last < from) continue;
      for (let value = from > range.first ? from : range.first; value <= range.last; value++) {
        if (pool.avoidBuggyIps && isBuggyIp(family, value)) continue;
        const ip = ipText(family, value);
        if (holders.has(ip) || nodeAddresses.has(ip)) continue;
        heldBelow.set(cursor, value); // never lower: the search started there
        if (!taken.has(ip)) return ip;
      }
    }
    return undefined;
  }

  /** The lowest address of a candidate pool held under this Service's sharing key, if it may join its holders. */
  function sharedAddress(facts: L2ServiceFacts, family: IpFamily, pools: PoolFacts[], taken: Set<string>) {
    const me = holderOf(facts);
    let best: { held: Held; value: bigint } | undefined;
    for (const [ip, others] of holders) {
      const number = ipNumber(ip);
      if (!number || number.family !== family || taken.has(ip)) continue;
      if (!others.every((other) => compatible(me, other))) continue;
      const pool = pools.find((each) => poolHolds(each, family, number.value));
      if (pool && (!best || number.value < best.value)) best = { held: { ip, pool: pool.name }, value: number.value };
    }
    return best?.held;
  }

  const used = new Map<string, Set<string>>(pools.map(({ name }) => [name, new Set<string>()]));
  for (const entries of held.values()) for (const { ip, pool } of entries) used.get(pool)?.add(ip);
  return { services: result, used, released };
}

const holderOf = ({ key, sharingKey, ports }: L2ServiceFacts): Holder => ({ key, sharingKey, ports });

const familyOf = (ip: string): IpFamily => (ip.includes(":") ? "IPv6" : "IPv4");

/** Whether a pool offers an address: in one of its ranges, and not a .0/.255 one it avoids. */
export function poolHolds(pool: PoolFacts, family: IpFamily, value: bigint): boolean {
  if (pool.avoidBuggyIps && isBuggyIp(family, value)) return false;
  return pool.ranges.some((range) => rangeHolds(range, family, value));
}

/**
 * The addresses a Service requests, by family: the annotation's (one, or one per family), else
 * spec.loadBalancerIP; a one-line reason when they are malformed or not of its families.
 */
export function requestedIps(facts: L2ServiceFacts): Map<IpFamily, string> | string {
  const source = facts.requestedIps !== undefined ? `annotation ${REQUESTED_IPS_ANNOTATION}` : "spec.loadBalancerIP";
  const text = facts.requestedIps ?? facts.loadBalancerIP;
  const wanted = new Map<IpFamily, string>();
  if (text === undefined) return wanted;
  for (const item of text.split(",").map((each) => each.trim())) {
    const ip = ipNumber(item);
    if (!ip) return `${source}: "${item}" is not an IP address`;
    if (wanted.has(ip.family)) return `${source}: two ${ip.family} addresses`;
    if (!facts.ipFamilies.includes(ip.family))
      return `${source}: ${item} is ${ip.family}, not of spec.ipFamilies (${facts.ipFamilies.join(", ")})`;
    wanted.set(ip.family, ipText(ip.family, ip.value));
  }
  return wanted;
}

function namedPoolProblem(facts: L2ServiceFacts, pools: PoolFacts[]): string {
  const pool = pools.find(({ name }) => name === facts.pool);
  const named = `annotation ${POOL_ANNOTATION}: pool ${facts.pool}`;
  if (!pool) return `${named} does not exist`;
  if (pool.problem !== undefined) return `${named} serves nothing: ${pool.problem}`;
  return `${named} does not admit this Service (its namespaces or serviceSelector)`;
}
