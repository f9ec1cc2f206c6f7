// A world for the address pool controller's tests: a real control plane with the chart's LoadBalancerIPPool CRD,
// Nodes with addresses, Services in namespaces of their own, and the controller run in this process as
// ../kube/controller-harness.ts runs controllers (its own RBAC rules only, trimmed informers).
import type { Node, NodeAddress, Service } from "kubernetes-types/core/v1.js";
import { createLogger } from "../../src/cli/log.ts";
import { Registry } from "../../src/cli/metrics.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { EventRecorder } from "../../src/kube/events.ts";
import {
  type KubeObject,
  NODE_RESOURCE,
  Resource,
  type ResourceRef,
  SERVICE_RESOURCE,
} from "../../src/kube/resource.ts";
import { PoolController } from "../../src/pools/controller.ts";
import { servicePools } from "../../src/pools/definition.ts";
import { createPoolsMetrics, type PoolsMetrics } from "../../src/pools/metrics.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { controllerKubeconfig, createNamespace, eventsAbout, trimmedInformer } from "../kube/controller-harness.ts";
import { installPoolCrd } from "./crd.ts";

export interface RunningController {
  controller: PoolController;
  metrics: PoolsMetrics;
  registry: Registry;
  /** Patches (Services, their status, pools' status) the controller's client has sent. */
  writes(): number;
  stop(): Promise<void>;
}

export interface PoolWorld {
  plane: ControlPlane;
  pools: Resource<LoadBalancerIPPool>;
  services(namespace: string): Resource<Service>;
  /** A fresh namespace. */
  namespace(): Promise<string>;
  createPool(name: string, spec: LoadBalancerIPPool["spec"]): Promise<void>;
  addNode(name: string, addresses: NodeAddress[]): Promise<void>;
  /** The reasons and messages of the Events about a Service. */
  events(namespace: string, name: string): Promise<{ type: string; reason: string; message: string }[]>;
  startController(options?: { claimClassless?: boolean }): Promise<RunningController>;
  stop(): Promise<void>;
}

export async function startPoolWorld(): Promise<PoolWorld> {
  const plane = await startControlPlane();
  await installPoolCrd(plane);
  const kubeconfig = await controllerKubeconfig(plane, "local-ccm-pools-controller", servicePools.rbac.cluster);
  const resource = <T extends KubeObject>(ref: ResourceRef, namespace?: string) =>
    new Resource<T>(plane.admin, namespace === undefined ? ref : { ...ref, namespace });
  const pools = resource<LoadBalancerIPPool>(POOL_RESOURCE);
  const running = new Set<RunningController>();
  return {
    plane,
    pools,
    services: (namespace) => resource<Service>(SERVICE_RESOURCE, namespace),
    namespace: () => createNamespace(plane.admin, "pools-test"),
    async createPool(name, spec) {
      await pools.create({ ...POOL_TYPE, metadata: { name }, spec });
    },
    async addNode(name, addresses) {
      const nodes = resource<Node>(NODE_RESOURCE);
      await nodes.create({ metadata: { name } });
      await nodes.patch(name, "merge", { status: { addresses } }, { subresource: "status" });
    },
    events: (namespace, name) => eventsAbout(plane.admin, namespace, name),
    async startController(options = {}) {
      const config = await loadClientConfig({ kubeconfig, env: {} });
      let writes = 0;
      const client = new KubeClient(config, {
        component: "pools-controller-test",
        onResponse: (verb) => {
          if (verb === "patch") writes++;
        },
      });
      const log = createLogger({ verbosity: 2, format: "text", write: () => {} });
      const watches = servicePools.watches(undefined as never);
      const services = trimmedInformer(client, watches.services);
      const nodes = trimmedInformer(client, watches.nodes);
      const poolCache = trimmedInformer(client, watches.pools);
      // Events through a client of their own: only the controller's writes are counted.
      const eventsClient = new KubeClient(config, { component: "pools-controller-test" });
      const events = new EventRecorder(eventsClient, { component: "pools-controller-test" });
      const registry = new Registry();
      const metrics = createPoolsMetrics(registry, "test_pools_");
      const controller = new PoolController({
        config: { claimClassless: options.claimClassless ?? false },
        dryRun: false,
        services,
        nodes,
        pools: poolCache,
        serviceResource: (namespace) => new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace }),
        poolResource: new Resource<LoadBalancerIPPool>(client, POOL_RESOURCE),
        isLeader: () => true,
        events,
        log,
        metrics,
      });
      services.addHandlers(controller.serviceHandlers);
      nodes.addHandlers(controller.nodeHandlers);
      poolCache.addHandlers(controller.poolHandlers);
      const informers = [services, nodes, poolCache];
      for (const each of informers) each.start();
      await Promise.all(informers.map((each) => each.waitForSync()));
      controller.start();
      const handle: RunningController = {
        controller,
        metrics,
        registry,
        writes: () => writes,
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
