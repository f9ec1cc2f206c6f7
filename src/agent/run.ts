// The local-ccm program: flags → client → (one reconcile | watch + netlink + resync loop) → health.
import type { Node } from "kubernetes-types/core/v1.js";
import { createLogger } from "../cli/log.ts";
import type { MainContext } from "../cli/main.ts";
import { startEndpoints } from "../cli/serving.ts";
import { KubeClient } from "../kube/client.ts";
import { loadClientConfig } from "../kube/config.ts";
import { EventRecorder, type EventType, nodeReference } from "../kube/events.ts";
import { Informer } from "../kube/informer.ts";
import { NODE_RESOURCE, Resource } from "../kube/resource.ts";
import { openNetlink } from "../net/netlink.ts";
import { Agent, type ReconcileResult } from "./agent.ts";
import { announceWhileSelected } from "./announcer/announcing.ts";
import { l2Method } from "./announcer/arp-ndp/method.ts";
import { PROGRAM, parseAgentFlags } from "./flags.ts";
import { metadataOptions } from "./metadata/options.ts";
import { createMetrics } from "./metrics.ts";
import { agentReadiness } from "./readiness.ts";
import { releaseStartupPages, TrimSchedule, trimMemory } from "./memoryrelease.ts";

/** Netlink events come in bursts (an address add brings routes with it): one reconcile per burst. */
const NETLINK_DEBOUNCE_MS = 200;

