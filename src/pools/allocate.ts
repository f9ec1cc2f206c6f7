// Which addresses each LoadBalancer Service of class local-ccm.io/l2 (and local-ccm.io/bgp) holds, as a pure function
// of the pools, the Services and what the network uses (exclusions.ts): allocate() looks at all of them at once,
// because Services compete for addresses. Every answer carries a rule id for metrics and a reason for logs and Events.
//
// Order of the rules:
// 1. What Services hold is kept first, oldest Service first. An address in their status that this controller
//    recorded (the allocated-from annotation, written before the status) stays theirs while the Service exists,
//    whatever edit came since: a pool deleted, shrunk or narrowed, an entry gone bad, the address now a node's or a
//    gateway's. The Service is told why it would no longer be given (a notice), and so is the pool's status; only the
//    Service's own edits take an address from it (a family dropped, another address requested and given). Two
//    Services found on one address: the older keeps it, the newer is moved, and its reason names the other. A
//    restart rebuilds exactly this from the Services, so no address is ever handed out twice, even with the pool
//    exhausted.
// 2. Then, oldest first, each Service's missing families: the address it requests (annotation, else
//    spec.loadBalancerIP), else a compatible sharer's address, else the lowest free address of the first pool by
//    name that has one; never an excluded address, and a requested one that is excluded is refused by its rule. A
//    Service that holds nothing gets every family of spec.ipFamilies or nothing; one that holds addresses keeps
//    them and is told what it asks and cannot have, so no refusal ever releases an address.
//
// Sharers are of one namespace and one class: Services sharing an address have one announcer, eligible for all of them
// (announcers.ts), so a sharer whose node selector matches no node, or whose externalTrafficPolicy Local has no
// endpoint, leaves the address unannounced. A key is a namespace's own, as a tenant may set any key; Cilium too
// shares across namespaces only on an explicit opt-in. An address announced by one node over layer 2 and by every
// node over BGP would draw its traffic two ways, so an l2 and a bgp Service never share.
import type { Service } from "kubernetes-types/core/v1.js";
import { objectKey } from "../kube/informer.ts";
import { matchesLabels } from "../kube/labelselector.ts";
import { byAge, LB_FINALIZER, type ServicePort } from "../loadbalancer/service.ts";
import { ANNOUNCER_LABEL } from "./announcement.ts";
import type { ExclusionRule, ExclusionSet } from "./exclusions.ts";
import type { PoolFacts } from "./pool.ts";
import { type IpFamily, ipNumber, ipText, isBuggyIp, rangeHolds } from "./ranges.ts";

export const L2_CLASS = "local-ccm.io/l2";
/** Served like L2_CLASS when --lb-bgp is on; every eligible node's speaker announces it: nothing to assign. */
export const BGP_CLASS = "local-ccm.io/bgp";
/** One address, or one of each family, comma-separated: the Service's addresses, from any pool it may use. */
export const REQUESTED_IPS_ANNOTATION = "local-ccm.io/load-balancer-ips";
/** The pool (by name) to draw from, even one with autoAssign false. */
export const POOL_ANNOTATION = "local-ccm.io/address-pool";
/** Services of one namespace with the same key share an address when no protocol/port of theirs overlaps. */
export const SHARING_ANNOTATION = "local-ccm.io/allow-shared-ip";
/**
 * Where a Service may say each of those three: ours first, then MetalLB's, then MetalLB's older spelling, so that a
 * Service MetalLB served keeps its address when we take it over. The first one set wins.
 */
export const SETTING_ANNOTATIONS = {
  requestedIps: [REQUESTED_IPS_ANNOTATION, "metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"],
  pool: [POOL_ANNOTATION, "metallb.io/address-pool", "metallb.universe.tf/address-pool"],
  sharingKey: [SHARING_ANNOTATION, "metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip"],
} as const;
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
  /** The annotations the three above were read from, where not ours (SETTING_ANNOTATIONS), for messages. */
  readFrom?: Partial<Record<keyof typeof SETTING_ANNOTATIONS, string>>;
  finalizer: boolean;
  allocatedFrom: string | undefined;
  /** The IPs of status.loadBalancer.ingress, as written. */
  ingress: string[];
}

const readFacts = new WeakMap<Service, Readonly<L2ServiceFacts>>();

