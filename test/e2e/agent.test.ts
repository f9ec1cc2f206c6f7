// The agent as users run it: real pods of the project image on real kubelets (localcluster/), installed
// with `helm install` of charts/local-ccm and with `kubectl apply -f deploy/`. Each install must give
// every node a Ready agent pod that removes the uninitialized taint of its own node (the audit log
// names the pod and node of the token of every write; on the control-plane node node-0 kubeadm's
// control-plane taint stays, and the controller's replicas run there only), an ExternalIP from that
// node's own routes and kubelet's --node-ip first among the InternalIPs, with `kubectl logs` working. The pod's own
// projected token can write only its own Node's addresses (the node-scope admission policy), and an
// agent started with a cold page cache initialises its node under the shipped memory limit. Its health
// and metrics listen on every address of the node, metrics answering nobody without a granted token.
// Memory figures of the pods, and how long the cold start took, go to the diagnostics: the page-cache drop is
// machine-wide and other test files run meanwhile, so a time budget here would measure them too.
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";
import type { DaemonSet } from "kubernetes-types/apps/v1.js";
import type { Node, Pod } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { type Cluster, type ClusterNode, startCluster } from "../../localcluster/cluster.ts";
import { CONTROL_PLANE_TAINT } from "../../localcluster/node.ts";
import { run } from "../../localcluster/exec.ts";
import { waitFor } from "../../localcluster/wait.ts";
import {
  addressesOf,
  clusterAuditEvents,
  CHART,
  DEPLOY,
  formatMemory,
  getNode,
  hasTaint,
  nodeWrites,
  podMemory,
  taintUninitialized,
} from "./cluster-objects.ts";
import { tokenPod } from "../../localcluster/audit.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";
import { listPods, NAMESPACE, podReady } from "../../localcluster/project.ts";

const AGENT = "local-ccm";
const AGENT_USER = `system:serviceaccount:${NAMESPACE}:${AGENT}`;
/** Generous: the cold start usually takes a few seconds, but shares two cores with whatever else runs. */
const COLD_START_LIMIT_MS = 120_000;
/** Cold starts in a row (bench:cluster makes 20): each drops the page cache and recreates the DaemonSet. */
const COLD_STARTS = 4;

