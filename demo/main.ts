// `npm start`: the demo, on a real cluster on this machine (localcluster/cluster.ts): real kubelets
// register their Nodes with the uninitialized taint (node-0 is the control-plane node), the Helm chart is
// installed as a user installs it, the agent pods initialise their nodes, the node-lifecycle-controller's
// replicas run on the control-plane node, an autoscaler-tainted worker loses power and the controller
// deletes it, the Events are shown, a LoadBalancer Service of local-ccm's class gets the healthy nodes' addresses
// and answers curl from the client host outside the nodes, a Service of the layer-2 class gets an address of its own
// from a pool, announced by one worker, and keeps answering at it when that worker loses power, and everything is
// removed at the end (also on Ctrl-C; what a killed demo left, the next start removes).
// With `-- --kubeconfig=FILE --node-name=NAME` it instead runs the agent once against that cluster,
// for this machine's Node, and exits with the agent's code (no root, no build).
import { spawn } from "node:child_process";
import path from "node:path";
import type { Node } from "kubernetes-types/core/v1.js";
import type { Service } from "kubernetes-types/core/v1.js";
import { AGNHOST_IMAGE } from "../localcluster/agnhost.ts";
import { type Cluster, startCluster } from "../localcluster/cluster.ts";
import { nodeMac } from "../localcluster/layer2.ts";
import {
  CONTROLLER_APP,
  helmInstallArgs,
  initialised,
  listNodes,
  listPods,
  NAMESPACE,
  nodeReady,
  podReady,
  AGENT_APP,
} from "../localcluster/project.ts";
import { waitFor } from "../localcluster/wait.ts";
import { AUTOSCALER_TAINT } from "../src/lifecycle/decide.ts";
import { L2_CLASS } from "../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION } from "../src/pools/announcement.ts";
import { NODE_ADDRESS_CLASS } from "../src/service/decide.ts";

const ROOT = path.resolve(import.meta.dirname, "..");
const NODES = 4;
// Short enough to watch (the defaults are 5m, 30s, 3 × 5s): a NotReady node is probed 20 s after it
// turned NotReady, with one ICMP echo and one TCP connect per address, each given a second.
const CHART_VALUES = {
  "nodeLifecycleController.controller.notReadyTimeout": "20s",
  "nodeLifecycleController.controller.reconcileInterval": "2s",
  "nodeLifecycleController.controller.pingCount": 1,
  "nodeLifecycleController.controller.pingTimeout": "1s",
  "loadBalancer.l2.enabled": "true",
};
/** A small web app behind a LoadBalancer Service of our class: upstream's e2e backend, agnhost netexec. */
const WEB = {
  apiVersion: "v1",
  kind: "List",
  items: [
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "web", namespace: "default" },
      spec: {
        selector: { matchLabels: { app: "web" } },
        template: {
          metadata: { labels: { app: "web" } },
          spec: {
            // One per node once scaled up (the layer-2 step): a worker's death leaves a pod on another.
            topologySpreadConstraints: [
              {
                maxSkew: 1,
                topologyKey: "kubernetes.io/hostname",
                whenUnsatisfiable: "DoNotSchedule",
                labelSelector: { matchLabels: { app: "web" } },
              },
            ],
            containers: [{ name: "netexec", image: AGNHOST_IMAGE, args: ["netexec", "--http-port=8080"] }],
          },
        },
      },
    },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "web", namespace: "default" },
      spec: {
        type: "LoadBalancer",
        loadBalancerClass: NODE_ADDRESS_CLASS,
        selector: { app: "web" },
        ports: [{ port: 80, targetPort: 8080 }],
      },
    },
  ],
};
/** Events worth showing: the project's, and kube-controller-manager's node controller for the NotReady. */
const EVENT_SOURCES = new Set(["local-ccm", "node-lifecycle-controller", "node-controller"]);

