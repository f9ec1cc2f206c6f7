// A world for the address pool controller's tests: a real control plane with the chart's LoadBalancerIPPool CRD,
// Nodes with addresses, Services in namespaces of their own, announcer Leases renewed as the agents renew them (in
// a namespace of their own), EndpointSlices, and the controller run in this process as
// ../kube/controller-harness.ts runs controllers (its own RBAC rules only, trimmed informers).
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, NodeAddress, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { microTime } from "../../src/kube/leaderelection.ts";
import {
  ENDPOINT_SLICE_RESOURCE,
  type KubeObject,
  leaseResource,
  NODE_RESOURCE,
  Resource,
  type ResourceRef,
  SERVICE_RESOURCE,
} from "../../src/kube/resource.ts";
import { SERVICE_NAME_LABEL } from "../../src/loadbalancer/endpoints.ts";
import {
  ANNOUNCER_LEASE_LABEL,
  announcerLeaseName,
  GATEWAYS_ANNOTATION,
  APPLIED_ANNOTATION,
  CONFLICTS_ANNOTATION,
  LEASE_DURATION_SECONDS,
  RENEW_INTERVAL_MS,
  SEGMENTS_ANNOTATION,
} from "../../src/pools/announcement.ts";
import { PoolController } from "../../src/pools/controller.ts";
import { servicePools } from "../../src/pools/definition.ts";
import type { PoolsMetrics } from "../../src/pools/metrics.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import {
  type ControllerRun,
  controllerKubeconfig,
  createNamespace,
  createNode,
  eventsAbout,
  reportingComponent,
  setNodeReady,
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
  /** A Ready Node. */
  addNode(name: string, addresses: NodeAddress[]): Promise<void>;
  setReady(name: string, ready: "True" | "False"): Promise<void>;
  /** A node's announcer Lease, renewed every RENEW_INTERVAL_MS as its agent would, until stopped (`spec` added). */
  announce(
    node: string,
    segments: string[],
    gateways?: string[],
    spec?: Partial<Lease["spec"]>,
  ): Promise<AnnouncerLease>;
  /** An EndpointSlice of a Service with a ready endpoint on each of `nodes`. */
  endpoints(namespace: string, service: string, nodes: string[]): Promise<void>;
  /** The reasons, messages and counts of the Events about a Service. */
  events(namespace: string, name: string): Promise<{ type: string; reason: string; message: string; count: number }[]>;
  /** It leads unless `leader` is false. */
  startController(options?: { claimClassless?: boolean; bgp?: boolean; bgpClaimClassless?: boolean; leader?: boolean }): Promise<RunningController>;
  /** Runs `body` with a leading controller started for it, and stops the controller after. */
  withController<T>(body: (running: RunningController) => Promise<T>): Promise<T>;
  stop(): Promise<void>;
}

/** A node's announcer Lease as its agent keeps it. */
export interface AnnouncerLease {
  /** What the next renewals say the node has applied (APPLIED_ANNOTATION), as an agent whose watch reached it. */
  acknowledge(version: string | undefined): void;
  /** Writes what the node says another host answers for (CONFLICTS_ANNOTATION; null removes it), as it may. */
  report(conflicts: string | null): Promise<void>;
  stop(): void;
}

