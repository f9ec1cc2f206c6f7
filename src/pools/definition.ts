// The address pool controller as node-lifecycle-controller hosts it (manager/registry.ts): its flags, metrics,
// RBAC, the watches it reads (Services, Nodes, LoadBalancerIPPools, each trimmed to what it decides on) and how it
// is created from the program's shared parts. Off by default: the chart turns it on with loadBalancer.l2.enabled,
// and ships the LoadBalancerIPPool CRD (charts/local-ccm/crds/).
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { NODE_RESOURCE, Resource, SERVICE_RESOURCE } from "../kube/resource.ts";
import { watch } from "../kube/sharedinformers.ts";
import { defineController } from "../manager/controller.ts";
import { LOAD_BALANCER_RULES } from "../service/definition.ts";
import { PoolController } from "./controller.ts";
import { poolsConfig, poolsFlagTable } from "./flags.ts";
import { createPoolsMetrics } from "./metrics.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE } from "./pool.ts";
import { NODE_FIELDS, POOL_FIELDS, SERVICE_FIELDS } from "./watches.ts";

const WATCHES = {
  services: watch<Service>({ resource: SERVICE_RESOURCE, keep: SERVICE_FIELDS }),
  nodes: watch<Node>({ resource: NODE_RESOURCE, keep: NODE_FIELDS }),
  pools: watch<LoadBalancerIPPool>({ resource: POOL_RESOURCE, keep: POOL_FIELDS }),
};

export const servicePools = defineController({
  name: "service-l2-pools",
  enabledByDefault: false,
  helmEnabled: "loadBalancer.l2.enabled",
  summary:
    "Gives LoadBalancer Services of class local-ccm.io/l2 addresses from LoadBalancerIPPools (requested, shared " +
    "or the lowest free), recorded on the Service so that a restart never hands one out twice; writes the " +
    "pools' status. Announcing the addresses on the network is not there yet.",
  flags: poolsFlagTable,
  classlessFlag: "lb-l2-claim-classless",
  parse: poolsConfig,
  metricsSubsystem: "service_l2_pools_",
  createMetrics: createPoolsMetrics,
  rbac: {
    // As the node-address service controller's, plus the pools: read, and their status written.
    cluster: [
      ...LOAD_BALANCER_RULES,
      { apiGroups: ["local-ccm.io"], resources: ["loadbalancerippools"], verbs: ["list", "watch"] },
      { apiGroups: ["local-ccm.io"], resources: ["loadbalancerippools/status"], verbs: ["patch"] },
    ],
  },
  watches: () => WATCHES,
  create(context, config) {
    const { services, nodes, pools } = context.caches;
    const controller = new PoolController({
      config,
      dryRun: context.dryRun,
      services,
      nodes,
      pools,
      serviceResource: (namespace) => new Resource<Service>(context.client, { ...SERVICE_RESOURCE, namespace }),
      poolResource: new Resource<LoadBalancerIPPool>(context.client, POOL_RESOURCE),
      isLeader: context.isLeader,
      events: context.events,
      log: context.log,
      metrics: context.metrics,
    });
    services.addHandlers(controller.serviceHandlers);
    nodes.addHandlers(controller.nodeHandlers);
    pools.addHandlers(controller.poolHandlers);
    return controller;
  },
});
