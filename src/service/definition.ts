// The service controller (node-address mode) as node-lifecycle-controller hosts it (manager/registry.ts): its
// flags, metrics, RBAC, the watches it reads (Services, Nodes, EndpointSlices, each trimmed to what it decides
// on) and how it is created from the program's shared parts.
import type { Node, Pod, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { ENDPOINT_SLICE_RESOURCE, NODE_RESOURCE, SERVICE_RESOURCE } from "../kube/resource.ts";
import { watch } from "../kube/sharedinformers.ts";
import { ENDPOINT_SLICE_RULE, LOAD_BALANCER_RULES, loadBalancerParts } from "../loadbalancer/definition.ts";
import { ENDPOINT_SLICE_FIELDS, NODE_FIELDS } from "../loadbalancer/watches.ts";
import { defineController, type PolicyRule } from "../controller/definition.ts";
import { ServiceController } from "./controller.ts";
import { serviceConfig, serviceFlagTable } from "./flags.ts";
import { createServiceMetrics } from "./metrics.ts";
import { POD_FIELD_SELECTOR, POD_RESOURCE, SERVICE_FIELDS, trimPod } from "./watches.ts";

const WATCHES = {
  services: watch<Service>({ resource: SERVICE_RESOURCE, keep: SERVICE_FIELDS }),
  nodes: watch<Node>({ resource: NODE_RESOURCE, keep: NODE_FIELDS }),
  endpointSlices: watch<EndpointSlice>({ resource: ENDPOINT_SLICE_RESOURCE, keep: ENDPOINT_SLICE_FIELDS }),
  pods: watch<Pod>({ resource: POD_RESOURCE, fieldSelector: POD_FIELD_SELECTOR, keep: trimPod }),
};

/** Pods, for the ports they hold on their nodes (hostPort, hostNetwork): a Service must not take those. */
const POD_RULE: PolicyRule = { apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] };

export const serviceLoadBalancer = defineController({
  name: "service",
  // It acts only on its own loadBalancerClass unless told to claim class-less Services too.
  enabledByDefault: true,
  helmEnabled: ["loadBalancer.nodeAddress.enabled"],
  summary:
    "Gives LoadBalancer Services of class local-ccm.io/node-address the addresses of healthy nodes " +
    "(ExternalIP, else InternalIP), with the standard finalizer; refuses ports the nodes serve, the NodePort " +
    "range, and ports an older Service or pod holds on those nodes (NodePorts, hostPorts, hostNetwork pods).",
  flags: serviceFlagTable,
  classlessFlags: ["lb-claim-classless"],
  parse: serviceConfig,
  metricsSubsystem: "service_",
  createMetrics: createServiceMetrics,
  rbac: {
    cluster: [
      ...LOAD_BALANCER_RULES,
      ENDPOINT_SLICE_RULE,
      POD_RULE,
    ],
  },
  // The same whatever its config: the node selector is matched against labels, which the Node watch keeps whole.
  watches: () => WATCHES,
  create(context, config) {
    const { services, nodes, endpointSlices, pods } = context.caches;
    const parts = loadBalancerParts(context);
    const controller = new ServiceController({ config, services, nodes, endpointSlices, ...parts });
    services.addHandlers(controller.serviceHandlers);
    nodes.addHandlers(controller.nodeHandlers);
    endpointSlices.addHandlers(controller.endpointSliceHandlers);
    pods.addHandlers(controller.podHandlers);
    return controller;
  },
});
