// The LoadBalancerIPPool resource (charts/local-ccm/crds/) as the allocator reads it: its address ranges merged
// per pool, which Services may draw from it (serviceSelector, namespaces, autoAssign), and what is wrong with it.
// The apiserver's CEL rules refuse malformed entries; one written where those rules do not run (an older CRD) is
// caught here, and only that entry is not served: the pool's other entries are (its status says why). A pool
// being deleted serves no new allocation; it is kept (POOL_FINALIZER) until no Service holds an address of it.
import type { LabelSelector as KubeLabelSelector } from "kubernetes-types/meta/v1.js";
import type { KubeObject, ResourceRef } from "../kube/resource.ts";
import { type LabelSelector, labelSelectorFrom } from "../kube/labelselector.ts";
import { type AddressRange, mergeRanges, parseAddressEntry } from "./ranges.ts";

export const POOL_RESOURCE: ResourceRef = { group: "local-ccm.io", version: "v1alpha1", plural: "loadbalancerippools" };
/** What a created pool's body names (the apiserver needs it for a custom resource). */
export const POOL_TYPE = { apiVersion: "local-ccm.io/v1alpha1", kind: "LoadBalancerIPPool" } as const;

export interface LoadBalancerIPPool extends KubeObject {
  spec?: {
    addresses?: string[];
    serviceSelector?: KubeLabelSelector;
    namespaces?: string[];
    autoAssign?: boolean;
    avoidBuggyIPs?: boolean;
    /** For Services of class local-ccm.io/bgp: what the speaker attaches to the routes (communities "AA:NN"). */
    bgp?: { communities?: string[]; localPref?: number };
  };
  status?: PoolStatus;
}

/** On every pool this controller serves: removed once no Service holds an address of a pool being deleted. */
export const POOL_FINALIZER = "local-ccm.io/pool-protection";

/** metav1.Condition. */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

/** Sizes as decimal strings: an IPv6 pool's size exceeds what an int64 (and a JSON number read by JS) holds. */
export interface PoolStatus {
  size: string;
  used: string;
  free: string;
  conflicts: string[];
  /** Addresses Services keep (never moved while they exist) that the pool would no longer give them, and why. */
  retained?: string[];
  conditions?: Condition[];
}

export interface PoolFacts {
  name: string;
  /** Merged, sorted by family then address. */
  ranges: AddressRange[];
  /** Undefined: every Service. */
  serviceSelector: LabelSelector | undefined;
  /** Empty: every namespace. */
  namespaces: string[];
  autoAssign: boolean;
  avoidBuggyIps: boolean;
  /** Why the pool serves nothing (a bad selector, no entries); undefined when it may serve. */
  problem: string | undefined;
  /** Why each bad spec.addresses entry is not served (the others are). */
  unservable: string[];
  /** Being deleted: no new allocation from it. */
  deleting: boolean;
  /** Whether it carries POOL_FINALIZER. */
  finalizer: boolean;
  generation: number | undefined;
}

export function poolFacts(pool: LoadBalancerIPPool): PoolFacts {
  const { addresses = [], serviceSelector, namespaces = [], autoAssign = true, avoidBuggyIPs = false } =
    pool.spec ?? {};
  const parsed = addresses.map(parseAddressEntry);
  const selector = serviceSelector ? labelSelectorFrom(serviceSelector, "serviceSelector") : undefined;
  const problems = [
    ...(typeof selector === "string" ? [selector] : []),
    ...(addresses.length ? [] : ["spec.addresses is empty"]),
  ];
  const metadata = pool.metadata ?? {};
  return {
    name: metadata.name ?? "",
    ranges: mergeRanges(parsed.filter((entry) => typeof entry !== "string")),
    serviceSelector: typeof selector === "string" ? undefined : selector,
    namespaces,
    autoAssign,
    avoidBuggyIps: avoidBuggyIPs,
    problem: problems.length ? problems.join("; ") : undefined,
    unservable: parsed.filter((entry) => typeof entry === "string"),
    deleting: Boolean(metadata.deletionTimestamp),
    finalizer: (metadata.finalizers ?? []).includes(POOL_FINALIZER),
    generation: metadata.generation,
  };
}