const bold = (text: string) => (process.stdout.isTTY ? `\x1b[1m${text}\x1b[0m` : text);
const step = (text: string) => console.log(`\n${bold(`== ${text}`)}`);
const note = (text: string) => console.log(`   ${text}`);
const seconds = (since: number) => `${((Date.now() - since) / 1000).toFixed(1)}s`;

const args = process.argv.slice(2);
if (args.some((arg) => arg.startsWith("--kubeconfig"))) {
  const agent = path.join(ROOT, "src/bin/local-ccm.ts");
  const child = spawn(process.execPath, [agent, "--run-once", ...args], { stdio: "inherit" });
  child.on("exit", (code) => process.exit(code ?? 1));
} else if (process.getuid?.() !== 0) {
  console.error(
    "npm start runs a cluster in network namespaces and needs root " +
      "(npm start -- --kubeconfig=FILE --node-name=NAME runs the agent once against your cluster instead)",
  );
  process.exit(2);
} else {
  // Ctrl-C or SIGTERM: exiting runs the cluster's exit hook (localcluster/cleanup.ts), which removes it.
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      console.error(`\n${signal}: removing the cluster and everything it made`);
      process.exit(signal === "SIGINT" ? 130 : 143);
    });
  }
  try {
    await demo();
  } catch (err) {
    console.error(`demo: ${(err as Error).message}`);
    process.exitCode = 1;
  }
}

async function demo(): Promise<void> {
  step("preparing: container runtime, Kubernetes binaries (built with Go on first use), pause and project images");
  const started = Date.now();
  const cluster = await startCluster({
    nodes: NODES,
    log: note,
  });
  try {
    note(`cluster slot ${cluster.slot}, state and logs in ${cluster.dir}`);
    await story(cluster, started);
  } finally {
    step("removing the cluster");
    const stopping = Date.now();
    await cluster.stop();
    note(`processes, mounts, namespaces, cgroups, routes, bridge and ${cluster.dir} removed in ${seconds(stopping)}`);
  }
}

async function story(cluster: Cluster, started: number): Promise<void> {
  const show = async (...kubectlArgs: string[]) => {
    console.log(`$ kubectl ${kubectlArgs.join(" ")}`);
    console.log((await cluster.kubectl(kubectlArgs)).trimEnd());
  };
  const showNodes = async () => {
    await show("get", "nodes", "-o", "wide");
    await show("get", "nodes", "-o", "custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key");
  };

  step(
    `${NODES} real kubelets registered (--cloud-provider=external): each Node waits, tainted uninitialized; ` +
      `${cluster.nodes.filter((node) => node.controlPlane).map((node) => node.name).join(", ")} is the control plane`,
  );
  await showNodes();

  step("helm install: the project image is already on every node (no registry)");
  const install = helmInstallArgs(CHART_VALUES);
  console.log(`$ helm ${install.join(" ")}`);
  const installed = Date.now();
  console.log((await cluster.helm(install)).trimEnd());
  await waitFor("every node initialised", async () => (await listNodes(cluster)).every(initialised), 120_000, 250);
  note(`every node initialised ${seconds(installed)} after helm install (${seconds(started)} from nothing)`);
  await waitFor("the agent pods Ready", async () => (await listPods(cluster, AGENT_APP)).every(podReady), 60_000, 500);
  await show("get", "pods", "-n", NAMESPACE, "-o", "wide");
  await showNodes();

  const replicas = await waitFor(
    "both controller replicas Ready",
    async () => {
      const pods = await listPods(cluster, CONTROLLER_APP);
      return pods.length === 2 && pods.every(podReady) && pods;
    },
    120_000,
    500,
  );
  const hosts = new Set(replicas.map((pod) => pod.spec?.nodeName));
  // The chart's default placement keeps them off workers: a worker's kubelet could mint their tokens.
  const victim = [...cluster.nodes].reverse().find((node) => !node.controlPlane && !hosts.has(node.name));
  if (!victim) throw new Error(`no worker without a controller replica (replicas on ${[...hosts].join(", ")})`);
  const where = [...hosts].map((host) => (cluster.node(host ?? "").controlPlane ? `control-plane node ${host}` : host));
  note(`node-lifecycle-controller replicas run on ${where.join(" and ")}; worker ${victim.name} hosts none`);

  step(`cluster-autoscaler marks ${victim.name} for deletion, then the machine loses power`);
  await show("taint", "node", victim.name, `${AUTOSCALER_TAINT.key}=${Math.floor(Date.now() / 1000)}:NoSchedule`);
  const killed = Date.now();
  await cluster.killNode(victim.name);
  note(`${victim.name}: kubelet, containerd and its pods killed, its link down`);
  const byName = async () => (await listNodes(cluster)).find((node: Node) => node.metadata?.name === victim.name);
  await waitFor(`${victim.name} NotReady`, async () => {
    const node = await byName();
    return node && !nodeReady(node);
  }, 120_000, 500);
  note(`kube-controller-manager marked it NotReady after ${seconds(killed)}`);
  await show("get", "nodes");
  await waitFor(`${victim.name} deleted`, async () => !(await byName()), 180_000, 500);
  note(`node-lifecycle-controller deleted it ${seconds(killed)} after the power loss`);
  await show("get", "nodes", "-o", "wide");

  step("Events (kubectl get events -A, those of local-ccm, node-lifecycle-controller and the node controller)");
  await showEvents(cluster);

  await loadBalancer(cluster, show);
  await layer2(cluster, show, victim.name);
}

