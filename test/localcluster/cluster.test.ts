// The local cluster, tested against itself: real kubelets register as a cluster with
// --cloud-provider=external expects, node-0 is a control-plane node as kubeadm makes one, a real pod of the
// project image runs (on the worker) and reaches the apiserver with its projected token, the apiserver runs
// NodeRestriction as production clusters do (a worker's kubelet credentials reach only its own Node and
// pods), nothing a node or the client host sends leaves the machine, a killed node goes NotReady, and neither
// stop() nor a killed run leaves anything behind. Measured figures go to the diagnostics.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { CONTROL_PLANE_LABELS, CONTROL_PLANE_TAINT } from "../../localcluster/node.ts";
import { leftoversOf, readRecord } from "../../localcluster/slots.ts";
import { run } from "../../localcluster/exec.ts";
import { PAUSE_IMAGE } from "../../localcluster/pause.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { KUBERNETES_VERSION } from "../../localcluster/versions.ts";
import { createNetwork } from "../netns/netns.ts";
import { waitFor } from "../../localcluster/wait.ts";

interface Node {
  metadata: { name: string; labels: Record<string, string> };
  spec: { taints?: { key: string; effect: string }[] };
  status: {
    nodeInfo: { kubeletVersion: string; containerRuntimeVersion: string };
    addresses: { type: string; address: string }[];
    conditions: { type: string; status: string; reason: string }[];
  };
}

const CLUSTER_MODULE = path.resolve(import.meta.dirname, "../../localcluster/cluster.ts");
const UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized";
const rssMiB = (pid: number | undefined) =>
  Math.round(Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]) / 1024);

