// The node-lifecycle-controller program: flags → API client → the controllers --controllers names, each
// created from its definition (registry.ts) on shared informers (one watch per resource) → leader election,
// with health and metrics served beside them. SIGTERM stops the controllers first (no write after that), then
// releases the lease, stops the watches, flushes Events and closes the client.
import { randomBytes } from "node:crypto";
import os from "node:os";
import { createLogger, type Logger } from "../cli/log.ts";
import type { MainContext } from "../cli/main.ts";
import { startEndpoints } from "../cli/serving.ts";
import { KubeClient } from "../kube/client.ts";
import { loadClientConfig } from "../kube/config.ts";
import { isApiError } from "../kube/errors.ts";
import { EventRecorder } from "../kube/events.ts";
import { LeaderElector } from "../kube/leaderelection.ts";
import { SharedInformers } from "../kube/sharedinformers.ts";
import { type AnyController, type Caches, eventSource, type RunningController } from "../controller/definition.ts";
import { type ManagerFlags, PROGRAM, parseManagerFlags } from "./flags.ts";
import { createMetrics } from "./metrics.ts";

/** As client-go's: the pod (or host) name and a random part, so a restarted pod is a new candidate. */
function leaderIdentity(env: NodeJS.ProcessEnv): string {
  return `${env.POD_NAME || os.hostname()}_${randomBytes(4).toString("hex")}`;
}

/** Errors are logged at once; a lost race for the lease (Conflict) is routine and logged at --v=2. */
function logLeaseError(log: Logger, err: unknown): void {
  if (isApiError(err, "Conflict")) log.v(2)?.("leader election: lease changed meanwhile", { err });
  else log.error("leader election failed", { err });
}

/** What every controller is created from: one of each per process. */
interface SharedParts {
  client: KubeClient;
  informers: SharedInformers;
  /** A recorder whose Events have `component` as their source. */
  events(component: string): EventRecorder;
  log: Logger;
  metrics: ReturnType<typeof createMetrics>;
  isLeader(): boolean;
  dryRun: boolean;
}

/** Creates one controller from its definition: its watches registered on the shared informers, not started. */
function createController(definition: AnyController, config: unknown, shared: SharedParts): RunningController {
  const { name } = definition;
  const watches = definition.watches(config);
  const caches = Object.fromEntries(
    Object.entries(watches).map(([key, watch]) => [key, shared.informers.watch(name, watch)]),
  ) as Caches<typeof watches>;
  return definition.create(
    {
      client: shared.client,
      caches,
      events: shared.events(eventSource(definition)),
      log: shared.log.with({ controller: name }),
      metrics: shared.metrics.controllers.get(name),
      isLeader: shared.isLeader,
      dryRun: shared.dryRun && definition.dryRun !== undefined,
    },
    config,
  );
}

export async function runManager(ctx: MainContext): Promise<void> {
  const flags = parseManagerFlags(ctx.argv, ctx.env);
  ctx.setVerbosity(flags.verbosity);
  const log = createLogger({ verbosity: flags.verbosity, format: flags.logFormat });
  const clientConfig = await loadClientConfig({ kubeconfig: flags.kubeconfig || undefined, env: ctx.env });
  const identity = leaderIdentity(ctx.env);
  ctx.signal.addEventListener("abort", () => log.info("shutting down"));

  // Each part registers its stop right after it starts: they run in reverse (see cli/main.ts), so the
  // controllers stop first (no write after that), then the lease is released, the watches stopped, Events
  // flushed, health closed, and the client closed last.
  const metrics = createMetrics();
  const client = new KubeClient(clientConfig, {
    component: PROGRAM,
    onResponse: (verb, code) => metrics.apiRequests.with({ verb, code }).inc(),
  });
  ctx.onShutdown(() => client.close());
  const informers = new SharedInformers(client, {
    onError: (resource, err) => log.error(`watching ${resource} failed`, { err }),
  });
  const endpoints = await startEndpoints(flags, {
    program: PROGRAM,
    registry: metrics.registry,
    refusals: metrics.metricsRefusals,
    client,
    log,
    ready: () => (informers.hasSynced() ? { ok: true } : { ok: false, reason: "caches not synced yet" }),
  });
  ctx.onShutdown(() => endpoints.close());
  if (flags.metrics?.withHealth) log.info("serving /healthz, /readyz and /metrics", { address: endpoints.health });
  else log.info("serving /healthz and /readyz, and /metrics", { address: endpoints.health, metrics: endpoints.metrics });
  const recorders: EventRecorder[] = [];
  const events = (component: string) => {
    const onError = (err: unknown) => log.error("recording an event failed", { component, err });
    const recorder = new EventRecorder(client, { component, host: identity, onError });
    recorders.push(recorder);
    return recorder;
  };
  ctx.onShutdown(async () => void (await Promise.all(recorders.map((recorder) => recorder.flushAtShutdown()))));

  const shared: SharedParts = {
    client,
    informers,
    events,
    log,
    metrics,
    // The elector is made below, from the controllers it tells; none of them asks before it starts.
    isLeader: () => elector?.isLeader() ?? true,
    dryRun: flags.dryRun,
  };
  const controllers = flags.controllers.map((each) => createController(each, flags.configs.get(each.name), shared));
  const elector = leaderElector(flags, { client, identity, log, metrics, controllers });

  log.info("starting", {
    server: clientConfig.server,
    identity,
    controllers: flags.controllers.map(({ name }) => name).join(","),
    leaderElect: flags.leaderElection.enabled,
    dryRun: flags.dryRun,
  });
  informers.start();
  ctx.onShutdown(() => informers.stop());
  if (!(await ctx.unlessStopped(informers.waitForSync()))) return;
  log.info("caches synced", informers.counts());
  // Candidates campaign only with full caches, so that a new leader decides from all objects at once.
  if (elector) ctx.onShutdown(campaign(elector));
  // Each stop waits for what is in flight: a DELETE or an approval already sent completes.
  for (const controller of controllers) {
    controller.start();
    ctx.onShutdown(() => controller.stop());
  }
  await ctx.untilStopped();
}

/** The elector on --leader-elect-resource-*, or undefined (and leading) without leader election. */
function leaderElector(
  flags: ManagerFlags,
  parts: Pick<SharedParts, "client" | "log" | "metrics"> & { identity: string; controllers: RunningController[] },
): LeaderElector | undefined {
  const { leaderElection } = flags;
  const { log, metrics, identity } = parts;
  if (!leaderElection.enabled) {
    metrics.leader.set(1);
    return undefined;
  }
  return new LeaderElector(parts.client, {
    lease: { name: leaderElection.resourceName, namespace: leaderElection.resourceNamespace },
    identity,
    leaseDurationMs: leaderElection.leaseDurationMs,
    renewDeadlineMs: leaderElection.renewDeadlineMs,
    retryPeriodMs: leaderElection.retryPeriodMs,
    onStartedLeading: () => {
      metrics.leader.set(1);
      log.info("started leading", { identity });
      for (const controller of parts.controllers) controller.resync();
    },
    onStoppedLeading: () => {
      metrics.leader.set(0);
      log.info("stopped leading", { identity });
    },
    onNewLeader: (leader) => log.v(1)?.("leader elected", { leader }),
    onError: (err) => logLeaseError(log, err),
  });
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