/** The web app behind a LoadBalancer Service of our class, reached with curl from the client host. */
async function loadBalancer(cluster: Cluster, show: (...kubectlArgs: string[]) => Promise<void>): Promise<void> {
  step(`a LoadBalancer Service of class ${NODE_ADDRESS_CLASS}, answering curl from a host outside the nodes`);
  console.log("$ kubectl apply -f - # Deployment web (agnhost netexec on 8080), Service web (LoadBalancer, port 80)");
  const created = Date.now();
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(WEB));
  const ingress = await waitFor(
    "the Service's ingress",
    async () => {
      const service = JSON.parse(await cluster.kubectl(["get", "service", "web", "-o", "json"])) as Service;
      const ips = (service.status?.loadBalancer?.ingress ?? []).map((entry) => entry.ip ?? "");
      return ips.length > 0 && ips;
    },
    60_000,
    250,
  );
  note(`status.loadBalancer.ingress written ${seconds(created)} after the Service was created: ${ingress.join(", ")}`);
  await show("get", "service", "web", "-o", "wide");
  const [address] = ingress;
  const node = cluster.nodes.find((each) => each.publicIP === address);
  note(`${address} is ${node?.name ?? "no node"}'s ExternalIP; kube-proxy there forwards to the pod`);
  const url = `http://${address}/hostname`;
  const answer = await waitFor(
    `an answer at ${url}`,
    async () => (await cluster.client.exec("curl", ["-sS", "--max-time", "2", url])).trim(),
    120_000,
    250,
  );
  console.log(`client$ curl ${url}`);
  console.log(answer);
  note(`the client host ${cluster.client.ip} reached pod ${answer} ${seconds(created)} after kubectl apply`);
}