describe("local cluster", () => {
  let cluster: Cluster;
  let readySeconds: number;
  before(async () => {
    const started = Date.now();
    cluster = await startCluster({ nodes: 2 });
    readySeconds = (Date.now() - started) / 1000;
  });
  after(async () => {
    await cluster?.stop();
  });

  const getNode = async (name: string) =>
    JSON.parse(await cluster.kubectl(["get", "node", name, "-o", "json"])) as Node;

  test("both Nodes register: kubelet v1.36.3 on containerd, the uninitialized taint, the node IP", async (t) => {
    t.diagnostic(`2 nodes Ready ${readySeconds.toFixed(1)}s after startCluster() (image build included)`);
    for (const node of cluster.nodes) {
      const got = await getNode(node.name);
      assert.equal(got.status.nodeInfo.kubeletVersion, KUBERNETES_VERSION);
      assert.match(got.status.nodeInfo.containerRuntimeVersion, /^containerd:\/\//);
      assert.deepEqual(
        got.spec.taints?.filter((taint) => taint.key === UNINITIALIZED).map((taint) => taint.effect),
        ["NoSchedule"],
      );
      assert.deepEqual(
        got.status.addresses.filter((a) => a.type === "InternalIP").map((a) => a.address),
        [node.ip],
      );
      const pids = node.pids();
      t.diagnostic(`${node.name}: kubelet ${rssMiB(pids.kubelet)} MiB RSS, containerd ${rssMiB(pids.containerd)} MiB`);
    }
  });

  test("each kubelet's device-plugin socket is its node's own, not the machine's shared folder", async () => {
    const hardCoded = "/var/lib/kubelet/device-plugins/kubelet.sock";
    const inodes = cluster.nodes.map((node) => {
      const own = statSync(path.join(cluster.dir, "nodes", node.name, "device-plugins", "kubelet.sock"));
      const seenByKubelet = statSync(`/proc/${node.pids().kubelet}/root${hardCoded}`);
      assert.equal(seenByKubelet.ino, own.ino, `${node.name}'s kubelet listens in its node's folder`);
      return own.ino;
    });
    assert.equal(new Set(inodes).size, cluster.nodes.length);
    const machine = statSync(hardCoded, { throwIfNoEntry: false });
    assert.ok(!machine || !inodes.includes(machine.ino), "no kubelet's socket is the machine's");
  });

  test("node-0 is a control-plane node as kubeadm makes one: labelled by the admin, tainted NoSchedule", async () => {
    const roles = (node: Node) =>
      Object.entries(node.metadata.labels).filter(([key]) => Object.keys(CONTROL_PLANE_LABELS).includes(key));
    const controlPlaneTaints = (node: Node) =>
      (node.spec.taints ?? []).filter((taint) => taint.key === CONTROL_PLANE_TAINT.key).map((taint) => taint.effect);
    const [first, second] = [await getNode("node-0"), await getNode("node-1")];
    assert.deepEqual(Object.fromEntries(roles(first)), CONTROL_PLANE_LABELS);
    assert.deepEqual(controlPlaneTaints(first), [CONTROL_PLANE_TAINT.effect]);
    assert.deepEqual(roles(second), []);
    assert.deepEqual(controlPlaneTaints(second), []);
    assert.deepEqual(cluster.nodes.map((node) => node.controlPlane), [true, false]);
  });

  test("a node's default route points at the bridge, so route-source detection finds its public address", async () => {
    const node = cluster.node("node-0");
    assert.match(await node.exec("ip", ["route", "get", "8.8.8.8"]), new RegExp(`dev eth0 src ${node.publicIP} `));
  });

  test("with the taint removed, a pod of the project image runs, logs, and uses its projected token", async () => {
    for (const node of cluster.nodes) await cluster.kubectl(["taint", "node", node.name, `${UNINITIALIZED}-`]);
    // In-cluster config as the programs read it: the Service env, the projected token and CA.
    const script = `
      const fs = require("fs");
      const dir = "/var/run/secrets/kubernetes.io/serviceaccount";
      const req = require("https").request({
        host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT, method: "POST",
        path: "/apis/authentication.k8s.io/v1/selfsubjectreviews", ca: fs.readFileSync(dir + "/ca.crt"),
        headers: {
          authorization: "Bearer " + fs.readFileSync(dir + "/token", "utf8"),
          "content-type": "application/json",
        },
      }, (res) => {
        let body = ""; res.on("data", (c) => body += c);
        res.on("end", () => {
          console.log("hello from the project image as " + JSON.parse(body).status.userInfo.username);
        });
      });
      req.end(JSON.stringify({ apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" }));`;
    const pod = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "hello", namespace: "default" },
      spec: {
        restartPolicy: "Never",
        containers: [
          { name: "hello", image: cluster.projectImage, imagePullPolicy: "Never", command: ["node", "-e", script] },
        ],
      },
    };
    await cluster.kubectl(["create", "-f", "-"], JSON.stringify(pod));
    const phase = await waitFor(
      "the pod to finish",
      async () => {
        const got = JSON.parse(await cluster.kubectl(["get", "pod", "hello", "-o", "json"])) as {
          status: { phase: string };
        };
        return ["Succeeded", "Failed"].includes(got.status.phase) && got.status.phase;
      },
      60_000,
      500,
    );
    const logs = await cluster.kubectl(["logs", "hello"]);
    assert.equal(phase, "Succeeded", logs);
    assert.equal(logs.trim(), "hello from the project image as system:serviceaccount:default:default");
    const got = JSON.parse(await cluster.kubectl(["get", "pod", "hello", "-o", "json"])) as {
      spec: { volumes: { projected?: { sources: { serviceAccountToken?: unknown }[] } }[] };
      status: { podIP: string; hostIP: string };
    };
    assert.ok(got.spec.volumes.some((v) => v.projected?.sources.some((s) => s.serviceAccountToken)));
    const node = cluster.nodes.find((n) => n.ip === got.status.hostIP);
    assert.ok(node, `pod on ${got.status.hostIP}`);
    assert.equal(node.name, "node-1", "the control-plane taint keeps it off node-0");
    assert.ok(got.status.podIP.startsWith(node.podCIDR.replace(/0\/24$/, "")), "not a hostNetwork pod");
  });

  test("NodeRestriction: a worker's kubelet mints tokens and writes Nodes only for its own node", async (t) => {
    // The worker's own credentials, as an attacker who took the machine has them.
    const worker = new KubeClient(await loadClientConfig({ kubeconfig: cluster.node("node-1").kubeletKubeconfig }), {
      component: "test-kubelet-node-1",
      maxRetries: 0,
    });
    t.after(() => worker.close());
    // One pod per node with the same ServiceAccount: the Node authorizer then lets node-1 ask for that
    // account's tokens at all (its own pod uses it), and only NodeRestriction looks at which pod a token binds.
    const pods = new Map<string, { name: string; uid: string }>();
    for (const node of cluster.nodes) {
      const name = `token-target-${node.name}`;
      const pod = await cluster.admin.request<{ metadata: { uid: string } }>({
        method: "POST",
        path: "/api/v1/namespaces/default/pods",
        body: {
          metadata: { name },
          spec: {
            nodeName: node.name,
            tolerations: [{ operator: "Exists" }],
            containers: [{ name: "pause", image: PAUSE_IMAGE, imagePullPolicy: "Never" }],
          },
        },
      });
      pods.set(node.name, { name, uid: pod.metadata.uid });
    }
    const tokenFor = (node: string) =>
      worker.request<{ status: { token: string } }>({
        method: "POST",
        path: "/api/v1/namespaces/default/serviceaccounts/default/token",
        body: {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenRequest",
          spec: { boundObjectRef: { apiVersion: "v1", kind: "Pod", ...pods.get(node) } },
        },
      });
    // The Node authorizer learns of node-1's pod from its watch: wait for the grant, not a fixed time.
    const own = await waitFor("node-1 to get a token for its own pod", () => tokenFor("node-1").catch(() => undefined),
      30_000, 250);
    const claims = JSON.parse(Buffer.from(own.status.token.split(".")[1] ?? "", "base64url").toString()) as {
      "kubernetes.io": { node: { name: string }; pod: { name: string } };
    };
    assert.equal(claims["kubernetes.io"].node.name, "node-1");
    assert.equal(claims["kubernetes.io"].pod.name, "token-target-node-1");

    /** The refusal's message; fails if the request was allowed or failed otherwise. */
    const refusal = async (request: Promise<unknown>) => {
      const err = await request.then(() => assert.fail("allowed"), (e: unknown) => e);
      assert.ok(isApiError(err, "Forbidden"), String(err));
      return err.message;
    };
    assert.match(await refusal(tokenFor("node-0")), /node requested token bound to a pod scheduled on a different node/);

    const patchNode = (name: string, body: unknown, subresource = "") =>
      worker.request({
        method: "PATCH",
        path: `/api/v1/nodes/${name}${subresource}`,
        query: { dryRun: "All" },
        contentType: "application/merge-patch+json",
        body,
      });
    const condition = { type: "Ready", status: "True", reason: "Forged", message: "all is well" };
    const status = { status: { conditions: [condition] } };
    const labels = { metadata: { labels: { "example.com/x": "y" } } };
    await patchNode("node-1", status, "/status");
    await patchNode("node-1", labels);
    for (const [body, subresource] of [[status, "/status"], [labels, ""]] as const) {
      const refused = await refusal(patchNode("node-0", body, subresource));
      assert.match(refused, /node "node-1" is not allowed to modify node "node-0"/);
    }
    // Nor may it make itself a control-plane node, where the controller's replicas run.
    const role = { metadata: { labels: { "node-role.kubernetes.io/control-plane": "" } } };
    const selfPromotion = await refusal(patchNode("node-1", role));
    assert.match(selfPromotion, /not allowed to modify labels: node-role\.kubernetes\.io\/control-plane/);
    for (const { name } of pods.values())
      await cluster.admin.request({ method: "DELETE", path: `/api/v1/namespaces/default/pods/${name}` });
  });

  test("nothing a node or the client host sends leaves: the root namespace forwards nothing", async (t) => {
    // "Elsewhere": a namespace the root namespace reaches directly, as it would reach the Internet.
    const net = await createNetwork();
    t.after(() => net.remove());
    const outside = await net.host();
    await net.link("root", outside, { addressesA: ["198.19.127.1/30"], addressesB: ["198.19.127.2/30"] });
    const listener = spawn("nsenter", [
      `--net=/run/netns/${outside.name}`,
      process.execPath,
      "-e",
      `const s = require("dgram").createSocket("udp4"); s.on("message", (m) => console.log(String(m)));
       s.bind(9999, () => console.log("listening"));`,
    ]);
    t.after(() => listener.kill("SIGKILL"));
    let received = "";
    listener.stdout.on("data", (chunk: Buffer) => {
      received += chunk;
    });
    await waitFor("the listener", () => received.includes("listening"));
    const send = (message: string) =>
      `require("dgram").createSocket("udp4").send("${message}", 9999, "198.19.127.2", (e) => process.exit(e ? 1 : 0))`;
    const node = cluster.node("node-0");
    for (let i = 0; i < 3; i++) {
      await node.exec(process.execPath, ["-e", send("from-node")]);
      await cluster.client.exec(process.execPath, ["-e", send("from-client")]);
    }
    await run(process.execPath, ["-e", send("from-root")]);
    await waitFor("the root namespace's own packet (the listener works)", () => received.includes("from-root"));
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(!received.includes("from-node"), "a node's packet was forwarded off the bridge");
    assert.ok(!received.includes("from-client"), "the client host's packet was forwarded off the bridge");
    // The kernel's own verdict for a packet arriving from the bridge, whatever ip_forward says.
    const { bridge, table } = { bridge: `lccm${cluster.slot}br`, table: 19800 + cluster.slot };
    assert.match(await run("ip", ["route", "show", "table", String(table)]), /^blackhole default/);
    await assert.rejects(run("ip", ["route", "get", "8.8.8.8", "from", node.ip, "iif", bridge]));
  });

  test("kill-node: kube-controller-manager marks the node NotReady, the other stays Ready", async (t) => {
    const killed = Date.now();
    await cluster.killNode("node-1");
    const pids = cluster.node("node-1").pids();
    await waitFor("kubelet, kube-proxy and containerd gone", () =>
      [pids.kubelet, pids.kubeProxy, pids.containerd].every((pid) => {
        try {
          process.kill(pid as number, 0);
          return false;
        } catch {
          return true;
        }
      }),
    );
    assert.match(await run("ip", ["link", "show", `lccm${cluster.slot}v1`]), /state DOWN/);
    const ready = (node: Node) => node.status.conditions.find((c) => c.type === "Ready");
    const condition = await waitFor(
      "node-1 NotReady",
      async () => {
        const c = ready(await getNode("node-1"));
        return c?.status !== "True" && c;
      },
      60_000,
      1000,
    );
    t.diagnostic(`node-1 NotReady ${((Date.now() - killed) / 1000).toFixed(1)}s after the power loss`);
    assert.equal(condition.reason, "NodeStatusUnknown");
    assert.equal(ready(await getNode("node-0"))?.status, "True");
  });

  test("stop() leaves nothing: processes, mounts, namespaces, cgroups, rule, bridge, folder", async (t) => {
    const { slot, dir } = cluster;
    const stopped = Date.now();
    await cluster.stop();
    t.diagnostic(`teardown took ${Date.now() - stopped} ms`);
    assert.deepEqual(leftoversOf(slot, dir), []);
    const ours = (await run("ps", ["-eo", "args"])).split("\n").filter((line) => line.includes(dir));
    assert.deepEqual(ours, []);
  });
});

