// The node-lifecycle-controller program: flags → API client → one informer on all nodes (and, when the approver
// runs, one on kubelet-serving CSRs and three on the cluster's own addresses) → leader election → the
// controllers --controllers names, with health and metrics served beside them. SIGTERM stops the controllers
// first (no DELETE or approval after that), then releases the lease, stops the watches and closes the client.
import { randomBytes } from "node:crypto";
import os from "node:os";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { createLogger, type Logger } from "../cli/log.ts";
import type { MainContext } from "../cli/main.ts";
import { startEndpoints } from "../cli/serving.ts";
import {
  API_SERVER_SLICES,
  endpointSliceTransform,
  KUBERNETES_SERVICE,
  kubernetesServiceTransform,
  SERVICE_CIDR_RESOURCE,
  type ServiceCidr,
  serviceCidrTransform,
} from "../csr/cluster.ts";
import {
  type ClusterCaches,
  CSR_RESOURCE,
  CsrController,
  csrTransform,
  KUBELET_SERVING_SELECTOR,
} from "../csr/controller.ts";
import { sleep } from "../time/backoff.ts";
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

/** The CSR approver's informers on the cluster's own addresses (rule 5b), each keeping the fields it reads. */
function clusterInformers(client: KubeClient, log: Logger) {
  const failed = (what: string) => (err: unknown) => log.error(`watching ${what} failed`, { err });
  return {
    serviceCidrs: new Informer(new Resource<ServiceCidr>(client, SERVICE_CIDR_RESOURCE), {
      transform: serviceCidrTransform,
      onError: failed("ServiceCIDRs"),
    }),
    services: new Informer(new Resource<Service>(client, KUBERNETES_SERVICE.resource), {
      fieldSelector: KUBERNETES_SERVICE.fieldSelector,
      transform: kubernetesServiceTransform,
      onError: failed("the kubernetes Service"),
    }),
    endpointSlices: new Informer(new Resource<EndpointSlice>(client, API_SERVER_SLICES.resource), {
      labelSelector: API_SERVER_SLICES.labelSelector,
      transform: endpointSliceTransform,
      onError: failed("the kubernetes Service's EndpointSlices"),
    }),
  } satisfies ClusterCaches;
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
  // loops stop first (no DELETE or approval after that), then the lease is released, the watches stopped,
  // Events flushed, health closed, and the client closed last.
  const metrics = createMetrics();
  const client = new KubeClient(clientConfig, {
    component: PROGRAM,
    onResponse: (verb, code) => metrics.apiRequests.with({ verb, code }).inc(),
  });
  ctx.onShutdown(() => client.close());
  const nodes = new Resource<Node>(client, { group: "", version: "v1", plural: "nodes" });
  // One watch on Nodes for every controller: its transform keeps what each of them reads.
  const informer = new Informer(nodes, {
    transform: nodeTransform(config),
    onError: (err) => log.error("watching nodes failed", { err }),
  });
  // No watch on CSRs unless the approver runs.
  const csrInformer = flags.controllers.has("kubelet-serving-csr")
    ? new Informer(new Resource<CertificateSigningRequest>(client, CSR_RESOURCE), {
        fieldSelector: KUBELET_SERVING_SELECTOR,
        transform: csrTransform,
        onError: (err) => log.error("watching CSRs failed", { err }),
      })
    : undefined;
  const cluster = csrInformer && clusterInformers(client, log);
  const informers = [informer, ...(csrInformer && cluster ? [csrInformer, ...Object.values(cluster)] : [])];
  const endpoints = await startEndpoints(flags, {
    program: PROGRAM,
    registry: metrics.registry,
    client,
    log,
    ready: () =>
      informers.every((each) => each.hasSynced()) ? { ok: true } : { ok: false, reason: "caches not synced yet" },
  });
  ctx.onShutdown(() => endpoints.close());
  if (flags.metrics?.withHealth) log.info("serving /healthz, /readyz and /metrics", { address: endpoints.health });
  else log.info("serving /healthz and /readyz, and /metrics", { address: endpoints.health, metrics: endpoints.metrics });
  const events = new EventRecorder(client, {
    component: PROGRAM,
    host: identity,
    onError: (err) => log.error("recording an event failed", { err }),
  });
  ctx.onShutdown(() => Promise.race([events.flush(), sleep(EVENT_FLUSH_MS)]));

  const { leaderElection } = flags;
  let elector: LeaderElector | undefined;
  const isLeader = () => elector?.isLeader() ?? true;
  const lifecycle = flags.controllers.has("node-lifecycle")
    ? new Controller({
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
        isLeader,
        events,
        log: log.with({ controller: "node-lifecycle" }),
        metrics: metrics.nodeLifecycle,
      })
    : undefined;
  if (lifecycle) informer.addHandlers(lifecycle.handlers);
  const approver =
    csrInformer && cluster
      ? new CsrController({
          config: flags.csr,
          dryRun: flags.dryRun,
          cache: csrInformer,
          cluster,
          csrs: new Resource<CertificateSigningRequest>(client, CSR_RESOURCE),
          isLeader,
          events,
          log: log.with({ controller: "kubelet-serving-csr" }),
          metrics: metrics.csrApprover,
        })
      : undefined;
  if (approver && csrInformer && cluster) {
    informer.addHandlers(approver.nodeHandlers);
    csrInformer.addHandlers(approver.csrHandlers);
    for (const each of Object.values(cluster)) each.addHandlers(approver.clusterHandlers);
  }
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
        lifecycle?.trigger();
        approver?.resync();
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
    controllers: [...flags.controllers].join(","),
    leaderElect: leaderElection.enabled,
    dryRun: flags.dryRun,
  });
  for (const each of informers) {
    each.start();
    ctx.onShutdown(() => each.stop());
  }
  await Promise.race([Promise.all(informers.map((each) => each.waitForSync())), ctx.untilStopped()]);
  if (ctx.signal.aborted) return;
  log.info("node cache synced", { nodes: informer.list().length });
  if (csrInformer) log.info("CSR cache synced", { csrs: csrInformer.list().length });
  if (cluster) {
    const { serviceCidrs, services, endpointSlices } = cluster;
    const counts = { serviceCidrs: serviceCidrs.list().length, services: services.list().length };
    log.info("cluster address caches synced", { ...counts, endpointSlices: endpointSlices.list().length });
  }
  // Candidates campaign only with full caches, so that a new leader decides from all objects at once.
  if (elector) ctx.onShutdown(campaign(elector));
  // Each stop waits for what is in flight: a DELETE or an approval already sent completes.
  if (lifecycle) {
    lifecycle.start();
    ctx.onShutdown(() => lifecycle.stop());
  }
  if (approver) {
    approver.start();
    ctx.onShutdown(() => approver.stop());
  }
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
