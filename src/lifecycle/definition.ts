// The node-lifecycle controller as node-lifecycle-controller hosts it (manager/registry.ts): its flags, metrics,
// RBAC, the Node fields it keeps, and how it is created from the program's shared parts.
import type { Node } from "kubernetes-types/core/v1.js";
import { EACH, type FieldPath, IDENTITY_FIELDS, projection } from "../kube/fields.ts";
import { NODE_RESOURCE, Resource } from "../kube/resource.ts";
import { watch } from "../kube/sharedinformers.ts";
import { defineController } from "../controller/definition.ts";
import { probeNode } from "../net/probe.ts";
import { Controller } from "./controller.ts";
import type { LifecycleConfig } from "./decide.ts";
import { type LifecycleFlags, lifecycleFlags, lifecycleFlagTable } from "./flags.ts";
import { createNodeLifecycleMetrics } from "./metrics.ts";


/**
 * What decisions read, so 5,000 cached nodes stay small: labels whole (selectors may name any), annotations
 * only where --protected-annotations names them, taints by key and effect, the InternalIP and ExternalIP
 * addresses it probes, the Ready condition without its heartbeat (which changes every few minutes and decides
 * nothing), and the providerID (shared ones are reported).
 */
export function nodeFields(flags: Pick<LifecycleFlags, "protectedAnnotations">): FieldPath[] {
  return [
    ["metadata", "uid"],
    ["metadata", "labels"],
    ...flags.protectedAnnotations.map(({ key }): FieldPath => ["metadata", "annotations", key]),
    ["metadata", "creationTimestamp"],
    ["metadata", "deletionTimestamp"],
    ["spec", "providerID"],
    ["spec", "taints", EACH, "key"],
    ["spec", "taints", EACH, "effect"],
    ...["status", "lastTransitionTime"].map((field) => ["status", "conditions", { where: { type: "Ready" } }, field]),
    ["status", "addresses", EACH, "type"],
    ["status", "addresses", EACH, "address"],
  ];
}

/** This controller's own projection of a Node: what the shared cache keeps at least. */
export function nodeTransform(flags: Pick<LifecycleFlags, "protectedAnnotations">): (node: Node) => Node {
  return projection([...IDENTITY_FIELDS, ...nodeFields(flags)]);
}

export function lifecycleConfig(flags: LifecycleFlags): LifecycleConfig {
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

export const nodeLifecycle = defineController({
  name: "node-lifecycle",
  enabledByDefault: true,
  helmEnabled: ["nodeLifecycleController.nodeDeletion.enabled"],
  summary: "Deletes the Nodes of machines that are gone: NotReady past a timeout and reached by no probe.",
  flags: lifecycleFlagTable,
  dryRun: '"would delete"',
  parse: lifecycleFlags,
  metricsSubsystem: "",
  createMetrics: createNodeLifecycleMetrics,
  rbac: { cluster: [{ apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "delete"] }] },
  // Every Node: which ones it watches is its own decision (decide.ts isWatched), and the health guard counts all.
  watches: (flags) => ({ nodes: watch<Node>({ resource: NODE_RESOURCE, keep: nodeFields(flags) }) }),
  create(context, flags) {
    const controller = new Controller({
      config: lifecycleConfig(flags),
      reconcileIntervalMs: flags.reconcileIntervalMs,
      dryRun: context.dryRun,
      cache: context.caches.nodes,
      nodes: new Resource<Node>(context.client, NODE_RESOURCE),
      probe: (addresses, signal) =>
        probeNode(addresses, {
          icmp: flags.probes.includes("icmp"),
          tcp: flags.probes.includes("tcp"),
          pingCount: flags.pingCount,
          pingTimeoutMs: flags.pingTimeoutMs,
          kubeletPort: flags.kubeletPort,
          signal,
        }),
      isLeader: context.isLeader,
      events: context.events,
      log: context.log,
      metrics: context.metrics,
    });
    context.caches.nodes.addHandlers(controller.handlers);
    return { start: () => controller.start(), resync: () => controller.trigger(), stop: () => controller.stop() };
  },
});
