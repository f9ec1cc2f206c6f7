// The address pool controller as node-lifecycle-controller hosts it (manager/registry.ts): its flags, metrics,
// RBAC, the watches it reads (Services, Nodes, LoadBalancerIPPools, EndpointSlices, ServiceCIDRs, and the announcer
// Leases in their namespace, each trimmed to what it decides on) and how it is created from the program's shared parts. Off
// by default: the chart turns it on with loadBalancer.l2.enabled or bgp.enabled (which also passes --lb-bgp), ships the LoadBalancerIPPool CRD
// (charts/local-ccm/crds/), and grants the Leases' list and watch in the release namespace (nlc-rbac.yaml: a
// namespace the registry's rules cannot name).
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import {
  ENDPOINT_SLICE_RESOURCE,
  leaseResource,
  NODE_RESOURCE,
  Resource,
  SERVICE_RESOURCE,
} from "../kube/resource.ts";
import { watch } from "../kube/sharedinformers.ts";
import { defineController } from "../controller/definition.ts";
import { ENDPOINT_SLICE_RULE, LOAD_BALANCER_RULES, loadBalancerParts } from "../loadbalancer/definition.ts";
import { ANNOUNCER_LEASE_LABEL } from "./announcement.ts";
import { PoolController } from "./controller.ts";
import { type PoolsConfig, poolsConfig, poolsFlagTable } from "./flags.ts";
import { createPoolsMetrics } from "./metrics.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE } from "./pool.ts";
import {
  LEASE_FIELDS,
  POOL_ENDPOINT_SLICE_FIELDS,
  POOL_FIELDS,
  POOL_NODE_FIELDS,
  SERVICE_CIDR_FIELDS,
  SERVICE_CIDR_RESOURCE,
  SERVICE_FIELDS,
  type ServiceCIDR,
} from "./watches.ts";

const SHARED_WATCHES = {
  services: watch<Service>({ resource: SERVICE_RESOURCE, keep: SERVICE_FIELDS }),
  nodes: watch<Node>({ resource: NODE_RESOURCE, keep: POOL_NODE_FIELDS }),
  pools: watch<LoadBalancerIPPool>({ resource: POOL_RESOURCE, keep: POOL_FIELDS }),
  endpointSlices: watch<EndpointSlice>({ resource: ENDPOINT_SLICE_RESOURCE, keep: POOL_ENDPOINT_SLICE_FIELDS }),
  serviceCidrs: watch<ServiceCIDR>({ resource: SERVICE_CIDR_RESOURCE, keep: SERVICE_CIDR_FIELDS }),
};

const watches = ({ leaseNamespace }: PoolsConfig) => ({
  ...SHARED_WATCHES,
  leases: watch<Lease>({
    resource: leaseResource(leaseNamespace),
    labelSelector: `${ANNOUNCER_LEASE_LABEL}=true`,
    keep: LEASE_FIELDS,
  }),
});

export const servicePools = defineController({
  name: "service-l2-pools",
  enabledByDefault: false,
  helmEnabled: ["loadBalancer.l2.enabled", "bgp.enabled"],
  summary:
    "Gives LoadBalancer Services of class local-ccm.io/l2 (and, with --lb-bgp, local-ccm.io/bgp) addresses from " +
    "LoadBalancerIPPools (requested, shared or the lowest free), recorded on the Service so that a restart never " +
    "hands one out twice; writes the pools' status; assigns each l2 address to one live announcer (the agents' " +
    "Leases) and records it on the Service.",
  flags: poolsFlagTable,
  classlessFlags: ["lb-l2-claim-classless", "lb-bgp-claim-classless"],
  parse: poolsConfig,
  metricsSubsystem: "service_l2_pools_",
  createMetrics: createPoolsMetrics,
  rbac: {
    // As the node-address service controller's, plus the pools (read, their finalizer and status written) and the
    // ServiceCIDRs (never handed out).
    cluster: [
      ...LOAD_BALANCER_RULES,
      ENDPOINT_SLICE_RULE,
      { apiGroups: ["local-ccm.io"], resources: ["loadbalancerippools"], verbs: ["list", "watch", "patch"] },
      { apiGroups: ["local-ccm.io"], resources: ["loadbalancerippools/status"], verbs: ["patch"] },
      { apiGroups: ["networking.k8s.io"], resources: ["servicecidrs"], verbs: ["list", "watch"] },
    ],
    // The agents' announcer Leases, where they keep them (the chart passes --lb-l2-lease-namespace).
    releaseNamespace: [{ apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["list", "watch"] }],
  },
  watches,
  create(context, config) {
    const { services, nodes, pools, leases, endpointSlices, serviceCidrs } = context.caches;
    const controller = new PoolController({
      config,
      services,
      nodes,
      pools,
      leases,
      endpointSlices,
      serviceCidrs,
      poolResource: new Resource<LoadBalancerIPPool>(context.client, POOL_RESOURCE),
      ...loadBalancerParts(context),
    });
    services.addHandlers(controller.serviceHandlers);
    nodes.addHandlers(controller.nodeHandlers);
    pools.addHandlers(controller.poolHandlers);
    leases.addHandlers(controller.leaseHandlers);
    endpointSlices.addHandlers(controller.endpointSliceHandlers);
    serviceCidrs.addHandlers(controller.serviceCidrHandlers);
    return controller;
  },
});