test("the next start removes what a killed run left behind", async (t) => {
  const child = spawn(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      `import { startCluster } from ${JSON.stringify(CLUSTER_MODULE)};
       const c = await startCluster({ nodes: 1, projectImage: false });
       console.log(JSON.stringify({ slot: c.slot, dir: c.dir }));`,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  t.after(() => child.kill("SIGKILL"));
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk;
  });
  const killed = await waitFor("the child's cluster", () => output.includes("}") && output, 120_000, 250);
  child.kill("SIGKILL");
  const { slot, dir } = JSON.parse(killed) as { slot: number; dir: string };
  await waitFor("the child to die", () => child.exitCode !== null || child.signalCode !== null);
  const left = await waitFor("its leftovers", () => {
    const found = leftoversOf(slot, dir);
    return found.some((thing) => thing.startsWith("netns")) && found;
  });
  for (const kind of ["bridge", "netns", "cgroup", "rule", "folder", "record"])
    assert.ok(left.some((thing) => thing.startsWith(kind)), `a killed run leaves a ${kind}: ${left.join(", ")}`);

  const next = await startCluster({ nodes: 1, projectImage: false });
  t.after(() => next.stop());
  // In the same slot, the names are the new cluster's: that the start succeeded at all (ip link add of
  // the bridge fails when it exists) shows the old ones went, and leftoversOf() checks the old folder.
  if (next.slot === slot) assert.equal(readRecord(slot)?.dir, next.dir);
  assert.deepEqual(leftoversOf(slot, dir), []);
});

test("a node with serverTLSBootstrap asks for its serving certificate with a kubelet-serving CSR", async (t) => {
  const nodes = [{ name: "bootstrapped", serverTLSBootstrap: true }];
  const cluster = await startCluster({ nodes, projectImage: false });
  t.after(() => cluster.stop());
  const csr = await waitFor("the kubelet's CSR", async () => {
    const list = JSON.parse(await cluster.kubectl(["get", "csr", "-o", "json"])) as {
      items: { spec: { signerName: string; username: string }; status: { certificate?: string } }[];
    };
    return list.items.find((item) => item.spec.signerName === "kubernetes.io/kubelet-serving");
  });
  assert.equal(csr.spec.username, "system:node:bootstrapped");
  assert.equal(csr.status.certificate, undefined, "nobody approved it: no certificate yet");
});
