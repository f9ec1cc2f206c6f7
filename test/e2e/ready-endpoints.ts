// Whether a Service had a ready endpoint, as a poll of its EndpointSlices saw it. After a long kube-apiserver outage
// kube-controller-manager, its own view as stale, may mark the Nodes Ready=Unknown for a few seconds, and every pod on
// them NotReady (its node lifecycle controller's MarkPodsNotReady) until their kubelets correct it: while the Service
// has no ready endpoint, kube-proxy rejects its connections on every address. That is upstream's data path, not
// ours: the outage tests let a request fail only then.
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import type { Cluster } from "../../localcluster/cluster.ts";
import { sleep } from "../../src/time/backoff.ts";

/** The Service's ready endpoints at one poll. */
export interface ReadySample {
  atMs: number;
  ready: number;
}

/** kube-proxy applies an EndpointSlice change within a second or so; a request's connect attempt lasts up to 5 s. */
const PROXY_LAG_MS = 6000;

/** Polls the Service's EndpointSlices four times a second (a poll the API does not answer records nothing). */
export function sampleReadyEndpoints(cluster: Cluster, service: string, namespace = "default") {
  const samples: ReadySample[] = [];
  const path = `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices?labelSelector=` +
    encodeURIComponent(`kubernetes.io/service-name=${service}`);
  let on = true;
  const polling = (async () => {
    while (on) {
      const slices = await cluster.admin
        .request<{ items: EndpointSlice[] }>({ method: "GET", path })
        .catch(() => undefined); // the API is away
      // A slice with no endpoint has none in its JSON, though the type says an array.
      const endpoints = slices?.items.flatMap((slice) => (slice.endpoints as EndpointSlice["endpoints"] | null) ?? []);
      const ready = endpoints?.filter((endpoint) => endpoint.conditions?.ready !== false).length;
      if (ready !== undefined) samples.push({ atMs: Date.now(), ready });
      await sleep(250);
    }
  })();
  return {
    async stop(): Promise<ReadySample[]> {
      on = false;
      await polling;
      return samples;
    },
  };
}

/** The polls that found no ready endpoint. */
export const unready = (samples: readonly ReadySample[]) => samples.filter((sample) => sample.ready === 0);

/** Whether a request started at `startedMs` may have met kube-proxy without a ready endpoint. */
export const startedWhileUnready = (samples: readonly ReadySample[], startedMs: number) =>
  unready(samples).some(({ atMs }) => atMs - 1000 <= startedMs && startedMs <= atMs + PROXY_LAG_MS);
