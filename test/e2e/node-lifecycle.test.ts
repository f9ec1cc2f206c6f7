// The node-lifecycle-controller as users run it: `helm install` of charts/local-ccm on three real
// kubelets (localcluster/), with short timeouts. Its two replicas land on different nodes even when
// the chart is applied while only one node is initialised; one leads; a powered-off node that
// cluster-autoscaler marked for deletion goes NotReady (kube-controller-manager) and is deleted by the
// leader (the audit log names the pod), the other nodes untouched; powering off the leader's node hands
// the lease to the other replica, which then deletes that node.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { waitFor } from "../../localcluster/wait.ts";
import {
  clusterAuditEvents,
  CHART,
  findNode,
  formatMemory,
  getNode,
  hasTaint,
  nodeWrites,
  podMemory,
  readyStatus,
} from "./cluster-objects.ts";
import { tokenPod } from "../../localcluster/audit.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";
import { listPods, NAMESPACE, podReady } from "../../localcluster/project.ts";

const CONTROLLER = "node-lifecycle-controller";
const CONTROLLER_USER = `system:serviceaccount:${NAMESPACE}:${CONTROLLER}`;
const AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler";
/** Short enough for a test: NotReady for 5 s, checked every 2 s, one 1-s ping; a 6-s lease. */
const VALUES = {
  // Keeps the nodes the test did not initialise itself uninitialised while the scheduler places the
  // replicas, deterministically (the agents would otherwise race the scheduler).
  "controller.removeTaint": "false",
  "nodeLifecycleController.controller.notReadyTimeout": "5s",
  "nodeLifecycleController.controller.reconcileInterval": "2s",
  "nodeLifecycleController.controller.pingTimeout": "1s",
  "nodeLifecycleController.controller.pingCount": "1",
  "nodeLifecycleController.controller.leaderElection.leaseDuration": "6s",
  "nodeLifecycleController.controller.leaderElection.renewDeadline": "4s",
  "nodeLifecycleController.controller.leaderElection.retryPeriod": "1s",
};

describe("the node-lifecycle-controller on real kubelets", () => {
  let cluster: Cluster;
  let installed: Date;
  /** The replicas by pod name → node name, as scheduled at install. */
  let replicas: Map<string, string>;
  before(async () => {
    cluster = await startCluster({ nodes: 3, audit: true });
  });
  after(async () => {
    await cluster?.stop();
  });

  const leaseHolder = async () => {
    const lease = await cluster.admin.request<{ spec: { holderIdentity?: string } }>({
      method: "GET",
      path: `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases/${CONTROLLER}`,
    });
    // The identity is <pod name>_<random>.
    return lease.spec.holderIdentity?.replace(/_[0-9a-f]+$/, "");
  };
  const waitForLeader = (among: string[], timeoutMs: number) =>
    waitFor(
      `a lease holder among ${among.join(", ")}`,
      async () => {
        const holder = await leaseHolder();
        return holder !== undefined && among.includes(holder) && holder;
      },
      timeoutMs,
      250,
    );

  /** Taints the node for deletion as cluster-autoscaler does, powers it off, waits for its deletion. */
  async function scaleDownAndPowerOff(name: string): Promise<{ notReadyMs: number; deletedMs: number }> {
    await cluster.kubectl(["taint", "node", name, `${AUTOSCALER_TAINT}=${Math.floor(Date.now() / 1000)}:NoSchedule`]);
    const killed = Date.now();
    await cluster.killNode(name);
    await waitFor(`${name} NotReady`, async () => readyStatus(await getNode(cluster, name)) !== "True", 90_000, 500);
    const notReadyMs = Date.now() - killed;
    await waitFor(`${name} deleted`, async () => (await findNode(cluster, name)) === undefined, 90_000, 500);
    return { notReadyMs, deletedMs: Date.now() - killed };
  }

  /** Who deleted Nodes since the install, by pod of the token. */
  const deletions = async () =>
    nodeWrites(await clusterAuditEvents(cluster, installed))
      .filter((event) => event.verb === "delete")
      .map((event) => ({ node: event.objectRef?.name, user: event.user.username, pod: tokenPod(event).pod }));

  test("its two replicas run on different nodes, also when applied while only one node is initialised", async (t) => {
    await cluster.kubectl(["taint", "node", "node-0", `${UNINITIALIZED_TAINT}-`]);
    installed = new Date(Date.now() - 1000);
    const sets = Object.entries(VALUES).flatMap(([key, value]) => ["--set", `${key}=${value}`]);
    await cluster.helm(["install", "local-ccm", CHART, `--namespace=${NAMESPACE}`, ...sets]);
    const pods = await waitFor(
      "two Ready replicas",
      async () => {
        const ready = (await listPods(cluster, CONTROLLER)).filter(podReady);
        return ready.length === 2 && ready;
      },
      90_000,
      250,
    );
    replicas = new Map(pods.map((pod) => [pod.metadata?.name ?? "", pod.spec?.nodeName ?? ""]));
    assert.equal(new Set(replicas.values()).size, 2, `replicas on ${[...replicas.values()].join(", ")}`);
    for (const name of ["node-1", "node-2"])
      assert.ok(hasTaint(await getNode(cluster, name), UNINITIALIZED_TAINT), `${name} is still uninitialised`);
    for (const pod of pods)
      t.diagnostic(`${pod.spec?.nodeName}: controller ${formatMemory(await podMemory(cluster, pod))}`);
  });

  test("one replica leads; a powered-off autoscaler-tainted node is deleted, the others untouched", async (t) => {
    const leader = await waitForLeader([...replicas.keys()], 30_000);
    const victim = cluster.nodes.map((n) => n.name).find((name) => ![...replicas.values()].includes(name)) as string;
    const { notReadyMs, deletedMs } = await scaleDownAndPowerOff(victim);
    t.diagnostic(`${victim}: NotReady ${(notReadyMs / 1000).toFixed(1)} s and deleted ${(deletedMs / 1000).toFixed(1)} s ` +
      "after the power loss");
    assert.deepEqual(await deletions(), [{ node: victim, user: CONTROLLER_USER, pod: leader }]);
    for (const name of replicas.values()) {
      const node = await getNode(cluster, name);
      assert.equal(readyStatus(node), "True", name);
      assert.ok(!hasTaint(node, AUTOSCALER_TAINT), name);
    }
  });

  test("powering off the leader's node hands the lease to the other replica, which deletes that node", async (t) => {
    const leader = await waitForLeader([...replicas.keys()], 30_000);
    const [other] = [...replicas.keys()].filter((pod) => pod !== leader) as [string];
    const leaderNode = replicas.get(leader) as string;
    const survivor = replicas.get(other) as string;
    const killed = Date.now();
    const deleted = scaleDownAndPowerOff(leaderNode);
    deleted.catch(() => {}); // awaited below; a failure must not go unhandled while the lease is awaited
    await waitForLeader([other], 60_000);
    t.diagnostic(`lease taken by the other replica ${((Date.now() - killed) / 1000).toFixed(1)} s after the power loss`);
    const { deletedMs } = await deleted;
    t.diagnostic(`${leaderNode} deleted ${(deletedMs / 1000).toFixed(1)} s after the power loss`);
    const byOther = (await deletions()).filter((deletion) => deletion.node === leaderNode);
    assert.deepEqual(byOther, [{ node: leaderNode, user: CONTROLLER_USER, pod: other }]);
    assert.equal(readyStatus(await getNode(cluster, survivor)), "True");
  });
});
