// `npm run bench:cluster`: the project as users run it, on the local cluster (real kubelets on
// containerd, localcluster/cluster.ts; node-0 its control-plane node) with the Helm chart at its defaults,
// so both controller replicas run on node-0 and an agent on every node. It prints, as Markdown
// tables: the time from nothing to Ready nodes, to the agent pods Ready and to every node initialised;
// each pod's memory as kubelet reports it (stats/summary: working set and RSS per container) after a
// minute at rest; the API requests each program made in that minute (the apiserver's audit log, by
// ServiceAccount); and each node's kubelet, kube-proxy and containerd RSS.
import { setTimeout as delay } from "node:timers/promises";
import type { Pod } from "kubernetes-types/core/v1.js";
import { auditedRequests } from "../localcluster/audit.ts";
import { type Cluster, startCluster } from "../localcluster/cluster.ts";
import {
  AGENT_APP,
  AGENT_USER,
  CONTROLLER_APP,
  CONTROLLER_USER,
  helmInstallArgs,
  initialised,
  listNodes,
  listPods,
  podReady,
} from "../localcluster/project.ts";
import { waitFor } from "../localcluster/wait.ts";
import { processMemory } from "./proc.ts";

const NODES = Number(process.env.BENCH_NODES ?? 3);
const REST_SECONDS = Number(process.env.BENCH_REST_SECONDS ?? 60);
const MiB = 1024 * 1024;

/** The part of kubelet's /stats/summary read here. */
interface Summary {
  pods: {
    podRef: { name: string; namespace: string };
    containers: { name: string; memory?: { workingSetBytes?: number; rssBytes?: number } }[];
  }[];
}

interface ContainerMemory {
  pod: string;
  workingSet: number;
  rss: number;
}

const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
const secondsSince = (start: number) => (Date.now() - start) / 1000;

/** Polls until `pods` of `app` are all Ready; the seconds since `start`. */
async function podsReady(cluster: Cluster, app: string, count: number, start: number): Promise<number> {
  await waitFor(
    `${count} ${app} pods Ready`,
    async () => {
      const pods = await listPods(cluster, app);
      return pods.length === count && pods.every(podReady);
    },
    180_000,
    100,
  );
  return secondsSince(start);
}

async function containerMemory(cluster: Cluster, pods: Pod[]): Promise<ContainerMemory[]> {
  const names = new Set(pods.map((pod) => pod.metadata?.name));
  const found: ContainerMemory[] = [];
  for (const node of cluster.nodes) {
    const summary = JSON.parse(
      await cluster.kubectl(["get", "--raw", `/api/v1/nodes/${node.name}/proxy/stats/summary`]),
    ) as Summary;
    for (const pod of summary.pods) {
      if (!names.has(pod.podRef.name)) continue;
      for (const container of pod.containers) {
        const { workingSetBytes = Number.NaN, rssBytes = Number.NaN } = container.memory ?? {};
        found.push({ pod: pod.podRef.name, workingSet: workingSetBytes, rss: rssBytes });
      }
    }
  }
  if (found.length !== names.size) throw new Error(`kubelet reported ${found.length} of ${names.size} containers`);
  return found;
}

const range = (values: number[], format: (value: number) => string) => {
  const low = Math.min(...values);
  const high = Math.max(...values);
  return format(low) === format(high) ? format(low) : `${format(low)} – ${format(high)}`;
};

const requests = (counts: Map<string, number>) => {
  const total = [...counts.values()].reduce((sum, n) => sum + n, 0);
  const detail = [...counts].map(([what, n]) => `${n} ${what}`).join(", ");
  return total === 0 ? "0" : `${total} (${detail})`;
};

async function main(): Promise<void> {
  const start = Date.now();
  const cluster = await startCluster({ nodes: NODES, audit: true, log: (line) => console.error(`cluster: ${line}`) });
  try {
    const nodesReady = secondsSince(start);
    console.error("installing the chart (defaults)");
    await cluster.helm(helmInstallArgs());
    const [agentsReady, controllersReady, initialisedAt] = await Promise.all([
      podsReady(cluster, AGENT_APP, NODES, start),
      podsReady(cluster, CONTROLLER_APP, 2, start),
      waitFor("every node initialised", async () => (await listNodes(cluster)).every(initialised), 180_000, 100).then(
        () => secondsSince(start),
      ),
    ]);
    console.error(`at rest for ${REST_SECONDS} s`);
    const restFrom = new Date();
    await delay(REST_SECONDS * 1000);
    const restTo = new Date();

    const auditLog = cluster.controlPlane.auditLogPath as string;
    const [agentPods, controllerPods] = await Promise.all([
      listPods(cluster, AGENT_APP),
      listPods(cluster, CONTROLLER_APP),
    ]);
    const agentMemory = await containerMemory(cluster, agentPods);
    const controllerMemory = await containerMemory(cluster, controllerPods);
    const agentRequests = await auditedRequests(auditLog, { user: AGENT_USER, since: restFrom, until: restTo });
    const controllerRequests = await auditedRequests(auditLog, {
      user: CONTROLLER_USER,
      since: restFrom,
      until: restTo,
    });
    // Both started by reading and writing the API: none of theirs in the log would mean a misread log.
    for (const user of [AGENT_USER, CONTROLLER_USER])
      if ((await auditedRequests(auditLog, { user })).size === 0) throw new Error(`no request of ${user} audited`);

    console.log(`\n${NODES} nodes, chart defaults, ${REST_SECONDS} s at rest\n`);
    console.log("| figure | local-ccm (DaemonSet) | node-lifecycle-controller (Deployment) |");
    console.log("|---|---|---|");
    const nodesFigure = `nothing → ${NODES} Nodes Ready (kubelets registered, image built and imported)`;
    console.log(`| ${nodesFigure} | ${nodesReady.toFixed(1)} s | |`);
    console.log(`| nothing → pods Ready | ${agentsReady.toFixed(1)} s | ${controllersReady.toFixed(1)} s |`);
    console.log(`| nothing → every node initialised (taint removed) | ${initialisedAt.toFixed(1)} s | |`);
    console.log(
      `| working set per pod (kubelet) | ${range(agentMemory.map((m) => m.workingSet), mib)} | ` +
        `${range(controllerMemory.map((m) => m.workingSet), mib)} |`,
    );
    console.log(
      `| RSS per pod (kubelet) | ${range(agentMemory.map((m) => m.rss), mib)} | ` +
        `${range(controllerMemory.map((m) => m.rss), mib)} |`,
    );
    console.log(
      `| API requests in the minute at rest, all pods | ${requests(agentRequests)} | ${requests(controllerRequests)} |`,
    );
    console.log("\n| node | kubelet RSS | kube-proxy RSS | containerd RSS |\n|---|---|---|---|");
    for (const node of cluster.nodes) {
      const { kubelet, kubeProxy, containerd } = node.pids();
      const rss = (pid: number | undefined) => (pid ? mib(processMemory(pid).rss) : "?");
      console.log(`| ${node.name} | ${rss(kubelet)} | ${rss(kubeProxy)} | ${rss(containerd)} |`);
    }
  } finally {
    await cluster.stop();
  }
}

await main();
