// `npm start`: the demo. With no cluster given it starts a local control plane, builds a small node
// network in namespaces, registers Nodes the way kubelet --cloud-provider=external does, runs the
// agent and the node-lifecycle-controller, shows the nodes before and after and the events, watches an
// unreachable autoscaler-tainted node being deleted, and stops everything it started.
// With `-- --kubeconfig=FILE --node-name=NAME` it runs the agent once against that cluster instead.
import { spawn } from "node:child_process";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { registerNode, startAgent, startWorld, type World } from "../test/agent/harness.ts";
import { KUBERNETES_VERSION } from "../localcluster/versions.ts";

const root = path.resolve(import.meta.dirname, "..");
const args = process.argv.slice(2);

if (args.some((a) => a.startsWith("--kubeconfig"))) {
  // Against a real cluster: one reconcile of this machine's Node, then exit with the agent's code.
  const child = spawn(process.execPath, [path.join(root, "src/bin/local-ccm.ts"), "--run-once", ...args], { stdio: "inherit" });
  child.on("exit", (code) => process.exit(code ?? 1));
} else if (process.getuid?.() !== 0) {
  console.error("npm start builds its node network from network namespaces and needs root; run it as root,\nor pass -- --kubeconfig=FILE --node-name=NAME to run the agent once against your cluster.");
  process.exit(2);
} else {
  await demo();
}

async function demo(): Promise<void> {
  const step = (text: string) => console.log(`\n\x1b[1m== ${text}\x1b[0m`);
  const world: World = await startWorld();
  const processes: { stop(): Promise<unknown> }[] = [];
  try {
    const { plane } = world;
    const kubectl = async (...a: string[]) => console.log((await plane.kubectl(a)).trimEnd());
    step(`control plane: kube-apiserver ${KUBERNETES_VERSION} at ${plane.server}`);

    step("kubelets register two nodes (--cloud-provider=external: uninitialized taint, InternalIP, provided-node-ip)");
    const hosts = [await world.nodeHost(0), await world.nodeHost(1)];
    await registerNode(world.nodes, "worker-1", "198.18.100.11");
    await registerNode(world.nodes, "worker-2", "198.18.100.12");
    // A node cluster-autoscaler scaled down: its VM is gone, its Node object is not.
    const gone = await world.nodes.create({
      metadata: { name: "worker-gone" },
      spec: { taints: [{ key: "ToBeDeletedByClusterAutoscaler", value: "1700000000", effect: "NoSchedule" }] },
    });
    const longAgo = new Date(Date.now() - 10 * 60_000).toISOString();
    await world.nodes.update(
      { ...gone, status: { addresses: [{ type: "InternalIP", address: "198.18.250.99" }], conditions: [{ type: "Ready", status: "Unknown", reason: "NodeStatusUnknown", lastTransitionTime: longAgo, lastHeartbeatTime: longAgo }] } },
      { subresource: "status" },
    );
    await kubectl("get", "nodes", "-o", "wide");
    await kubectl("get", "nodes", "-o", "custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key");

    step("local-ccm starts on each node (in its network namespace) and initialises it");
    hosts.forEach((host, i) => processes.push(startAgent(host, [`--node-name=worker-${i + 1}`])));
    for (let i = 0; i < 100; i++) {
      const nodes = await Promise.all(["worker-1", "worker-2"].map((n) => world.nodes.get(n)));
      if (nodes.every((n) => !(n.spec?.taints ?? []).some((t) => t.key.startsWith("node.cloudprovider")))) break;
      await delay(100);
    }
    await kubectl("get", "nodes", "-o", "wide");
    await kubectl("get", "nodes", "-o", "custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key");

    step("node-lifecycle-controller: deletes NotReady, unreachable, autoscaler-tainted nodes (probes from a namespace with no route out)");
    const controllerHost = await world.nodeHost(7, { airGapped: true });
    await plane.kubectl(["apply", "-f", path.join(root, "deploy/nlc-rbac.yaml")]);
    const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "node-lifecycle-controller", server: controllerHost.server });
    const [command, argv] = controllerHost.host.wrap(process.execPath, [
      path.join(root, "src/bin/node-lifecycle-controller.ts"),
      `--kubeconfig=${kubeconfig}`,
      "--not-ready-timeout=1m",
      "--reconcile-interval=2s",
      "--ping-count=1",
      "--ping-timeout=1s",
      "--health-bind-address=",
    ]);
    const controller = spawn(command, argv, { stdio: ["ignore", "inherit", "inherit"] });
    const exited = new Promise((resolve) => controller.once("exit", resolve));
    processes.push({ stop: () => (controller.kill("SIGTERM"), exited) });
    for (let i = 0; i < 300; i++) {
      if (!(await world.nodes.list()).items.some((n) => n.metadata?.name === "worker-gone")) break;
      await delay(100);
    }
    await kubectl("get", "nodes", "-o", "wide");

    step("events");
    await kubectl("get", "events", "-A", "-o", "custom-columns=OBJECT:.involvedObject.name,TYPE:.type,REASON:.reason,MESSAGE:.message");
  } finally {
    for (const p of processes) await p.stop();
    await world.stop();
    step("stopped: control plane, agents, controller and namespaces are gone");
  }
}
