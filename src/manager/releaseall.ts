// `node-lifecycle-controller release-all`: the chart's post-delete hook. Once the release's controllers are deleted,
// it takes their Lease as one more candidate would (the leader elector: a stopped or crashed leader's Lease is taken
// only after it has not changed for its whole duration), so no replica can write while it works, and it removes our load-balancer-cleanup finalizer from the Services that are surely ours (release.ts) and the
// pool-protection finalizer from every pool, so that deleting them afterwards never hangs. Status, annotations and
// addresses stay: installed again, the controllers find every Service's address where they left it.
//
// It takes the program's own flags (the chart passes the Deployment's), of which it reads the Lease's name and
// namespace, leader election, logging and the kubeconfig.
import { hostname } from "node:os";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { createLogger, type Logger } from "../cli/log.ts";
import type { MainContext } from "../cli/main.ts";
import { KubeClient } from "../kube/client.ts";
import { loadClientConfig } from "../kube/config.ts";
import { isApiError } from "../kube/errors.ts";
import { objectKey } from "../kube/informer.ts";
import { LeaderElector } from "../kube/leaderelection.ts";
import { leaseResource, NODE_RESOURCE, Resource, SERVICE_RESOURCE } from "../kube/resource.ts";
import { LB_FINALIZER } from "../loadbalancer/service.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER, POOL_RESOURCE } from "../pools/pool.ts";
import { type LeaderElectionFlags, PROGRAM, parseManagerFlags } from "./flags.ts";
import { releaseDecision } from "./release.ts";

export const RELEASE_ALL = "release-all";
export const RELEASE_ALL_HELP =
  "The chart's post-delete hook: once the controllers are gone, remove our finalizers from Services and pools.";

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

  const release = (signal?: AbortSignal) => releaseAll(client, log, signal);
  if (!flags.leaderElection.enabled) {
    // Without a Lease nothing tells when the last replica stopped: one still running adds its finalizers again.
    log.warn("leader election is off: releasing without waiting for the controllers to stop");
    return release();
  }
  const { resourceName, resourceNamespace } = flags.leaderElection;
  const lease = await new Resource<Lease>(client, leaseResource(resourceNamespace)).get(resourceName).catch((err) => {
    if (isApiError(err, "NotFound")) return undefined;
    throw err;
  });
  // No Lease: no controller of this release ever led (the hook may not create one: its RBAC names this Lease only).
  if (!lease) return release();
  await ctx.unlessStopped(whileLeading(client, flags.leaderElection, log, ctx.signal, release));
}

/**
 * Runs `work` while holding the controllers' Lease, then gives it back. Leadership lost midway aborts the work, and
 * it runs again from fresh lists once the Lease is ours again (every pass is safe to repeat).
 */
async function whileLeading(
  client: KubeClient,
  flags: LeaderElectionFlags,
  log: Logger,
  signal: AbortSignal,
  work: (signal: AbortSignal) => Promise<void>,
): Promise<void> {
  const done = new AbortController();
  let outcome: Promise<void> = Promise.resolve();
  const lease = `${flags.resourceNamespace}/${flags.resourceName}`;
  const elector = new LeaderElector(client, {
    lease: { name: flags.resourceName, namespace: flags.resourceNamespace },
    identity: `${PROGRAM}-${RELEASE_ALL}_${hostname()}_${process.pid}`,
    leaseDurationMs: flags.leaseDurationMs,
    renewDeadlineMs: flags.renewDeadlineMs,
    retryPeriodMs: flags.retryPeriodMs,
    onStartedLeading: (leading) => {
      log.info("holding the controllers' Lease", { lease });
      outcome = work(leading).then(
        () => done.abort(),
        (err: unknown) => {
          if (leading.aborted && !signal.aborted) return; // lost the Lease: the elector campaigns again
          done.abort();
          throw err;
        },
      );
    },
    onStoppedLeading: () => undefined,
    onNewLeader: (holder) => log.v(1)?.("waiting for the controllers' Lease", { holder }),
    onError: (err) => log.v(1)?.("the controllers' Lease is not ours yet", { err }),
  });
  await elector.run(AbortSignal.any([signal, done.signal])); // gives the Lease back when done
  await outcome;
}

/** Releases every Service and pool, passes from fresh lists until one meets no concurrent change. */
async function releaseAll(client: KubeClient, log: Logger, signal?: AbortSignal): Promise<void> {
  for (let pass = 1; ; pass++) {
    const changed = await releasePass(client, log, signal);
    if (changed === 0) return;
    if (pass === MAX_PASSES) throw new Error(`${changed} objects kept changing while being released; run it again`);
    log.info("objects changed while being released; another pass", { changed });
  }
}

/** One pass over every Service and pool; the number of objects that changed meanwhile (to be seen again). */
async function releasePass(client: KubeClient, log: Logger, signal?: AbortSignal): Promise<number> {
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
    const result = await removeFinalizer(resource, service, LB_FINALIZER, signal);
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
    const result = await removeFinalizer(new Resource(client, POOL_RESOURCE), pool, POOL_FINALIZER, signal);
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
  signal?: AbortSignal,
): Promise<Written> {
  const { name = "", resourceVersion, finalizers = [] } = object.metadata ?? {};
  try {
    await resource.patch(name, "json", [
      { op: "replace", path: "/metadata/resourceVersion", value: resourceVersion },
      { op: "replace", path: "/metadata/finalizers", value: finalizers.filter((each) => each !== finalizer) },
    ], { signal });
    return "released";
  } catch (err) {
    if (isApiError(err, "NotFound")) return "released";
    if (isApiError(err, "Conflict")) return "changed";
    throw new Error(`removing ${finalizer} from ${name}: ${(err as Error).message}`, { cause: err });
  }
}
