// The layer-2 part of bench:lb's world: what the chart adds with loadBalancer.l2.enabled (the pool CRD, the
// controller's RBAC for pools, Services and its Leases, its --controllers and --lb-l2-lease-namespace flags), one
// LoadBalancerIPPool, and an announcer Lease for every node as the agents keep them (announcement.ts).
//
// Every Lease exists, with segments that hold the pool, but only a sample is renewed each second: renewing all
// 5,000 would be 5,000 writes a second, more than this 2-core machine's apiserver takes. The others expire one
// Lease duration after the controller first sees them, so the Services are assigned among the sample.
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { PodSpec } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { ensureBinaries } from "../localcluster/build.ts";
import { DEPLOY_VALUES, helmTemplate } from "../scripts/render-manifests.ts";
import { microTime } from "../src/kube/leaderelection.ts";
import { leaseResource, Resource } from "../src/kube/resource.ts";
import {
  ANNOUNCER_LEASE_LABEL,
  announcerLeaseName,
  LEASE_DURATION_SECONDS,
  RENEW_INTERVAL_MS,
  SEGMENTS_ANNOTATION,
} from "../src/pools/announcement.ts";
import { POOL_RESOURCE, POOL_TYPE, type LoadBalancerIPPool } from "../src/pools/pool.ts";
import { installPoolCrd } from "../test/pools/crd.ts";
import type { World } from "../test/lifecycle/world.ts";

/** 4,096 addresses, off the nodes' 198.18.100.0–198.18.119.255 (nodes.ts). */
export const POOL_CIDR = "198.18.192.0/20";
/** What every announcer Lease says its node's link holds: the nodes and the pool. */
export const SEGMENT = "198.18.0.0/16";

export interface L2World {
  /** The controller's flags as the chart renders them with loadBalancer.l2.enabled. */
  args: string[];
  /** Renews these nodes' Leases every RENEW_INTERVAL_MS from now on. */
  renew(nodes: string[]): void;
  /** Stops renewing a node's Lease; resolves with when its last renewal was answered (performance.now()). */
  stopRenewing(node: string): Promise<number>;
  /** Renewals that failed so far. */
  failedRenewals(): number;
  stop(): void;
}

/** The chart with loadBalancer.l2.enabled: its controller RBAC applied, its Deployment's arguments returned. */
async function chartWithL2(world: World): Promise<string[]> {
  const { helm } = await ensureBinaries();
  const rendered = await helmTemplate(helm, [
    ...DEPLOY_VALUES, // the controller runs here, where no metrics Secret is mounted at the args' paths
    "--set=loadBalancer.l2.enabled=true",
    "--show-only=templates/nlc-rbac.yaml",
    "--show-only=templates/nlc-deployment.yaml",
  ]);
  const documents = rendered.split(/^---\n/m);
  await world.plane.kubectl(["apply", "-f", "-"], documents.filter((doc) => doc.includes("nlc-rbac.yaml")).join("---\n"));
  const containers = documents
    .flatMap((doc) => parseAllDocuments(doc))
    .flatMap((doc) => (doc.toJS() as { spec?: { template?: { spec?: PodSpec } } } | null)?.spec?.template?.spec?.containers ?? []);
  const args = containers.find((c) => c.name === "node-lifecycle-controller")?.args ?? [];
  if (!args.some((arg) => arg.startsWith("--controllers="))) throw new Error(`no --controllers in ${args.join(" ")}`);
  return args;
}

/** The CRD, RBAC and pool; a Lease for each of `nodes` (created `inFlight` at a time). */
export async function startL2World(
  world: World,
  nodes: string[],
  inPool: (items: Iterable<string>, each: (node: string) => Promise<unknown>) => Promise<void>,
): Promise<L2World> {
  await installPoolCrd(world.plane);
  const args = await chartWithL2(world);
  const leaseNamespace = /^--lb-l2-lease-namespace=(.+)$/.exec(args.find((a) => a.startsWith("--lb-l2-")) ?? "")?.[1];
  if (!leaseNamespace) throw new Error(`no --lb-l2-lease-namespace in ${args.join(" ")}`);
  const pools = new Resource<LoadBalancerIPPool>(world.plane.admin, POOL_RESOURCE);
  await pools.create({ ...POOL_TYPE, metadata: { name: "bench" }, spec: { addresses: [POOL_CIDR] } });
  const leases = new Resource<Lease>(world.plane.admin, leaseResource(leaseNamespace));
  await inPool(nodes, (node) =>
    leases.create({
      metadata: {
        name: announcerLeaseName(node),
        labels: { [ANNOUNCER_LEASE_LABEL]: "true" },
        annotations: { [SEGMENTS_ANNOTATION]: SEGMENT },
      },
      spec: { holderIdentity: node, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime: microTime(new Date()) },
    }),
  );

  // Each renewed Lease: when its last renewal was answered, and the one in flight (never two at once).
  const renewing = new Map<string, { answeredAt: number; inFlight?: Promise<void> }>();
  let failed = 0;
  const renewOne = (node: string) => {
    const state = renewing.get(node);
    if (!state || state.inFlight) return;
    const patch = { spec: { renewTime: microTime(new Date()) } };
    state.inFlight = leases
      .patch(announcerLeaseName(node) ?? "", "merge", patch)
      .then(
        () => void (state.answeredAt = performance.now()),
        () => void failed++,
      )
      .finally(() => (state.inFlight = undefined));
  };
  const timer = setInterval(() => {
    for (const node of renewing.keys()) renewOne(node);
  }, RENEW_INTERVAL_MS);
  return {
    args,
    renew(nodes) {
      for (const node of nodes) renewing.set(node, { answeredAt: performance.now() });
      for (const node of nodes) renewOne(node);
    },
    async stopRenewing(node) {
      const state = renewing.get(node);
      renewing.delete(node);
      await state?.inFlight;
      return state?.answeredAt ?? performance.now();
    },
    failedRenewals: () => failed,
    stop: () => clearInterval(timer),
  };
}