/** A node's announcer Lease in `leases`' namespace, created and renewed every RENEW_INTERVAL_MS as its agent would. */
export async function keepAnnouncerLease(
  leases: Resource<Lease>,
  node: string,
  segments: string[],
  gateways: string[] = [],
  spec: Partial<Lease["spec"]> = {},
): Promise<AnnouncerLease> {
  const name = announcerLeaseName(node) ?? "";
  let applied: string | undefined;
  const renew = () =>
    leases.patch(name, "merge", {
      metadata: { annotations: { [APPLIED_ANNOTATION]: applied ?? null } },
      spec: { renewTime: microTime(new Date()) },
    });
  await leases.create({
    metadata: {
      name,
      labels: { [ANNOUNCER_LEASE_LABEL]: "true" },
      annotations: { [SEGMENTS_ANNOTATION]: segments.join(","), [GATEWAYS_ANNOTATION]: gateways.join(",") },
    },
    spec: {
      holderIdentity: node,
      leaseDurationSeconds: LEASE_DURATION_SECONDS,
      renewTime: microTime(new Date()),
      ...spec,
    },
  });
  // A renewal that fails (the world stopping) is the agent losing the API: the Lease just ages.
  const timer = setInterval(() => renew().catch(() => {}), RENEW_INTERVAL_MS);
  return {
    acknowledge: (version) => {
      applied = version;
    },
    report: async (conflicts) =>
      void (await leases.patch(name, "merge", { metadata: { annotations: { [CONFLICTS_ANNOTATION]: conflicts } } })),
    stop: () => clearInterval(timer),
  };
}

/** `controllerManager`: run kube-controller-manager too (it aggregates the built-in `edit` ClusterRole). */
export async function startPoolWorld(options: { controllerManager?: boolean } = {}): Promise<PoolWorld> {
  const plane = await startControlPlane({ controllerManager: options.controllerManager });
  await installPoolCrd(plane);
  const leaseNamespace = await createNamespace(plane.admin, "pools-leases");
  const kubeconfig = await controllerKubeconfig(plane, "local-ccm-pools-controller", servicePools.rbac.cluster, {
    [leaseNamespace]: servicePools.rbac.releaseNamespace ?? [],
  });
  const resource = <T extends KubeObject>(ref: ResourceRef, namespace?: string) =>
    new Resource<T>(plane.admin, namespace === undefined ? ref : { ...ref, namespace });
  const pools = resource<LoadBalancerIPPool>(POOL_RESOURCE);
  const running = new Set<RunningController>();
  const leases = new Resource<Lease>(plane.admin, leaseResource(leaseNamespace));
  const renewers = new Set<{ stop(): void }>();
  const world: PoolWorld = {
    plane,
    pools,
    services: (namespace) => resource<Service>(SERVICE_RESOURCE, namespace),
    namespace: () => createNamespace(plane.admin, "pools-test"),
    async createPool(name, spec) {
      await pools.create({ ...POOL_TYPE, metadata: { name }, spec });
    },
    addNode: (name, addresses) => createNode(resource<Node>(NODE_RESOURCE), name, { addresses }),
    setReady: (name, ready) => setNodeReady(resource<Node>(NODE_RESOURCE), name, ready),
    async announce(node, segments, gateways, spec) {
      const announcer = await keepAnnouncerLease(leases, node, segments, gateways, spec);
      renewers.add(announcer);
      return {
        acknowledge: announcer.acknowledge,
        report: announcer.report,
        stop: () => {
          announcer.stop();
          renewers.delete(announcer);
        },
      };
    },
    async endpoints(namespace, service, nodes) {
      await resource<EndpointSlice>(ENDPOINT_SLICE_RESOURCE, namespace).create({
        metadata: { name: `${service}-ready`, labels: { [SERVICE_NAME_LABEL]: service } },
        addressType: "IPv4",
        endpoints: nodes.map((nodeName, i) => ({
          addresses: [`10.244.0.${i + 1}`],
          nodeName,
          conditions: { ready: true },
        })),
      });
    },
    events: (namespace, name) => eventsAbout(plane.admin, reportingComponent(servicePools), namespace, name),
    async startController(options = {}) {
      const config = {
        claimClassless: options.claimClassless ?? false,
        bgp: options.bgp ?? false,
        bgpClaimClassless: options.bgpClaimClassless ?? false,
        leaseNamespace,
      };
      const run = await startController(servicePools, { kubeconfig, config, leader: options.leader });
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
    async withController(body) {
      const running = await world.startController();
      try {
        return await body(running);
      } finally {
        await running.stop();
      }
    },
    async stop() {
      for (const announcer of renewers) announcer.stop();
      for (const each of running) await each.stop();
      await plane.stop();
    },
  };
  return world;
}
