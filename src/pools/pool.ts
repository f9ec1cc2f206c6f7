// The LoadBalancerIPPool resource (charts/local-ccm/crds/) as the allocator reads it: its address ranges merged
// per pool, which Services may draw from it (serviceSelector, namespaces, autoAssign), and what is wrong with it.
// The apiserver's CEL rules refuse malformed entries; a reversed range, or a pool written where those rules do not
// run, is caught here, and such a pool serves nothing (its status says why).
import type { LabelSelector as KubeLabelSelector } from "kubernetes-types/meta/v1.js";
import type { KubeObject, ResourceRef } from "../kube/resource.ts";
import type { LabelSelector, Operator, Requirement } from "../kube/labelselector.ts";
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
  };
  status?: PoolStatus;
}

/** Sizes as decimal strings: an IPv6 pool's size exceeds what an int64 (and a JSON number read by JS) holds. */
export interface PoolStatus {
  size: string;
  used: string;
  free: string;
  conflicts: string[];
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
  /** Why the pool serves nothing (a bad entry or selector); undefined when it may serve. */
  problem: string | undefined;
}

const OPERATORS: Record<string, Operator> = { In: "in", NotIn: "notin", Exists: "exists", DoesNotExist: "!" };

/** A metav1.LabelSelector as the text selectors' requirements (the same matching rules); a reason when it is bad. */
export function labelSelectorFrom(selector: KubeLabelSelector): LabelSelector | string {
  const requirements: Requirement[] = Object.entries(selector.matchLabels ?? {}).map(([key, value]) => ({
    key,
    operator: "=",
    values: [value],
  }));
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    const mapped = OPERATORS[operator];
    if (!mapped) return `serviceSelector: unknown operator ${JSON.stringify(operator)}`;
    requirements.push({ key, operator: mapped, values });
  }
  return { text: JSON.stringify(selector), requirements };
}

export function poolFacts(pool: LoadBalancerIPPool): PoolFacts {
  const { addresses = [], serviceSelector, namespaces = [], autoAssign = true, avoidBuggyIPs = false } =
    pool.spec ?? {};
  const parsed = addresses.map(parseAddressEntry);
  const selector = serviceSelector ? labelSelectorFrom(serviceSelector) : undefined;
  const problems = [
    ...parsed.filter((entry) => typeof entry === "string"),
    ...(typeof selector === "string" ? [selector] : []),
    ...(addresses.length ? [] : ["spec.addresses is empty"]),
  ];
  return {
    name: pool.metadata?.name ?? "",
    ranges: mergeRanges(parsed.filter((entry) => typeof entry !== "string")),
    serviceSelector: typeof selector === "string" ? undefined : selector,
    namespaces,
    autoAssign,
    avoidBuggyIps: avoidBuggyIPs,
    problem: problems.length ? problems.join("; ") : undefined,
  };
}