describe("the agent on real kubelets", () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster({ nodes: 2, audit: true });
  });
  after(async () => {
    await cluster?.stop();
  });

  /** The agent pod of every node, once each is Ready. */
  const readyAgents = () =>
    waitFor(
      "a Ready agent pod on every node",
      async () => {
        const pods = (await listPods(cluster, AGENT)).filter(podReady);
        const byNode = new Map(pods.map((pod) => [pod.spec?.nodeName ?? "", pod]));
        return cluster.nodes.every((node) => byNode.has(node.name)) && byNode;
      },
      90_000,
      250,
    );

  /** The address the node's kernel picks towards the agent's default target, from inside its namespace. */
  const routeSource = async (node: ClusterNode) =>
    /\bsrc (\S+)/.exec(await node.exec("ip", ["route", "get", "8.8.8.8"]))?.[1];

  /** Nodes as kubelet registers them: tainted, kubelet's addresses only. */
  async function resetNodes(): Promise<void> {
    for (const node of cluster.nodes) {
      await taintUninitialized(cluster, node.name);
      const addresses = [
        { type: "InternalIP", address: node.ip },
        { type: "Hostname", address: node.name },
      ];
      await cluster.kubectl([
        "patch", "node", node.name, "--subresource=status", "--type=merge",
        "-p", JSON.stringify({ status: { addresses } }),
      ]);
      assert.deepEqual(addressesOf(await getNode(cluster, node.name), "ExternalIP"), []);
    }
  }

  /** What every install must do, on every node; `since`: when it was installed. */
  async function assertEveryNodeInitialisedByItsOwnPod(t: TestContext, since: Date): Promise<void> {
    const agents = await readyAgents();
    for (const node of cluster.nodes) {
      const got = await waitFor("the taint removed", async () => {
        const n = await getNode(cluster, node.name);
        return !hasTaint(n, UNINITIALIZED_TAINT) && addressesOf(n, "ExternalIP").length > 0 && n;
      });
      assert.equal(hasTaint(got, CONTROL_PLANE_TAINT.key), node.controlPlane, `${node.name}: only its own taint went`);
      const pod = agents.get(node.name) as Pod;
      // Proof of who did it: every write to this Node by the agent's ServiceAccount carried a token
      // bound to the agent pod on this very node, and the taint removal (a PATCH of the Node itself,
      // not its status) is among them.
      const writes = nodeWrites(await clusterAuditEvents(cluster, since)).filter(
        (event) => event.user.username === AGENT_USER && event.objectRef?.name === node.name,
      );
      assert.ok(writes.some((event) => event.verb === "patch" && event.objectRef?.subresource === undefined));
      for (const write of writes) assert.deepEqual(tokenPod(write), { pod: pod.metadata?.name, node: node.name });

      // The node's own routing decides: its kernel's source address towards the agent's default target.
      const source = await routeSource(node);
      assert.equal(source, node.publicIP);
      assert.deepEqual(addressesOf(got, "ExternalIP"), [source]);
      assert.equal(got.metadata?.annotations?.["alpha.kubernetes.io/provided-node-ip"], node.ip);
      assert.equal(addressesOf(got, "InternalIP")[0], node.ip);

      const logs = await cluster.kubectl(["logs", "-n", NAMESPACE, pod.metadata?.name ?? ""]);
      assert.match(logs, new RegExp(`local-ccm started.*node="?${node.name}\\b`));
      // Health (which kubelet's probes just passed: the pod is Ready) and secure metrics listen on every
      // address (the agent starts before its Node has one); on the public address /metrics refuses a caller
      // without a token.
      assert.equal(pod.status?.podIP, node.ip);
      const listening = (await node.exec("ss", ["-Hltn"]))
        .split("\n")
        .map((line) => line.trim().split(/\s+/)[3] ?? "")
        .filter((local) => /:1026[35]$/.test(local));
      assert.deepEqual(listening.sort(), ["*:10263", "*:10265"]);
      const anonymous = await node.exec("curl", [
        "-sk", "-o", "/dev/null", "-w", "%{http_code}", `https://${node.publicIP}:10265/metrics`,
      ]);
      assert.equal(anonymous, "401");
      t.diagnostic(`${node.name}: agent ${formatMemory(await podMemory(cluster, pod))}`);
    }
  }

  test("helm install: an agent pod Ready on every node initialises its own node", async (t) => {
    // No --set: the image is on every node already, so pullPolicy IfNotPresent pulls nothing.
    const since = new Date(Date.now() - 1000);
    const started = Date.now();
    await cluster.helm(["install", "local-ccm", CHART, `--namespace=${NAMESPACE}`]);
    await assertEveryNodeInitialisedByItsOwnPod(t, since);
    t.diagnostic(`helm install to every node initialised and checked: ${Date.now() - started} ms`);
    const controllers = await waitFor(
      "the controller's replicas scheduled",
      async () => {
        const pods = await listPods(cluster, "node-lifecycle-controller");
        return pods.length === 2 && pods.every((pod) => pod.spec?.nodeName) && pods;
      },
      60_000,
      250,
    );
    for (const pod of controllers) {
      // The chart's default placement: no worker hosts the controller.
      assert.ok(cluster.node(pod.spec?.nodeName ?? "").controlPlane, `controller on ${pod.spec?.nodeName}`);
      if (podReady(pod)) t.diagnostic(`controller on ${pod.spec?.nodeName}: ${formatMemory(await podMemory(cluster, pod))}`);
    }
  });

  test("the agent pod's own projected token may write its own Node's addresses, nothing else", async () => {
    const agents = await readyAgents();
    const [own, other] = cluster.nodes as [ClusterNode, ClusterNode];
    const pod = agents.get(own.name) as Pod;
    // The token kubelet mounted into the running pod, read from the kubelet's pods folder on the host.
    const volumes = path.join(cluster.dir, "nodes", own.name, "kubelet/pods", pod.metadata?.uid ?? "",
      "volumes/kubernetes.io~projected");
    const [volume] = (await readdir(volumes)).filter((name) => name.startsWith("kube-api-access-"));
    const token = (await readFile(path.join(volumes, volume ?? "", "token"), "utf8")).trim();
    const asPodFlags = [
      "--kubeconfig=/dev/null", `--server=${cluster.server}`,
      `--certificate-authority=${cluster.controlPlane.caPath}`, `--token=${token}`,
    ];
    const asPod = (args: string[]) => run(cluster.controlPlane.binaries.kubectl, [...asPodFlags, ...args]);
    const whoami = JSON.parse(await asPod(["auth", "whoami", "-o", "json"])) as {
      status: { userInfo: { username: string; extra: Record<string, string[]> } };
    };
    assert.equal(whoami.status.userInfo.username, AGENT_USER);
    assert.deepEqual(whoami.status.userInfo.extra["authentication.kubernetes.io/node-name"], [own.name]);
    assert.deepEqual(whoami.status.userInfo.extra["authentication.kubernetes.io/pod-name"], [pod.metadata?.name]);

    // Dry runs: admission runs in full, nothing is stored. Addresses go as the agent writes them: the
    // Node as read, with new status.addresses, PUT to nodes/status, as field manager local-ccm (the
    // agent's User-Agent names it so; the policy lets no other manager's ownership entry change).
    const addresses = (node: ClusterNode) => [
      { type: "InternalIP", address: node.ip },
      { type: "ExternalIP", address: "198.18.0.7" },
      { type: "Hostname", address: node.name },
    ];
    // The Node is read again on a Conflict, as the agent does: kubelet may write it between our read and
    // our write, and a Conflict is answered before admission runs (CI saw one).
    const putAddresses = async (node: ClusterNode): Promise<string> => {
      const read = await getNode(cluster, node.name);
      const body = JSON.stringify({ ...read, status: { ...read.status, addresses: addresses(node) } });
      return run(
        cluster.controlPlane.binaries.kubectl,
        [...asPodFlags, "replace", "--raw", `/api/v1/nodes/${node.name}/status?dryRun=All&fieldManager=local-ccm`, "-f", "-"],
        { input: body },
      ).catch((error: unknown) => {
        if (/\(Conflict\)/.test(String(error))) return putAddresses(node);
        throw error;
      });
    };
    const written = JSON.parse(await putAddresses(own)) as Node;
    assert.deepEqual(written.status?.addresses, addresses(own));
    await assert.rejects(putAddresses(other), new RegExp(`local-ccm on node ${own.name} may not change node ${other.name}`));
    const ownSpec = (patch: unknown) =>
      asPod(["patch", "node", own.name, "--type=merge", "--dry-run=server", "-p", JSON.stringify(patch)]);
    await assert.rejects(ownSpec({ spec: { unschedulable: true } }), /local-ccm may change only .* spec\.unschedulable/s);
    await assert.rejects(ownSpec({ metadata: { labels: { "example.com/role": "x" } } }), /metadata\.labels/);
  });

  test("kubectl apply -f deploy/: the same, from the static manifests", async (t) => {
    await cluster.helm(["uninstall", "local-ccm", `--namespace=${NAMESPACE}`, "--wait"]);
    await waitFor("the agent pods gone", async () => (await listPods(cluster, AGENT)).length === 0, 60_000, 250);
    await resetNodes();
    const since = new Date(Date.now() - 1000);
    const started = Date.now();
    await cluster.kubectl(["apply", "-f", DEPLOY]);
    await assertEveryNodeInitialisedByItsOwnPod(t, since);
    t.diagnostic(`kubectl apply to every node initialised and checked: ${Date.now() - started} ms`);
  });

  test("cold page cache: agent pods initialise their nodes under the shipped limit, no OOM kill, no restart", async (t) => {
    const daemonSet = path.join(DEPLOY, "daemonset.yaml");
    const shipped = parseAllDocuments(await readFile(daemonSet, "utf8"))
      .map((document) => document.toJS() as DaemonSet)
      .find((object) => object.kind === "DaemonSet");
    const limit = shipped?.spec?.template.spec?.containers[0]?.resources?.limits?.memory;
    assert.ok(limit, "deploy/daemonset.yaml sets a memory limit");
    // Nothing else may keep the `node` binary's pages mapped: the controller runs the same image.
    await cluster.kubectl(["delete", "-n", NAMESPACE, "deployment/node-lifecycle-controller", "--wait"]);
    for (let round = 1; round <= COLD_STARTS; round++) {
      await cluster.kubectl(["delete", "-n", NAMESPACE, "daemonset/local-ccm", "--wait", "--ignore-not-found"]);
      await waitFor("the pods gone", async () =>
        (await listPods(cluster, AGENT)).length + (await listPods(cluster, "node-lifecycle-controller")).length === 0,
      60_000, 250);
      for (const node of cluster.nodes) await taintUninitialized(cluster, node.name);
      await run("sh", ["-c", "sync && echo 1 > /proc/sys/vm/drop_caches"]);
      const started = Date.now();
      await cluster.kubectl(["apply", "-f", daemonSet]);
      const took = new Map<string, number>();
      await waitFor(
        `every node initialised (cold start ${round})`,
        async () => {
          for (const node of cluster.nodes) {
            if (!took.has(node.name) && !hasTaint(await getNode(cluster, node.name), UNINITIALIZED_TAINT))
              took.set(node.name, Date.now() - started);
          }
          return took.size === cluster.nodes.length;
        },
        COLD_START_LIMIT_MS,
        50,
      );
      const agents = await readyAgents();
      for (const node of cluster.nodes) {
        const pod = agents.get(node.name) as Pod;
        const memory = await podMemory(cluster, pod);
        t.diagnostic(`cold start ${round}, ${node.name}: initialised ${took.get(node.name)} ms after kubectl apply, ` +
          `limit ${limit}; ${formatMemory(memory)}`);
        // The pod read the binary's pages from disk, one fault at a time: the page cache really was cold. (What the
        // pod holds of them now says little: the agent hands start-up's pages back once its node is done.)
        assert.ok(memory.majorFaults >= 200, `page faults that read the disk: ${memory.majorFaults}`);
        const logs = await cluster.kubectl(["logs", "-n", NAMESPACE, pod.metadata?.name as string]);
        assert.match(logs, /start-up pages released/, `${node.name}: the agent keeps start-up's pages`);
        // An OOM kill of the agent (the container's only process) restarts the container.
        const [status] = pod.status?.containerStatuses ?? [];
        assert.equal(status?.restartCount, 0, `${node.name}: ${JSON.stringify(status?.lastState)}`);
      }
    }
  });
});
