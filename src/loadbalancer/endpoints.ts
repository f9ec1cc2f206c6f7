// An EndpointSlice as the LoadBalancer controllers read it, for externalTrafficPolicy Local: which Service it
// belongs to and which nodes hold a ready endpoint of it; ReadyEndpoints keeps them per Service. `ready` is read
// as kube-proxy reads it (pkg/proxy/endpointslicecache.go: unset counts as ready), since kube-proxy decides where
// Local traffic lands.
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { objectKey } from "../kube/informer.ts";

/** The label by which the EndpointSlice controller ties a slice to its Service. */
export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";

export interface EndpointSliceFacts {
  /** namespace/name of the slice. */
  key: string;
  /** namespace/name of its Service. */
  service: string;
  /** Sorted, each once. */
  readyNodes: string[];
}

export function endpointSliceFacts(slice: EndpointSlice): EndpointSliceFacts {
  const { namespace, labels } = slice.metadata ?? {};
  const nodes = new Set<string>();
  for (const { nodeName, conditions } of slice.endpoints ?? [])
    if (nodeName && conditions?.ready !== false) nodes.add(nodeName);
  return {
    key: objectKey(slice),
    service: `${namespace}/${labels?.[SERVICE_NAME_LABEL] ?? ""}`,
    readyNodes: [...nodes].sort(),
  };
}

/** The nodes with a ready endpoint of each Service, kept from EndpointSlice events. */
export class ReadyEndpoints {
  private readonly slices = new Map<string, EndpointSliceFacts>();
  /** Service key → its slices' keys. */
  private readonly slicesOf = new Map<string, Set<string>>();

  /** Takes in a slice (gone when `deleted`); returns the Services whose ready nodes may have changed. */
  update(facts: EndpointSliceFacts, deleted: boolean): string[] {
    const before = this.slices.get(facts.key);
    if (deleted) this.slices.delete(facts.key);
    else this.slices.set(facts.key, facts);
    if (before && before.service !== facts.service) this.slicesOf.get(before.service)?.delete(facts.key);
    const keys = this.slicesOf.get(facts.service) ?? new Set<string>();
    if (deleted) keys.delete(facts.key);
    else keys.add(facts.key);
    if (keys.size) this.slicesOf.set(facts.service, keys);
    else this.slicesOf.delete(facts.service);
    const ready = deleted ? [] : facts.readyNodes;
    if (before && before.service === facts.service && before.readyNodes.join() === ready.join()) return [];
    return [...new Set([facts.service, before?.service ?? facts.service])];
  }

  readyNodes(service: string): Set<string> {
    const nodes = new Set<string>();
    for (const key of this.slicesOf.get(service) ?? [])
      for (const node of this.slices.get(key)?.readyNodes ?? []) nodes.add(node);
    return nodes;
  }
}