/** The web app again, at an address of its own from a pool, announced by one worker, through that worker's death. */
async function layer2(cluster: Cluster, show: (...kubectlArgs: string[]) => Promise<void>, dead: string) {
  const prefix = cluster.client.ip.replace(/\.\d+$/, "");
  step(`a pool on the nodes' public network and a Service of class ${L2_CLASS}: an address of its own`);
  const pool = {
    apiVersion: "local-ccm.io/v1alpha1",
    kind: "LoadBalancerIPPool",
    metadata: { name: "public" },
    spec: { addresses: [`${prefix}.240-${prefix}.250`] },
  };
  const service = {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: "web-l2", namespace: "default" },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: L2_CLASS,
      selector: { app: "web" },
      ports: [{ port: 80, targetPort: 8080 }],
    },
  };
  await show("scale", "deployment", "web", "--replicas=2");
  await cluster.kubectl(["rollout", "status", "deployment/web", "--timeout=180s"]);
  console.log(`$ kubectl apply -f - # LoadBalancerIPPool public (${prefix}.240-${prefix}.250), Service web-l2`);
  const created = Date.now();
  const list = { apiVersion: "v1", kind: "List", items: [pool, service] };
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(list));
  const announced = (not?: string) =>
    waitFor(
      `web-l2's address and its announcer${not ? ` other than ${not}` : ""}`,
      async () => {
        const found = JSON.parse(await cluster.kubectl(["get", "service", "web-l2", "-o", "json"])) as Service;
        const ip = found.status?.loadBalancer?.ingress?.[0]?.ip;
        const announcer = found.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
        return ip !== undefined && announcer !== undefined && announcer !== not && { ip, announcer };
      },
      120_000,
      100,
    );
  const { ip, announcer } = await announced();
  const columns = [
    "NAME:.metadata.name",
    "EXTERNAL-IP:.status.loadBalancer.ingress[*].ip",
    `ANNOUNCER:.metadata.annotations.${ANNOUNCER_ANNOTATION.replaceAll(".", "\\.")}`,
  ].join(",");
  await show("get", "service", "web-l2", "-o", `custom-columns=${columns}`);
  await show("get", "lbpool");
  const url = `http://${ip}/hostname`;
  const curl = () => cluster.client.exec("curl", ["-sS", "--max-time", "2", url]).then((out) => out.trim());
  const answer = await waitFor(`an answer at ${url}`, curl, 120_000, 250);
  console.log(`client$ curl ${url}`);
  console.log(answer);
  const mac = (name: string) => nodeMac(cluster, name);
  console.log(`client$ ip neigh show ${ip}`);
  console.log((await cluster.client.exec("ip", ["neigh", "show", ip])).trimEnd());
  note(`${announcer} answers ARP for ${ip} with its MAC ${await mac(announcer)}`);
  note(`the pod answered ${seconds(created)} after kubectl apply`);

  step(`${announcer}, which announces ${ip}, loses power`);
  const killed = Date.now();
  await cluster.killNode(announcer);
  const next = await announced(announcer);
  const nextMac = await mac(next.announcer);
  await waitFor(`the client resolving ${ip} to ${next.announcer}`, async () =>
    (await cluster.client.exec("ip", ["neigh", "show", ip])).includes(nextMac ?? "-"), 120_000, 100);
  note(`${next.announcer} took ${ip} over ${seconds(killed)} after the power loss (its Lease outlived ${announcer}'s)`);
  const again = await waitFor(`an answer at ${url} again`, curl, 120_000, 250);
  console.log(`client$ curl ${url}`);
  console.log(again);
  note(`the client reached ${ip} again ${seconds(killed)} after the power loss (${dead} and ${announcer} are gone)`);
  console.log(`client$ ip neigh show ${ip}`);
  console.log((await cluster.client.exec("ip", ["neigh", "show", ip])).trimEnd());
}

async function showEvents(cluster: Cluster): Promise<void> {
  const columns = [
    "NAMESPACE:.metadata.namespace",
    "OBJECT:.involvedObject.name",
    "SOURCE:.source.component",
    "TYPE:.type",
    "REASON:.reason",
    "MESSAGE:.message",
  ].join(",");
  const kubectlArgs = ["get", "events", "-A", "--sort-by=.lastTimestamp", "-o", `custom-columns=${columns}`];
  console.log(`$ kubectl ${kubectlArgs.join(" ")}`);
  const [header, ...rows] = (await cluster.kubectl(kubectlArgs)).trimEnd().split("\n");
  console.log(header);
  for (const row of rows) if (EVENT_SOURCES.has(row.split(/\s+/)[2] ?? "")) console.log(row);
}
