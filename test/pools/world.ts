// A world for the address pool controller's tests: a real control plane with the chart's LoadBalancerIPPool CRD,
// Nodes with addresses, Services in namespaces of their own, and the controller run in this process on real
// informers that keep only the fields it declares, as a service account granted only its RBAC rules (a missing
// grant fails the tests).
import type { Event, Namespace, Node, NodeAddress, Service } from "kubernetes-types/core/v1.js";
import { createLogger } from "../../src/cli/log.ts";
import { Registry } from "../../src/cli/metrics.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { EventRecorder } from "../../src/kube/events.ts";
import { IDENTITY_FIELDS, projection } from "../../src/kube/fields.ts";
import { Informer } from "../../src/kube/informer.ts";
import {
  type KubeObject,
  NODE_RESOURCE,
  Resource,
  type ResourceRef,
  SERVICE_RESOURCE,
} from "../../src/kube/resource.ts";
import type { Watch } from "../../src/kube/sharedinformers.ts";
import { PoolController } from "../../src/pools/controller.ts";
import { servicePools } from "../../src/pools/definition.ts";
import { createPoolsMetrics, type PoolsMetrics } from "../../src/pools/metrics.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { installPoolCrd } from "./crd.ts";

export interface RunningController {
  controller: PoolController;
  metrics: PoolsMetrics;
  registry: Registry;
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

let namespaces = 0;

const ACCOUNT = { namespace: "kube-system", name: "local-ccm-pools-controller" };

/** The controller's service account, bound to a ClusterRole of exactly its RBAC rules. */
async function controllerKubeconfig(plane: ControlPlane): Promise<string> {
  const rbac = "rbac.authorization.k8s.io";
  const role = { apiVersion: `${rbac}/v1`, kind: "ClusterRole", metadata: { name: ACCOUNT.name } };
  const binding = {
    apiVersion: `${rbac}/v1`,
    kind: "ClusterRoleBinding",
    metadata: { name: ACCOUNT.name },
    roleRef: { apiGroup: rbac, kind: "ClusterRole", name: ACCOUNT.name },
    subjects: [{ kind: "ServiceAccount", ...ACCOUNT }],
  };
  const items = [{ ...role, rules: servicePools.rbac.cluster }, binding];
  await plane.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items }));
  return plane.serviceAccountKubeconfig(ACCOUNT);
}

export async function startPoolWorld(): Promise<PoolWorld> {
  const plane = await startControlPlane();
  await installPoolCrd(plane);
  const kubeconfig = await controllerKubeconfig(plane);
  const resource = <T extends KubeObject>(ref: ResourceRef, namespace?: string) =>
    new Resource<T>(plane.admin, namespace === undefined ? ref : { ...ref, namespace });
  const pools = resource<LoadBalancerIPPool>(POOL_RESOURCE);
  const running = new Set<RunningController>();
  return {
    plane,
    pools,
    services: (namespace) => resource<Service>(SERVICE_RESOURCE, namespace),
    async namespace() {
      const name = `pools-test-${process.pid}-${++namespaces}`;
      await resource<Namespace>({ group: "", version: "v1", plural: "namespaces" }).create({ metadata: { name } });
      return name;
    },
    async createPool(name, spec) {
      await pools.create({ ...POOL_TYPE, metadata: { name }, spec });
    },
    async addNode(name, addresses) {
      const nodes = resource<Node>(NODE_RESOURCE);
      await nodes.create({ metadata: { name } });
      await nodes.patch(name, "merge", { status: { addresses } }, { subresource: "status" });
    },
    async events(namespace, name) {
      const events = resource<Event>({ group: "", version: "v1", plural: "events" }, namespace);
      const { items } = await events.list({ fieldSelector: `involvedObject.name=${name}` });
      return items.map(({ type, reason, message }) => ({
        type: type ?? "",
        reason: reason ?? "",
        message: message ?? "",
      }));
    },
    async startController(options = {}) {
      const config = await loadClientConfig({ kubeconfig, env: {} });
      const client = new KubeClient(config, { component: "pools-controller-test" });
      const log = createLogger({ verbosity: 2, format: "text", write: () => {} });
      const informer = <T extends KubeObject>({ resource: ref, keep }: Watch<T>) =>
        new Informer(new Resource<T>(client, ref), {
          transform: typeof keep === "function" ? keep : projection<T>([...IDENTITY_FIELDS, ...keep]),
        });
      const watches = servicePools.watches(undefined as never);
      const services = informer(watches.services);
      const nodes = informer(watches.nodes);
      const poolCache = informer(watches.pools);
      const events = new EventRecorder(client, { component: "pools-controller-test" });
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
        async stop() {
          running.delete(handle);
          await controller.stop();
          await Promise.all(informers.map((each) => each.stop()));
          await events.flush();
          client.close();
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