export async function runAgent(ctx: MainContext): Promise<void> {
  // Everything that can be wrong with the input fails here, before any API call.
  const flags = parseAgentFlags(ctx.argv, ctx.env);
  ctx.setVerbosity(flags.verbosity);
  const log = createLogger({ verbosity: flags.verbosity, format: flags.logFormat });
  const config = await loadClientConfig({ kubeconfig: flags.kubeconfig || undefined, env: ctx.env });

  const metrics = createMetrics();
  const client = new KubeClient(config, {
    component: PROGRAM,
    onResponse: (verb, code) => metrics.apiRequests.with({ verb, code }).inc(),
  });
  const netlink = openNetlink();
  const events = new EventRecorder(client, {
    component: PROGRAM,
    host: flags.nodeName,
    onError: (err) => log.v(2)?.("event not recorded", { err }),
  });
  const nodes = new Resource<Node>(client, NODE_RESOURCE);
  const agent = new Agent(
    {
      nodeName: flags.nodeName,
      detection: { external: flags.external, internal: flags.internal },
      removeTaint: flags.removeTaint,
      requireLocalNode: flags.requireLocalNode,
      metadata: await metadataOptions(flags.metadata, metrics.agent),
    },
    { nodes, netlink, events, log, metrics: metrics.agent, onReconciled: releaseMemory },
  );
  ctx.onShutdown(() => client.close());
  ctx.onShutdown(() => netlink.close());
  ctx.onShutdown(() => events.flushAtShutdown());

  if (flags.runOnce) {
    const result = await agent.reconcile(() => undefined);
    if (result.refused) throw new Error(result.refused);
    if (result.metadataUnavailable) throw new Error(`node metadata not applied: ${result.metadataUnavailable}`);
    log.info("reconciled once", {
      node: flags.nodeName,
      addressesWritten: result.addressesWritten,
      taintRemoved: result.taintRemoved,
    });
    return;
  }

  // Only this Node is watched; its cache is the state we compare against, so at rest the only
  // request is the watch's renewal, every 30-60 min (≤ 2 per hour; bookmarks keep it resumable).
  const informer = new Informer(nodes, {
    fieldSelector: `metadata.name=${flags.nodeName}`,
    watchTimeoutSeconds: { min: 1800, max: 3600 },
    onError: (err) => log.error("watching the node failed", { err }),
  });
  const cached = () => informer.get(flags.nodeName);
  const readiness = () =>
    agentReadiness({
      nodeName: flags.nodeName,
      synced: informer.hasSynced(),
      found: cached() !== undefined,
      error: agent.lastError === undefined ? undefined : (agent.lastError as Error).message,
      result: agent.lastResult,
    });
  // Start-up's pages go once, when the node is first done (ready); after that, each bout of work (a write) is
  // followed by a trim once it is over, and at rest each reconcile that wrote nothing by a trim 2 s after it
  // (memoryrelease.ts). What the agent touches again faults back in.
  let pagesReleased = false;
  let trims: TrimSchedule | undefined;
  function releaseMemory(result: ReconcileResult): void {
    if (!pagesReleased) {
      if (!readiness().ok) return;
      pagesReleased = true;
      // Without the addon a trim would fail each time: no trims then.
      if (releaseStartupPages(log) !== undefined) trims = new TrimSchedule((after) => trimMemory(log, after));
      return;
    }
    if (result.addressesWritten || result.taintRemoved || result.metadataWritten) trims?.worked();
    else trims?.rested();
  }
  ctx.onShutdown(() => trims?.stop());
  /** An announcing pass (over every Service) is work too: a burst of them leaves garbage in V8's heap. */
  const worked = () => trims?.worked();
  const reconcile = () => agent.trigger(cached);
  informer.addHandlers({ onAdd: reconcile, onUpdate: reconcile });
  const endpoints = await startEndpoints(flags, {
    program: PROGRAM,
    registry: metrics.registry,
    refusals: metrics.metricsRefusals,
    client,
    log,
    ready: readiness,
  });
  ctx.onShutdown(() => endpoints.close());
  // Stops run in reverse (see cli/main.ts): the triggers first, then the agent's queue (a reconcile in flight
  // is awaited).
  ctx.onShutdown(() => agent.stop());
  // undefined while the Node is not known: nothing selects it then.
  const labels = () => {
    const node = cached();
    return node && (node.metadata?.labels ?? {});
  };
  const { nodeName: node } = flags;
  if (flags.announce) {
    const nodeEvent = (type: EventType, reason: string, message: string) => {
      const node = cached();
      const about = node ? nodeReference(node) : { apiVersion: "v1", kind: "Node", name: flags.nodeName };
      events.record(about, type, reason, message);
    };
    const { announce } = flags;
    const options = { client, netlink, node, flags: announce, log, metrics: metrics.announcer, nodeEvent };
    const method = l2Method(options);
    const selection = metrics.announcer.selection;
    const l2 = announceWhileSelected({ client, node, log, selection, method, worked }, labels);
    informer.addHandlers({ onAdd: l2.update, onUpdate: l2.update, onDelete: l2.update });
    ctx.onShutdown(() => l2.stop());
  }
  if (flags.bgp) {
    // Both methods may run at once: l2 Services by ARP/NDP, bgp Services by BGP, each with its own Service watch.
    // Loaded only when on: an agent without BGP never loads the speaker (its memory budget).
    const { bgpMethod } = await import("./announcer/bgp/definition.ts");
    const bgp = bgpMethod({ ...flags.bgp, client, netlink, node, log, metrics: metrics.bgp, nodeObject: cached });
    const method = bgp.definition;
    const selection = metrics.bgp.selection;
    const speaking = announceWhileSelected({ client, node, log, selection, method, worked }, labels);
    const nodeChanged = () => {
      speaking.update();
      bgp.nodeChanged();
    };
    informer.addHandlers({ onAdd: nodeChanged, onUpdate: nodeChanged, onDelete: nodeChanged });
    bgp.start(speaking.update);
    ctx.onShutdown(() => bgp.stop());
    ctx.onShutdown(() => speaking.stop());
  }
  informer.start();
  ctx.onShutdown(() => informer.stop());
  const changes = netlink.watchChanges(reconcile, NETLINK_DEBOUNCE_MS);
  ctx.onShutdown(() => changes.close());
  const resync = setInterval(reconcile, flags.reconcileIntervalMs);
  ctx.onShutdown(() => clearInterval(resync));
  log.info(`${PROGRAM} started`, { node: flags.nodeName, health: endpoints.health, metrics: endpoints.metrics });
  if ((await ctx.unlessStopped(informer.waitForSync())) && !cached()) {
    log.warn("node not found yet; waiting for it to be registered", { node: flags.nodeName });
  }
  await ctx.untilStopped();
}
