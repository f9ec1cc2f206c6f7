// An EndpointSlice as the service controller reads it, for externalTrafficPolicy Local: which Service it belongs
// to and which nodes hold a ready endpoint of it. `ready` is read as kube-proxy reads it
// (pkg/proxy/endpointslicecache.go: unset counts as ready), since kube-proxy decides where Local traffic lands.
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
