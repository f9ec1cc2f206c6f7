// The node-lifecycle-controller program: flags → API client → one informer on all nodes → leader
// election → reconcile loop, with health and metrics served beside it. SIGTERM stops the loop
// first (no DELETE after that), then releases the lease, stops the watch and closes the client.
import { randomBytes } from "node:crypto";
import os from "node:os";
import type { Node } from "kubernetes-types/core/v1.js";
import { startHealthServer } from "../cli/health.ts";
import { createLogger, type Logger } from "../cli/log.ts";
import type { MainContext } from "../cli/main.ts";
import { sleep } from "../kube/backoff.ts";
import { KubeClient } from "../kube/client.ts";
import { loadClientConfig } from "../kube/config.ts";
import { isApiError } from "../kube/errors.ts";
import { EventRecorder } from "../kube/events.ts";
import { Informer } from "../kube/informer.ts";
import { LeaderElector } from "../kube/leaderelection.ts";
import { Resource } from "../kube/resource.ts";
import { probeNode } from "../net/probe.ts";
import { Controller, nodeTransform } from "./controller.ts";
import type { LifecycleConfig } from "./decide.ts";
import { type LifecycleFlags, PROGRAM, parseLifecycleFlags } from "./flags.ts";
import { createMetrics } from "./metrics.ts";

/** How long shutdown waits for queued Events before it closes the client. */
const EVENT_FLUSH_MS = 5_000;

function lifecycleConfig(flags: LifecycleFlags): LifecycleConfig {
  return {
    ...(flags.nodeSelector ? { nodeSelector: flags.nodeSelector } : {}),
    watchAutoscalerTaint: flags.watchAutoscalerTaint,
    protectedLabels: flags.protectedLabels,
    protectedAnnotations: flags.protectedAnnotations,
    notReadyTimeoutMs: flags.notReadyTimeoutMs,
    maxDeletionsPerMinute: flags.maxDeletionsPerMinute,
    unhealthyThreshold: flags.unhealthyThreshold,
  };
}

/** As client-go's: the pod (or host) name and a random part, so a restarted pod is a new candidate. */
function leaderIdentity(env: NodeJS.ProcessEnv): string {
  return `${env.POD_NAME || os.hostname()}_${randomBytes(4).toString("hex")}`;
}

/** Errors are logged at once; a lost race for the lease (Conflict) is routine and logged at --v=2. */
function logLeaseError(log: Logger, err: unknown): void {
  if (isApiError(err, "Conflict")) log.v(2)?.("leader election: lease changed meanwhile", { err });
  else log.error("leader election failed", { err });
}

export async function runLifecycleController(ctx: MainContext): Promise<void> {
  const flags = parseLifecycleFlags(ctx.argv, ctx.env);
  ctx.setVerbosity(flags.verbosity);
  const log = createLogger({ verbosity: flags.verbosity, format: flags.logFormat });
  const config = lifecycleConfig(flags);
  const clientConfig = await loadClientConfig({ kubeconfig: flags.kubeconfig || undefined, env: ctx.env });
  const identity = leaderIdentity(ctx.env);
  ctx.signal.addEventListener("abort", () => log.info("shutting down"));

  // Each part registers its stop right after it starts: they run in reverse (see cli/main.ts), so the
  // loop stops first (no DELETE after that), then the lease is released, the watch stopped, Events
  // flushed, health closed, and the client closed last.
  const metrics = createMetrics();
  const client = new KubeClient(clientConfig, {
    component: PROGRAM,
    onResponse: (verb, code) => metrics.apiRequests.with({ verb, code }).inc(),
  });
  ctx.onShutdown(() => client.close());
  const nodes = new Resource<Node>(client, { group: "", version: "v1", plural: "nodes" });
  const informer = new Informer(nodes, {
    transform: nodeTransform(config),
    onError: (err) => log.error("watching nodes failed", { err }),
  });
  if (flags.healthBindAddress) {
    const health = await startHealthServer({
      address: flags.healthBindAddress,
      metrics: metrics.registry,
      ready: () =>
        informer.hasSynced() ? { ok: true } : { ok: false, reason: "node cache not synced yet" },
    });
    ctx.onShutdown(() => health.close());
    log.info("serving /healthz, /readyz and /metrics", { address: health.address });
  }
  const events = new EventRecorder(client, {
    component: PROGRAM,
    host: identity,
    onError: (err) => log.error("recording an event failed", { err }),
  });
  ctx.onShutdown(() => Promise.race([events.flush(), sleep(EVENT_FLUSH_MS)]));

  const { leaderElection } = flags;
  let elector: LeaderElector | undefined;
  const controller = new Controller({
    config,
    reconcileIntervalMs: flags.reconcileIntervalMs,
    dryRun: flags.dryRun,
    cache: informer,
    nodes,
    probe: (addresses, signal) =>
      probeNode(addresses, {
        icmp: flags.probes.includes("icmp"),
        tcp: flags.probes.includes("tcp"),
        pingCount: flags.pingCount,
        pingTimeoutMs: flags.pingTimeoutMs,
        kubeletPort: flags.kubeletPort,
        signal,
      }),
    isLeader: () => elector?.isLeader() ?? true,
    events,
    log,
    metrics: metrics.nodeLifecycle,
  });
  informer.addHandlers(controller.handlers);
  if (leaderElection.enabled) {
    elector = new LeaderElector(client, {
      lease: { name: leaderElection.resourceName, namespace: leaderElection.resourceNamespace },
      identity,
      leaseDurationMs: leaderElection.leaseDurationMs,
      renewDeadlineMs: leaderElection.renewDeadlineMs,
      retryPeriodMs: leaderElection.retryPeriodMs,
      onStartedLeading: () => {
        metrics.leader.set(1);
        log.info("started leading", { identity });
        controller.trigger();
      },
      onStoppedLeading: () => {
        metrics.leader.set(0);
        log.info("stopped leading", { identity });
      },
      onNewLeader: (leader) => log.v(1)?.("leader elected", { leader }),
      onError: (err) => logLeaseError(log, err),
    });
  } else {
    metrics.leader.set(1);
  }

  log.info("starting", {
    server: clientConfig.server,
    identity,
    leaderElect: leaderElection.enabled,
    dryRun: flags.dryRun,
  });
  informer.start();
  ctx.onShutdown(() => informer.stop());
  await Promise.race([informer.waitForSync(), ctx.untilStopped()]);
  if (ctx.signal.aborted) return;
  log.info("node cache synced", { nodes: informer.list().length });
  // Candidates campaign only with a full cache, so that a new leader decides from all nodes at once.
  if (elector) ctx.onShutdown(campaign(elector));
  controller.start();
  ctx.onShutdown(() => controller.stop()); // waits for checks in flight: a DELETE already sent completes
  await ctx.untilStopped();
}

/** Runs the elector until the returned hook, which releases the lease so a successor need not wait. */
function campaign(elector: LeaderElector): () => Promise<void> {
  const resign = new AbortController();
  const running = elector.run(resign.signal);
  return () => {
    resign.abort();
    return running;
  };
}
