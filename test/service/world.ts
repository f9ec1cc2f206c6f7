// A world for the service controller's tests: a real control plane, Nodes registered with the status a kubelet
// and the agent would write, Services in namespaces of their own, and the controller run in this process on real
// informers that keep only the fields it declares, as a service account granted only its RBAC rules (a missing
// grant fails the tests), with a client of its own whose writes are counted.
import type { Node, NodeAddress, Service, Taint } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { createLogger } from "../../src/cli/log.ts";
import { Registry } from "../../src/cli/metrics.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { EventRecorder } from "../../src/kube/events.ts";
import { type KubeObject, Resource, type ResourceRef } from "../../src/kube/resource.ts";
import { ServiceController } from "../../src/service/controller.ts";
import type { ServiceConfig } from "../../src/service/decide.ts";
import { DEFAULT_RESERVED_PORTS, parsePortRange } from "../../src/service/flags.ts";
import { createServiceMetrics } from "../../src/service/metrics.ts";
import { serviceLoadBalancer } from "../../src/service/definition.ts";
import { ENDPOINT_SLICE_RESOURCE, NODE_RESOURCE, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { controllerKubeconfig, createNamespace, eventsAbout, trimmedInformer } from "../kube/controller-harness.ts";

export const CONFIG: ServiceConfig = {
  claimClassless: false,
  maxNodes: 16,
  reservedPorts: DEFAULT_RESERVED_PORTS.split(",").map(parsePortRange),
};

export interface NodeSpec {
  addresses: NodeAddress[];
  ready?: "True" | "False" | "Unknown";
  labels?: Record<string, string>;
  taints?: Taint[];
  unschedulable?: boolean;
}

export interface RunningController {
  controller: ServiceController;
  /** Patches of Services (object or status) the controller's client has sent. */
  writes(): number;
  /** Sets whether it leads (it starts as `leader`). */
  lead(leader: boolean): void;
  stop(): Promise<void>;
}

export interface ControllerOptions {
  config?: Partial<ServiceConfig>;
  /** Default true. */
  leader?: boolean;
  dryRun?: boolean;
}

export interface ServiceWorld {
  plane: ControlPlane;
  nodes: Resource<Node>;
  services(namespace: string): Resource<Service>;
  endpointSlices(namespace: string): Resource<EndpointSlice>;
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
    namespace: () => createNamespace(admin, "svc-test"),
    async addNode(name, spec) {
      await nodes.create({
        metadata: { name, labels: spec.labels ?? {} },
        spec: { taints: spec.taints ?? [], unschedulable: spec.unschedulable },
      });
      const now = new Date().toISOString();
      const ready = { type: "Ready", status: spec.ready ?? "True", lastHeartbeatTime: now, lastTransitionTime: now };
      await nodes.patch(name, "merge", { status: { addresses: spec.addresses, conditions: [ready] } }, {
        subresource: "status",
      });
    },
    async setReady(name, status) {
      const now = new Date().toISOString();
      const condition = { type: "Ready", status, lastHeartbeatTime: now, lastTransitionTime: now };
      await nodes.patch(name, "strategic", { status: { conditions: [condition] } }, { subresource: "status" });
    },
    events: (namespace, name) => eventsAbout(admin, namespace, name),
    async startController(options = {}) {
      const config = await loadClientConfig({ kubeconfig, env: {} });
      let writes = 0;
      const client = new KubeClient(config, {
        component: "service-controller-test",
        onResponse: (verb) => {
          if (verb === "patch") writes++;
        },
      });
      const log = createLogger({ verbosity: 2, format: "text", write: () => {} });
      const watches = serviceLoadBalancer.watches(undefined as never);
      const services = trimmedInformer(client, watches.services);
      const nodeCache = trimmedInformer(client, watches.nodes);
      const endpointSlices = trimmedInformer(client, watches.endpointSlices);
      // Events through a client of their own: only the writes to Services are counted.
      const eventsClient = new KubeClient(config, { component: "service-controller-test" });
      const events = new EventRecorder(eventsClient, { component: "service-controller-test" });
      let leader = options.leader ?? true;
      const controller = new ServiceController({
        config: { ...CONFIG, ...options.config },
        dryRun: options.dryRun ?? false,
        services,
        nodes: nodeCache,
        endpointSlices,
        serviceResource: (namespace) => new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace }),
        isLeader: () => leader,
        events,
        log,
        metrics: createServiceMetrics(new Registry(), "test_service_"),
      });
      services.addHandlers(controller.serviceHandlers);
      nodeCache.addHandlers(controller.nodeHandlers);
      endpointSlices.addHandlers(controller.endpointSliceHandlers);
      const informers = [services, nodeCache, endpointSlices];
      for (const each of informers) each.start();
      await Promise.all(informers.map((each) => each.waitForSync()));
      controller.start();
      const handle: RunningController = {
        controller,
        writes: () => writes,
        lead: (next) => {
          leader = next;
        },
        async stop() {
          running.delete(handle);
          await controller.stop();
          await Promise.all(informers.map((each) => each.stop()));
          await events.flush();
          client.close();
          eventsClient.close();
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
