// A world for the service controller's tests: a real control plane, Nodes registered with the status a kubelet
// and the agent would write, Services in namespaces of their own, and the controller run in this process as
// ../kube/controller-harness.ts runs controllers (its own RBAC rules only, trimmed informers, counted writes).
import type { Node, Pod, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { type KubeObject, Resource, type ResourceRef } from "../../src/kube/resource.ts";
import { ServiceController } from "../../src/service/controller.ts";
import type { ServiceConfig } from "../../src/service/decide.ts";
import {
  DEFAULT_NODE_PORT_RANGE,
  DEFAULT_RESERVED_PORTS,
  parseNodePortRange,
  parsePortRange,
} from "../../src/service/flags.ts";
import type { ServiceMetrics } from "../../src/service/metrics.ts";
import { serviceLoadBalancer } from "../../src/service/definition.ts";
import { POD_RESOURCE } from "../../src/service/watches.ts";
import { ENDPOINT_SLICE_RESOURCE, NODE_RESOURCE, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import {
  type ControllerRun,
  controllerKubeconfig,
  createNamespace,
  createNode,
  eventsAbout,
  reportingComponent,
  type NodeSpec,
  setNodeReady,
  startController,
} from "../kube/controller-harness.ts";

export const CONFIG: ServiceConfig = {
  claimClassless: false,
  maxNodes: 16,
  reservedPorts: DEFAULT_RESERVED_PORTS.split(",").map(parsePortRange),
  nodePortRange: parseNodePortRange(DEFAULT_NODE_PORT_RANGE),
  unknownGuard: { threshold: 0.55, graceMs: 20_000 },
};

export type { NodeSpec };

/** Its writes are patches of Services (object or status). */
export type RunningController = ControllerRun<ServiceController, ServiceMetrics>;

export interface ControllerOptions {
  config?: Partial<ServiceConfig>;
  /** Default true. */
  leader?: boolean;
}

export interface ServiceWorld {
  plane: ControlPlane;
  nodes: Resource<Node>;
  services(namespace: string): Resource<Service>;
  endpointSlices(namespace: string): Resource<EndpointSlice>;
  /** No kubelet runs them: a pod is bound by its spec.nodeName, and its status is what a test writes. */
  pods(namespace: string): Resource<Pod>;
  /** A fresh namespace. */
  namespace(): Promise<string>;
  /** Registers a Node and writes its status (addresses, Ready). */
  addNode(name: string, spec: NodeSpec): Promise<void>;
  setReady(name: string, ready: "True" | "False" | "Unknown"): Promise<void>;
  /** The reasons and messages of the Events about a Service. */
  events(namespace: string, name: string): Promise<{ type: string; reason: string; message: string }[]>;
  startController(options?: ControllerOptions): Promise<RunningController>;
  stop(): Promise<void>;
}

// Not "service-controller": kube-controller-manager's own service account of that name has a bootstrap grant.
const ACCOUNT = "local-ccm-service-controller";

export async function startServiceWorld(): Promise<ServiceWorld> {
  const plane = await startControlPlane();
  const admin = plane.admin;
  const kubeconfig = await controllerKubeconfig(plane, ACCOUNT, serviceLoadBalancer.rbac.cluster);
  const resource = <T extends KubeObject>(ref: ResourceRef, namespace?: string) =>
    new Resource<T>(admin, namespace === undefined ? ref : { ...ref, namespace });
  const nodes = resource<Node>(NODE_RESOURCE);
  const running = new Set<RunningController>();
  return {
    plane,
    nodes,
    services: (namespace) => resource<Service>(SERVICE_RESOURCE, namespace),
    endpointSlices: (namespace) => resource<EndpointSlice>(ENDPOINT_SLICE_RESOURCE, namespace),
    pods: (namespace) => resource<Pod>(POD_RESOURCE, namespace),
    namespace: () => createNamespace(admin, "svc-test"),
    addNode: (name, spec) => createNode(nodes, name, spec),
    setReady: (name, status) => setNodeReady(nodes, name, status),
    events: (namespace, name) => eventsAbout(admin, reportingComponent(serviceLoadBalancer), namespace, name),
    async startController(options = {}) {
      const config = { ...CONFIG, ...options.config };
      const run = await startController(serviceLoadBalancer, { ...options, kubeconfig, config });
      const handle: RunningController = {
        ...run,
        stop: async () => {
          running.delete(handle);
          await run.stop();
        },
      };
      running.add(handle);
      return handle;
    },
    async stop() {
      for (const each of running) await each.stop();
      await plane.stop();
    },
  };
}
