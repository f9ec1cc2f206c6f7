// The node-lifecycle-controller as users run it: `helm install` of charts/local-ccm (default placement) on
// four real kubelets (localcluster/), two of them control-plane nodes, with short timeouts. Its two replicas
// land on the two control-plane nodes, one each, even when the chart is applied while only one node is
// initialised, and on no worker; one leads; a powered-off worker that cluster-autoscaler marked for deletion
// goes NotReady (kube-controller-manager) and is deleted by the leader (the audit log names the pod), the
// other nodes untouched; powering off the leader's node hands the lease to the other replica, which keeps that
// control-plane node (never deleted, even dead and autoscaler-tainted) and deletes the next dead worker.
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
  leaseHolder,
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
/**
 * Short enough for a test: NotReady for 5 s, checked every 2 s, one 1-s ping. A 12-s lease with an 8-s renew deadline:
 * short for the takeover case, and long enough that a busy machine's slow renewal hands the lease over only there.
 */
const VALUES = {
  // Keeps the nodes the test did not initialise itself uninitialised while the scheduler places the
  // replicas, deterministically (the agents would otherwise race the scheduler).
  "agent.removeTaint": "false",
  "nodeLifecycleController.controller.notReadyTimeout": "5s",
  "nodeLifecycleController.controller.reconcileInterval": "2s",
  "nodeLifecycleController.controller.pingTimeout": "1s",
  "nodeLifecycleController.controller.pingCount": "1",
  "nodeLifecycleController.controller.leaderElection.leaseDuration": "12s",
  "nodeLifecycleController.controller.leaderElection.renewDeadline": "8s",
  "nodeLifecycleController.controller.leaderElection.retryPeriod": "1s",
};

describe("the node-lifecycle-controller on real kubelets", () => {
  let cluster: Cluster;
  let installed: Date;
  /** The replicas by pod name → node name, as scheduled at install. */
  let replicas: Map<string, string>;
  before(async () => {
    cluster = await startCluster({ nodes: 4, controlPlaneNodes: 2, audit: true });
  });
  after(async () => {
    await cluster?.stop();
  });

  const waitForLeader = (among: string[], timeoutMs: number) =>
    waitFor(
      `a lease holder among ${among.join(", ")}`,
      async () => {
        const holder = await leaseHolder(cluster);
        return holder !== undefined && among.includes(holder) && holder;
      },
      timeoutMs,
      250,
    );

  /** Taints the node for deletion as cluster-autoscaler does, powers it off, waits for its deletion. */
  const markForDeletion = (name: string) =>
    cluster.kubectl(["taint", "node", name, `${AUTOSCALER_TAINT}=${Math.floor(Date.now() / 1000)}:NoSchedule`]);

  async function scaleDownAndPowerOff(name: string): Promise<{ notReadyMs: number; deletedMs: number }> {
    await markForDeletion(name);
    const killed = Date.now();
    await cluster.killNode(name);
    await waitFor(`${name} NotReady`, async () => readyStatus(await getNode(cluster, name)) !== "True", 90_000, 500);
    const notReadyMs = Date.now() - killed;
    await waitFor(`${name} deleted`, async () => (await findNode(cluster, name)) === undefined, 90_000, 500);
    return { notReadyMs, deletedMs: Date.now() - killed };
  }

  const controlPlaneNodes = () => cluster.nodes.filter((node) => node.controlPlane).map((node) => node.name);
  const workers = () => cluster.nodes.filter((node) => !node.controlPlane).map((node) => node.name);

  /** Who deleted Nodes since the install, by pod of the token. */
  const deletions = async () =>
    nodeWrites(await clusterAuditEvents(cluster, installed))
      .filter((event) => event.verb === "delete")
      .map((event) => ({ node: event.objectRef?.name, user: event.user.username, pod: tokenPod(event).pod }));

  test("its two replicas run on the two control-plane nodes, also when applied with one initialised", async (t) => {
    assert.deepEqual(controlPlaneNodes(), ["node-0", "node-1"]);
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
    assert.deepEqual([...replicas.values()].sort(), controlPlaneNodes(), "one replica on each control-plane node");
    for (const name of ["node-1", ...workers()])
      assert.ok(hasTaint(await getNode(cluster, name), UNINITIALIZED_TAINT), `${name} is still uninitialised`);
    for (const pod of pods)
      t.diagnostic(`${pod.spec?.nodeName}: controller ${formatMemory(await podMemory(cluster, pod))}`);
  });

  test("one replica leads; a powered-off autoscaler-tainted worker is deleted, the others untouched", async (t) => {
    const leader = await waitForLeader([...replicas.keys()], 30_000);
    const [victim] = workers() as [string];
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

  test("leader's node off: the other replica takes the lease, keeps that node, deletes a dead worker", async (t) => {
    const leader = await waitForLeader([...replicas.keys()], 30_000);
    const [other] = [...replicas.keys()].filter((pod) => pod !== leader) as [string];
    const leaderNode = replicas.get(leader) as string;
    const survivor = replicas.get(other) as string;
    // Marked for deletion too: only the control-plane rule keeps it.
    await markForDeletion(leaderNode);
    const killed = Date.now();
    await cluster.killNode(leaderNode);
    await waitForLeader([other], 60_000);
    t.diagnostic(`lease taken by the other replica ${((Date.now() - killed) / 1000).toFixed(1)} s after the power loss`);

    const [, worker] = workers() as [string, string]; // the first went in the test before
    const { deletedMs } = await scaleDownAndPowerOff(worker);
    t.diagnostic(`${worker} deleted ${(deletedMs / 1000).toFixed(1)} s after its power loss, by the new leader`);
    const byOther = (await deletions()).filter((deletion) => deletion.node === worker);
    assert.deepEqual(byOther, [{ node: worker, user: CONTROLLER_USER, pod: other }]);

    // The dead control-plane node has been NotReady for longer than the timeout, seen by the new leader's
    // reconciles (every 2 s), and is still there: no DELETE was even tried.
    await waitFor(
      `${leaderNode} NotReady for 15 s`,
      async () => {
        const ready = (await getNode(cluster, leaderNode)).status?.conditions?.find((c) => c.type === "Ready");
        return ready?.status !== "True" && Date.now() - Date.parse(ready?.lastTransitionTime ?? "") >= 15_000;
      },
      120_000,
      1000,
    );
    assert.ok(await findNode(cluster, leaderNode), `${leaderNode} is kept`);
    const tried = (await clusterAuditEvents(cluster, installed)).filter(
      (event) => event.verb === "delete" && event.objectRef?.resource === "nodes" && event.objectRef.name === leaderNode,
    );
    assert.deepEqual(tried, []);
    assert.equal(readyStatus(await getNode(cluster, survivor)), "True");
  });
});
