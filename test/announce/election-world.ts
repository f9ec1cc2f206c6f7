// The election whole on an announce world (world.ts): two agents whose Node objects prove their bridge segment, a
// pool on the bridge, and the address pool controller in this process with its own RBAC (as test/pools runs it).
import type { Node } from "kubernetes-types/core/v1.js";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { servicePools } from "../../src/pools/definition.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { controllerKubeconfig, createNode, startController } from "../kube/controller-harness.ts";
import { installPoolCrd } from "../pools/crd.ts";
import type { RunningController } from "../pools/world.ts";
import { type AgentNode, type AnnounceWorld, NAMESPACE, SUBNET } from "./world.ts";

export interface Election {
  /** node-a and node-b, in slots 0 and 1. */
  nodes: AgentNode[];
  /** Holds the pool "bridge". */
  pools: Resource<LoadBalancerIPPool>;
  running: RunningController;
}

/** Its nodes and controller stop with the world and `running.stop()`. */
export async function startElection(world: AnnounceWorld, addresses: string[]): Promise<Election> {
  const { plane } = world;
  const nodeObjects = new Resource<Node>(plane.admin, NODE_RESOURCE);
  for (const [slot, name] of ["node-a", "node-b"].entries()) {
    const internal = [`${SUBNET.v4}.${slot + 1}`, `${SUBNET.v6}:${slot + 1}`];
    await createNode(nodeObjects, name, { addresses: internal.map((address) => ({ type: "InternalIP", address })) });
  }
  // Each agent keeps its bridge addresses as its InternalIPs: what proves its Lease's segments to the controller.
  const flags = [`--internal-ip-cidr=${SUBNET.v4}.0/24,${SUBNET.v6}:/64`];
  const nodes = [await world.addNode("node-a", 0, flags), await world.addNode("node-b", 1, flags)];
  await installPoolCrd(plane);
  const pools = new Resource<LoadBalancerIPPool>(plane.admin, POOL_RESOURCE);
  await pools.create({ ...POOL_TYPE, metadata: { name: "bridge" }, spec: { addresses } });
  const kubeconfig = await controllerKubeconfig(plane, "local-ccm-pools-controller", servicePools.rbac.cluster, {
    [NAMESPACE]: servicePools.rbac.releaseNamespace ?? [],
  });
  const running = await startController(servicePools, {
    kubeconfig,
    config: { claimClassless: false, bgp: false, bgpClaimClassless: false, leaseNamespace: NAMESPACE },
  });
  return { nodes, pools, running };
}
