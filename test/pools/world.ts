// A world for the address pool controller's tests: a real control plane with the chart's LoadBalancerIPPool CRD,
// Nodes with addresses, Services in namespaces of their own, and the controller run in this process as
// ../kube/controller-harness.ts runs controllers (its own RBAC rules only, trimmed informers).
import type { Node, NodeAddress, Service } from "kubernetes-types/core/v1.js";
import {
  type KubeObject,
  NODE_RESOURCE,
  Resource,
  type ResourceRef,
  SERVICE_RESOURCE,
} from "../../src/kube/resource.ts";
import { PoolController } from "../../src/pools/controller.ts";
import { servicePools } from "../../src/pools/definition.ts";
import type { PoolsMetrics } from "../../src/pools/metrics.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import {
  type ControllerRun,
  controllerKubeconfig,
  createNamespace,
  eventsAbout,
  startController,
} from "../kube/controller-harness.ts";
import { installPoolCrd } from "./crd.ts";

/** Its writes are patches of Services, of their status and of pools' status. */
export type RunningController = ControllerRun<PoolController, PoolsMetrics>;

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
      const config = { claimClassless: options.claimClassless ?? false };
      const run = await startController(servicePools, { kubeconfig, config });
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