/**
 * A Service as allocate() reads it, read once per object: the informer replaces an object on each change and never
 * changes one. The controller reads every Service on each allocation, and reading them again was a quarter of its
 * time while 1,000 Services were created.
 */
export function l2ServiceFacts(service: Service): Readonly<L2ServiceFacts> {
  let facts = readFacts.get(service);
  if (!facts) {
    facts = readL2ServiceFacts(service);
    readFacts.set(service, facts);
  }
  return facts;
}

function readL2ServiceFacts(service: Service): L2ServiceFacts {
  const { metadata = {}, spec = {}, status } = service;
  const annotations = metadata.annotations ?? {};
  const readFrom: L2ServiceFacts["readFrom"] = {};
  const setting = (name: keyof typeof SETTING_ANNOTATIONS) => {
    const [ours, ...others] = SETTING_ANNOTATIONS[name];
    if (annotations[ours] !== undefined) return annotations[ours];
    const other = others.find((key) => annotations[key] !== undefined);
    if (other !== undefined) readFrom[name] = other;
    return other === undefined ? undefined : annotations[other];
  };
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
    requestedIps: setting("requestedIps"),
    loadBalancerIP: spec.loadBalancerIP || undefined,
    pool: setting("pool"),
    sharingKey: setting("sharingKey") || undefined,
    ...(Object.keys(readFrom).length ? { readFrom } : {}),
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

/** Which Services the controller serves beside those of class local-ccm.io/l2. */
export interface ServedClasses {
  /** Class-less Services too, announced as l2. */
  claimClassless: boolean;
  /** Class local-ccm.io/bgp too; off, they are left alone as another controller's class is. */
  bgp: boolean;
  /** Class-less Services too, announced as bgp (with `bgp` only; never with claimClassless: flags.ts). */
  bgpClaimClassless: boolean;
}

/** Whether this controller serves the Service: of type LoadBalancer and of a class it serves (or class-less). */
export function isOurs(facts: Pick<L2ServiceFacts, "type" | "class">, served: ServedClasses): boolean {
  if (facts.type !== "LoadBalancer") return false;
  if (facts.class === undefined) return served.claimClassless || served.bgpClaimClassless;
  return facts.class === L2_CLASS || (facts.class === BGP_CLASS && served.bgp);
}

/**
 * How a Service's addresses are announced: by one node the controller assigns (layer 2: class local-ccm.io/l2, or
 * class-less), or by the speaker of every eligible node (BGP, or class-less with bgpClaimClassless; the routers
 * spread the traffic): nothing to assign.
 */
export type Announcing = "assigned-node" | "every-node";
export const announcing = (
  { class: lbClass }: Pick<L2ServiceFacts, "class">,
  { bgpClaimClassless }: Pick<ServedClasses, "bgpClaimClassless">,
): Announcing =>
  lbClass === BGP_CLASS || (lbClass === undefined && bgpClaimClassless) ? "every-node" : "assigned-node";

export type RefusalRule =
  | "bad-request"
  | "no-pool"
  | "pool-exhausted"
  | "address-in-no-pool"
  | "address-held"
  | "port-overlap"
  | "sharing-namespace"
  | "sharing-class"
  | ExclusionRule;

/** Why an address a Service keeps would no longer be given to it: a pool's change, or what the network uses. */
export type KeptRule = "pool-gone" | "pool-deleting" | "pool-changed" | ExclusionRule;

/** What is told about a Service that keeps what it holds but is not quite as asked. */
export interface Notice {
  rule: RefusalRule | KeptRule;
  reason: string;
}

export type Allocation =
  | {
      action: "allocate";
      /** kept: every address was held already; allocated: at least one is new. */
      rule: "kept" | "allocated";
      /** One per family of spec.ipFamilies that it holds, in its order: every family, unless it held some. */
      ips: string[];
      /** The pool of each address. */
      pools: string[];
      reason: string;
      /** Why an address the Service held was taken from it, when one was. */
      moved: string | undefined;
      /** What it keeps that would no longer be given, or what it asks and lacks (it keeps what it holds). */
      notices: Notice[];
    }
  | { action: "refuse"; rule: RefusalRule; reason: string; moved: string | undefined };

export interface AllocateInput {
  services: Iterable<L2ServiceFacts>;
  pools: readonly PoolFacts[];
  /** What the network uses (exclusions.ts): never handed out. */
  exclusions: ExclusionSet;
  served: ServedClasses;
}

export interface AllocateResult {
  /** Every Service of ours that is not being deleted. */
  services: Map<string, Allocation>;
  /** Each pool's addresses in use (Services being deleted still hold theirs). */
  used: Map<string, Set<string>>;
  /** Per pool: the addresses of it that Services keep though it would no longer give them, and why. */
  retained: Map<string, string[]>;
}

interface Holder {
  key: string;
  namespace: string;
  announcing: Announcing;
  sharingKey: string | undefined;
  ports: ServicePort[];
}

interface Held {
  ip: string;
  pool: string;
  /** The pool recorded for it (allocated-from), when it was held before this allocation. */
  recorded?: string;
}

interface Refusal {
  refuse: RefusalRule;
  reason: string;
}

const refusal = (refuse: RefusalRule, reason: string): Refusal => ({ refuse, reason });

type Step = { ok: Held } | Refusal;

/** Where a missing address comes from: the one requested, in its pool, or the lowest free one of these pools. */
type Source = { ip: string; pool: PoolFacts } | { family: IpFamily; candidates: PoolFacts[] };

/**
 * Whether two Services may hold one address: one namespace, one way of announcing, the same sharing key, and no
 * protocol/port in common.
 */
function compatible(a: Holder, b: Holder): boolean {
  if (!a.sharingKey || a.sharingKey !== b.sharingKey || a.namespace !== b.namespace) return false;
  if (a.announcing !== b.announcing) return false;
  return !a.ports.some((mine) => b.ports.some((theirs) => samePort(mine, theirs)));
}

const samePort = (a: ServicePort, b: ServicePort) => a.protocol === b.protocol && a.port === b.port;

export function allocate(input: AllocateInput): AllocateResult {
  const { pools, exclusions } = input;
  const ours = [...input.services].filter((facts) => isOurs(facts, input.served)).sort(byAge);
  const byName = [...pools].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const holders = new Map<string, Holder[]>();
  const held = new Map<string, Held[]>(); // Service key → what it holds
  const moved = new Map<string, string>();
  /** Per Service, each address kept though it would no longer be given: its pool, and why. */
  const keptNotes = new Map<string, { ip: string; pool: string; rule: KeptRule; detail: string }[]>();
  // Per pool and family, an address below which every one is held or excluded. Addresses are taken as the Services
  // go, oldest first, so the search for the lowest free one goes on from there: each address is looked at about once
  // per allocation, not once per Service (2,000 new Services took 0.6 s an allocation). A release forgets them.
  const heldBelow = new Map<string, bigint>();

  const hold = (facts: L2ServiceFacts, entry: Held) => {
    holders.set(entry.ip, [...(holders.get(entry.ip) ?? []), holderOf(facts, input.served)]);
    held.set(facts.key, [...(held.get(facts.key) ?? []), entry]);
  };
  const drop = (key: string, ip: string) => {
    heldBelow.clear();
    const rest = (holders.get(ip) ?? []).filter((holder) => holder.key !== key);
    if (rest.length) holders.set(ip, rest);
    else holders.delete(ip);
    held.set(key, (held.get(key) ?? []).filter((entry) => entry.ip !== ip));
  };
  const conflict = (facts: L2ServiceFacts, ip: string) => {
    const others = (holders.get(ip) ?? []).filter((other) => !compatible(holderOf(facts, input.served), other));
    return others.length ? others.map(({ key }) => key).join(", ") : undefined;
  };
  const admits = (pool: PoolFacts, facts: L2ServiceFacts) =>
    (pool.namespaces.length === 0 || pool.namespaces.includes(facts.namespace)) &&
    (pool.serviceSelector === undefined || matchesLabels(pool.serviceSelector, facts.labels));
  /** Pools this Service may draw from: sound, not being deleted, admitting it, the one it names if it names one. */
  const usable = (facts: L2ServiceFacts) =>
    byName.filter(
      (pool) =>
        pool.problem === undefined &&
        !pool.deleting &&
        (facts.pool === undefined || facts.pool === pool.name) &&
        admits(pool, facts),
    );

  /**
   * The pool a held address counts in, and why it would no longer be given to this Service, if so: the recorded
   * pool among those that would give it, else the first of them; else the recorded pool, gone or not (it stays
   * recorded), or for an address never recorded the first pool that holds it.
   */
  function placeHeld(facts: L2ServiceFacts, ip: string, recorded: string | undefined) {
    const { family, value } = ipNumber(ip) as { family: IpFamily; value: bigint };
    const excluded = exclusions.find(family, value);
    const because = excluded && { rule: excluded.rule, detail: `it ${excluded.reason}` };
    const giving = usable(facts).filter((pool) => poolHolds(pool, family, value));
    const pool = giving.find(({ name }) => name === recorded) ?? giving[0];
    if (pool) return { pool: pool.name, because };
    const holding = byName.filter((each) => poolHolds(each, family, value));
    const owner = recorded === undefined ? holding[0] : byName.find(({ name }) => name === recorded);
    if (!owner) {
      const detail = recorded ? `pool ${recorded} no longer exists` : "it is in no pool";
      return { pool: recorded ?? "", because: because ?? { rule: "pool-gone" as const, detail } };
    }
    const why = (rule: KeptRule, detail: string) => ({ pool: owner.name, because: because ?? { rule, detail } });
    const name = `pool ${owner.name}`;
    if (owner.deleting) return why("pool-deleting", `${name} is being deleted`);
    if (owner.problem !== undefined) return why("pool-changed", `${name} serves nothing: ${owner.problem}`);
    if (!poolHolds(owner, family, value)) return why("pool-changed", `${name} no longer offers it`);
    if (facts.pool !== undefined && facts.pool !== owner.name)
      return why("pool-changed", `the Service names pool ${facts.pool}`);
    return why("pool-changed", `${name} no longer admits the Service (its namespaces or serviceSelector)`);
  }

  // 1. Keep what is held, oldest first. An address this controller recorded stays while the Service exists,
  // whatever the pools became: a Warning and the pool's status say why it would no longer be given.
  for (const facts of ours) {
    const request = requestedIps(facts);
    const recorded = (facts.allocatedFrom ?? "").split(",");
    const families = new Set<IpFamily>();
    facts.ingress.forEach((text, index) => {
      const ip = ipNumber(text);
      if (!ip) return;
      const canonical = ipText(ip.family, ip.value);
      const recordedHere = Boolean(recorded[index]);
      const { pool, because } = placeHeld(facts, canonical, recorded[index] || undefined);
      const wanted = typeof request === "string" ? undefined : request.get(ip.family);
      // An address found in the status but never recorded (another controller's, before the Service was ours) is
      // kept only where it would be given.
      const why = facts.deleting
        ? undefined
        : families.has(ip.family) || !facts.ipFamilies.includes(ip.family)
          ? `${canonical} is of a family the Service no longer holds an address of`
          : recordedHere
            ? undefined
            : because
              ? `${canonical}: ${because.detail}`
              : wanted !== undefined && wanted !== canonical
                ? `${canonical} is not the address it requests`
                : undefined;
      const older = conflict(facts, canonical);
      const reason = why ?? (older ? `${canonical} is held by the older Service ${older}` : undefined);
      if (reason !== undefined) {
        moved.set(facts.key, reason);
        return;
      }
      families.add(ip.family);
      hold(facts, { ip: canonical, pool, recorded: recorded[index] || undefined });
      if (because && !facts.deleting)
        keptNotes.set(facts.key, [...(keptNotes.get(facts.key) ?? []), { ip: canonical, pool, ...because }]);
    });
  }

  // 2. Complete each Service, oldest first: a Service that holds nothing gets every family or nothing; one that
  // holds addresses keeps them, gets what it lacks where it can, and is told what it cannot have.
  const result = new Map<string, Allocation>();
  for (const facts of ours) {
    if (facts.deleting) continue;
    const outcome = complete(facts);
    const movedReason = moved.get(facts.key);
    if ("refuse" in outcome) {
      result.set(facts.key, { action: "refuse", rule: outcome.refuse, reason: outcome.reason, moved: movedReason });
      continue;
    }
    const all = held.get(facts.key) ?? [];
    const ordered = facts.ipFamilies.flatMap((family) => all.filter((entry) => familyOf(entry.ip) === family));
    const reason = ordered.map(({ ip, pool }) => `${ip} from pool ${pool}`).join(", ");
    const rule = outcome.added ? "allocated" : "kept";
    const ips = ordered.map(({ ip }) => ip);
    const pools = ordered.map(({ pool }) => pool);
    // What it kept and has just given up for what it asks is no longer told.
    const kept = (keptNotes.get(facts.key) ?? []).filter(({ ip }) => ips.includes(ip));
    keptNotes.set(facts.key, kept);
    const told = [
      ...kept.map(({ ip, rule, detail }) => ({
        rule,
        reason: `${ip} is kept while the Service exists, though ${detail}`,
      })),
      ...outcome.notices,
    ];
    const moves = outcome.moved ?? movedReason;
    result.set(facts.key, { action: "allocate", rule, ips, pools, reason, moved: moves, notices: told });
  }

  /**
   * Gives a Service what it lacks and what it requests instead of what it holds. What cannot change with other
   * Services (a bad request, no pool, an address outside the pools or excluded) is checked for every family before
   * what can (an address held, a pool exhausted): the reason a Service is told stays the same across restarts.
   */
  function complete(facts: L2ServiceFacts): { added: boolean; moved: string | undefined; notices: Notice[] } | Refusal {
    const kept = held.get(facts.key) ?? [];
    const keep = (problem: Refusal) =>
      kept.length ? { added: false, moved: undefined, notices: [notice(problem)] } : problem;
    const request = requestedIps(facts);
    if (typeof request === "string") return keep(refusal("bad-request", request));
    const pools = usable(facts);
    if (facts.pool !== undefined && !pools.some(({ name }) => name === facts.pool))
      return keep(refusal("no-pool", namedPoolProblem(facts, byName)));
    // A family is to be sourced when nothing of it is held, or the Service asks for another address or pool than
    // the one it got (its own edit: a pool's edit changes neither what it asks nor what was recorded).
    const wanted = facts.ipFamilies.flatMap((family) => {
      const mine = kept.find(({ ip }) => familyOf(ip) === family);
      const asked = request.get(family);
      const from = mine?.recorded ?? mine?.pool;
      const replace =
        mine && (asked !== undefined ? asked !== mine.ip : facts.pool !== undefined && facts.pool !== from);
      return !mine || replace ? [{ family, mine, asked }] : [];
    });
    const sources = wanted.map(({ family, mine, asked }) => {
      const why =
        asked !== undefined ? "is not the address it requests" : `is not of pool ${facts.pool}, which it names`;
      return { mine, why, source: sourceOf(facts, family, asked, pools) };
    });
    if (!kept.length) {
      const first = sources.find(({ source }) => "refuse" in source);
      if (first) return first.source as Refusal;
    }
    const added: Held[] = [];
    const replaced: { ip: string; why: string }[] = [];
    const told: Notice[] = [];
    for (const { mine, why, source } of sources) {
      const step =
        "refuse" in source ? source : "ip" in source ? requested(facts, source) : automatic(facts, source, added);
      if ("refuse" in step) {
        if (!kept.length) return step;
        told.push(notice(step));
        continue;
      }
      added.push(step.ok);
      if (mine) replaced.push({ ip: mine.ip, why });
    }
    // Only now: a Service that holds nothing takes nothing unless it gets every family.
    for (const { ip } of replaced) drop(facts.key, ip);
    for (const entry of added) hold(facts, entry);
    const movedReason = replaced.map(({ ip, why }) => `${ip} ${why}`).join("; ") || undefined;
    return { added: added.length > 0, moved: movedReason, notices: told };
  }

  /** Where a family's address may come from: the requested address's pool, or the pools to draw from. */
  function sourceOf(
    facts: L2ServiceFacts,
    family: IpFamily,
    wanted: string | undefined,
    pools: PoolFacts[],
  ): Source | Refusal {
    if (wanted !== undefined) {
      const number = ipNumber(wanted) as { family: IpFamily; value: bigint };
      const excluded = exclusions.find(number.family, number.value);
      if (excluded) return refusal(excluded.rule, `${wanted} ${excluded.reason}`);
      const pool = pools.find((each) => poolHolds(each, number.family, number.value));
      if (pool) return { ip: wanted, pool };
      return refusal("address-in-no-pool", `${wanted} is in no pool this Service may use`);
    }
    const candidates = pools.filter(
      (pool) => (facts.pool !== undefined || pool.autoAssign) && pool.ranges.some((range) => range.family === family),
    );
    if (!candidates.length) {
      const named = pools.find(({ name }) => name === facts.pool);
      const bad = named?.unservable.length ? `; pool ${named.name} cannot serve ${named.unservable.join("; ")}` : "";
      return refusal("no-pool", `no pool offers ${family} addresses to this Service${bad}`);
    }
    return { family, candidates };
  }

  function requested(facts: L2ServiceFacts, { ip, pool }: { ip: string; pool: PoolFacts }): Step {
    const others = holders.get(ip) ?? [];
    const sharer = others.find((other) => other.sharingKey !== undefined && other.sharingKey === facts.sharingKey);
    const foreign = sharer && others.find((other) => other.namespace !== facts.namespace);
    if (foreign)
      return refusal(
        "sharing-namespace",
        `${ip} is shared under key ${facts.sharingKey} by Services of namespace ${foreign.namespace} only, ` +
          `not ${facts.namespace}`,
      );
    const mine = announcing(facts, input.served);
    const otherClass = sharer && others.find((other) => other.announcing !== mine);
    if (otherClass)
      return refusal(
        "sharing-class",
        `${ip} is shared under key ${facts.sharingKey} by ${otherClass.key}, announced ` +
          `${otherClass.announcing === "every-node" ? "over BGP" : "over layer 2"}: ` +
          "an l2 and a bgp Service never share",
      );
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

  /** The pool's lowest address of the family that is neither held, excluded nor `taken`. */
  function lowestFree(pool: PoolFacts, family: IpFamily, taken: ReadonlySet<string>): string | undefined {
    const cursor = `${pool.name}/${family}`;
    const from = heldBelow.get(cursor) ?? -1n;
    for (const range of pool.ranges) {
      if (range.family !== family || range.last < from) continue;
      for (let value = from > range.first ? from : range.first; value <= range.last; value++) {
        const excluded = exclusions.find(family, value);
        if (excluded) {
          value = excluded.last; // a Service CIDR inside a pool is passed over at once
          heldBelow.set(cursor, value);
          continue;
        }
        if (pool.avoidBuggyIps && isBuggyIp(family, value)) continue;
        const ip = ipText(family, value);
        if (holders.has(ip)) continue;
        heldBelow.set(cursor, value); // never lower: the search started there
        if (!taken.has(ip)) return ip;
      }
    }
    return undefined;
  }

  /** The lowest address of a candidate pool held under this Service's sharing key, if it may join its holders. */
  function sharedAddress(facts: L2ServiceFacts, family: IpFamily, pools: PoolFacts[], taken: Set<string>) {
    const me = holderOf(facts, input.served);
    let best: { held: Held; value: bigint } | undefined;
    for (const [ip, others] of holders) {
      const number = ipNumber(ip);
      if (!number || number.family !== family || taken.has(ip)) continue;
      if (exclusions.find(family, number.value) || !others.every((other) => compatible(me, other))) continue;
      const pool = pools.find((each) => poolHolds(each, family, number.value));
      if (pool && (!best || number.value < best.value)) best = { held: { ip, pool: pool.name }, value: number.value };
    }
    return best?.held;
  }

  const retained = new Map<string, string[]>();
  for (const [key, notes] of keptNotes)
    for (const { ip, pool, detail } of notes)
      if (byName.some(({ name }) => name === pool))
        retained.set(pool, [...(retained.get(pool) ?? []), `${ip} (Service ${key}): ${detail}`]);
  const used = new Map<string, Set<string>>(pools.map(({ name }) => [name, new Set<string>()]));
  for (const entries of held.values()) for (const { ip, pool } of entries) used.get(pool)?.add(ip);
  return { services: result, used, retained };
}

const holderOf = (facts: L2ServiceFacts, served: ServedClasses): Holder => ({
  key: facts.key,
  namespace: facts.namespace,
  announcing: announcing(facts, served),
  sharingKey: facts.sharingKey,
  ports: facts.ports,
});

const familyOf = (ip: string): IpFamily => (ip.includes(":") ? "IPv6" : "IPv4");

const notice = ({ refuse, reason }: Refusal): Notice => ({ rule: refuse, reason });

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
  const annotation = facts.readFrom?.requestedIps ?? REQUESTED_IPS_ANNOTATION;
  const source = facts.requestedIps !== undefined ? `annotation ${annotation}` : "spec.loadBalancerIP";
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
  const named = `annotation ${facts.readFrom?.pool ?? POOL_ANNOTATION}: pool ${facts.pool}`;
  if (!pool) return `${named} does not exist`;
  if (pool.problem !== undefined) return `${named} serves nothing: ${pool.problem}`;
  if (pool.deleting) return `${named} is being deleted`;
  return `${named} does not admit this Service (its namespaces or serviceSelector)`;
}
