// `node-lifecycle-controller release-all`: the chart's post-delete hook. Once the release's controllers are deleted
// and their Lease is free (no replica can write any more, whether it stopped, crashed or was never running), it
// removes our load-balancer-cleanup finalizer from the Services that are surely ours (release.ts) and the
// pool-protection finalizer from every pool, so that deleting them afterwards never hangs. Status, annotations and
// addresses stay: installed again, the controllers find every Service's address where they left it.
//
// It takes the program's own flags (the chart passes the Deployment's), of which it reads the Lease's name and
// namespace, leader election, logging and the kubeconfig.
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { createLogger, type Logger } from "../cli/log.ts";
import type { MainContext } from "../cli/main.ts";
import { KubeClient } from "../kube/client.ts";
import { loadClientConfig } from "../kube/config.ts";
import { isApiError } from "../kube/errors.ts";
import { objectKey } from "../kube/informer.ts";
import { leaseResource, NODE_RESOURCE, Resource, SERVICE_RESOURCE } from "../kube/resource.ts";
import { LB_FINALIZER } from "../loadbalancer/service.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER, POOL_RESOURCE } from "../pools/pool.ts";
import { sleep } from "../time/backoff.ts";
import { type LeaderElectionFlags, PROGRAM, parseManagerFlags } from "./flags.ts";
import { leaseFree, releaseDecision } from "./release.ts";

export const RELEASE_ALL = "release-all";

const POLL_MS = 1000;
/** A pass that met a concurrent change (Conflict) runs again from fresh lists, this many times at most. */
const MAX_PASSES = 5;

type Written = "released" | "changed";

export async function runReleaseAll(ctx: MainContext): Promise<void> {
  const flags = parseManagerFlags(ctx.argv, ctx.env);
  ctx.setVerbosity(flags.verbosity);
  const log = createLogger({ verbosity: flags.verbosity, format: flags.logFormat });
  const clientConfig = await loadClientConfig({ kubeconfig: flags.kubeconfig || undefined, env: ctx.env });
  const client = new KubeClient(clientConfig, { component: `${PROGRAM}-${RELEASE_ALL}` });
  ctx.onShutdown(() => client.close());

  if (flags.leaderElection.enabled) {
    if (!(await ctx.unlessStopped(untilLeaseFree(client, flags.leaderElection, log, ctx.signal)))) return;
  } else {
    // Without a Lease nothing tells when the last replica stopped: one still running adds its finalizers again.
    log.warn("leader election is off: releasing without waiting for the controllers to stop");
  }
  for (let pass = 1; ; pass++) {
    const changed = await releasePass(client, log);
    if (changed === 0) return;
    if (pass === MAX_PASSES) throw new Error(`${changed} objects kept changing while being released; run it again`);
    log.info("objects changed while being released; another pass", { changed });
  }
}

/** Polls the controllers' Lease until it is free (release.ts, leaseFree). */
async function untilLeaseFree(
  client: KubeClient,
  { resourceName, resourceNamespace }: LeaderElectionFlags,
  log: Logger,
  signal: AbortSignal,
): Promise<void> {
  const leases = new Resource<Lease>(client, leaseResource(resourceNamespace));
  let seen: { spec: string; at: number } | undefined;
  for (;;) {
    let lease: Lease | undefined;
    try {
      lease = await leases.get(resourceName, { signal });
    } catch (err) {
      if (!isApiError(err, "NotFound")) throw err;
    }
    const spec = JSON.stringify(lease?.spec ?? {});
    if (seen?.spec !== spec) seen = { spec, at: performance.now() };
    if (leaseFree(lease?.spec, performance.now() - seen.at)) {
      log.info("the controllers' Lease is free", { lease: `${resourceNamespace}/${resourceName}` });
      return;
    }
    log.v(1)?.("waiting for the controllers' Lease", { holder: lease?.spec?.holderIdentity });
    await sleep(POLL_MS, signal);
    if (signal.aborted) return;
  }
}

/** One pass over every Service and pool; the number of objects that changed meanwhile (to be seen again). */
async function releasePass(client: KubeClient, log: Logger): Promise<number> {
  const nodes = await new Resource<Node>(client, NODE_RESOURCE).list();
  const nodeAddresses = new Set(nodes.items.flatMap((node) => (node.status?.addresses ?? []).map((a) => a.address)));
  const services = await new Resource<Service>(client, SERVICE_RESOURCE).list();
  let changed = 0;
  for (const service of services.items) {
    const decision = releaseDecision(service, (ip) => nodeAddresses.has(ip));
    if (decision.rule === "no-finalizer") continue;
    const fields = { service: objectKey(service), rule: decision.rule, reason: decision.reason };
    if (!decision.release) {
      log.info("kept the finalizer of a Service not surely ours", fields);
      continue;
    }
    const resource = new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace: service.metadata?.namespace });
    const result = await removeFinalizer(resource, service, LB_FINALIZER);
    if (result === "released") log.info("released Service", fields);
    else changed++;
  }
  const pools = await new Resource<LoadBalancerIPPool>(client, POOL_RESOURCE).list().catch((err: unknown) => {
    // The CRD is the chart's (crds/): gone only when someone deleted it, and with it every pool.
    if (isApiError(err, "NotFound")) return { items: [] };
    throw err;
  });
  for (const pool of pools.items) {
    if (!(pool.metadata?.finalizers ?? []).includes(POOL_FINALIZER)) continue;
    const result = await removeFinalizer(new Resource(client, POOL_RESOURCE), pool, POOL_FINALIZER);
    if (result === "released") log.info("released pool", { pool: pool.metadata?.name });
    else changed++;
  }
  return changed;
}

/**
 * Removes one finalizer, pinned to the version read (the controllers' patch style): a finalizer list someone
 * changed meanwhile is never overwritten, the object is read again on the next pass. Gone counts as released.
 */
async function removeFinalizer<T extends Service | LoadBalancerIPPool>(
  resource: Resource<T>,
  object: T,
  finalizer: string,
): Promise<Written> {
  const { name = "", resourceVersion, finalizers = [] } = object.metadata ?? {};
  try {
    await resource.patch(name, "json", [
      { op: "replace", path: "/metadata/resourceVersion", value: resourceVersion },
      { op: "replace", path: "/metadata/finalizers", value: finalizers.filter((each) => each !== finalizer) },
    ]);
    return "released";
  } catch (err) {
    if (isApiError(err, "NotFound")) return "released";
    if (isApiError(err, "Conflict")) return "changed";
    throw new Error(`removing ${finalizer} from ${name}: ${(err as Error).message}`, { cause: err });
  }
}
