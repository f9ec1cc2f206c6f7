// `npm run bench:cluster`: the project as users run it, on the local cluster (real kubelets on
// containerd, localcluster/cluster.ts; node-0 its control-plane node) with the Helm chart at its defaults,
// so both controller replicas run on node-0 and an agent on every node. It prints, as Markdown
// tables: the time from nothing to Ready nodes, to the agent pods Ready and to every node initialised;
// each pod's memory as kubelet reports it (stats/summary: working set and RSS per container) after a
// minute at rest; the API requests each program made in that minute (the apiserver's audit log, by
// ServiceAccount); and each node's kubelet, kube-proxy and containerd RSS. Then BENCH_COLD_STARTS (20) cold
// starts of the agents in a row, the controller scaled to 0 (it maps the same `node` binary): each drops the
// page cache (machine-wide) and recreates the DaemonSet; it prints the time to every node initialised, each pod's
// time from its container's process start (the kernel's start time) to its node seen initialised (polled every
// 50 ms), the agents' working set and RSS after it, and their restarts (an OOM kill restarts the container).
import { readFileSync } from "node:fs";
import path from "node:path";
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
  NAMESPACE,
  podReady,
} from "../localcluster/project.ts";
import { waitFor } from "../localcluster/wait.ts";
import { run } from "../localcluster/exec.ts";
import { containerCgroup, taintUninitialized } from "../test/e2e/cluster-objects.ts";
import { processMemory, secondsSinceBoot, startedSinceBoot } from "./proc.ts";

const NODES = Number(process.env.BENCH_NODES ?? 3);
const REST_SECONDS = Number(process.env.BENCH_REST_SECONDS ?? 60);
const COLD_STARTS = Number(process.env.BENCH_COLD_STARTS ?? 20);
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
  /** The container's process as the kernel counts it (VmRSS: mapped file pages included). */
  processRss: number;
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

/** The process of a pod's (only) container, from its cgroup on the host. */
const containerPid = (cluster: Cluster, pod: Pod): number =>
  Number(readFileSync(path.join(containerCgroup(cluster, pod), "cgroup.procs"), "utf8").split("\n")[0]);

async function containerMemory(cluster: Cluster, pods: Pod[]): Promise<ContainerMemory[]> {
  const byName = new Map(pods.map((pod) => [pod.metadata?.name, pod]));
  const names = new Set(byName.keys());
  const found: ContainerMemory[] = [];
  for (const node of cluster.nodes) {
    const summary = JSON.parse(
      await cluster.kubectl(["get", "--raw", `/api/v1/nodes/${node.name}/proxy/stats/summary`]),
    ) as Summary;
    for (const pod of summary.pods) {
      if (!names.has(pod.podRef.name)) continue;
      for (const container of pod.containers) {
        const { workingSetBytes = Number.NaN, rssBytes = Number.NaN } = container.memory ?? {};
        const processRss = processMemory(containerPid(cluster, byName.get(pod.podRef.name) as Pod)).rss;
        found.push({ pod: pod.podRef.name, workingSet: workingSetBytes, rss: rssBytes, processRss });
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

interface ColdStart {
  seconds: number;
  /** Per pod not restarted: its container's process start → its node seen initialised, seconds. */
  podSeconds: number[];
  memory: ContainerMemory[];
  restarts: number;
  /** Why the restarted containers ended (OOMKilled, or Error with the exit code of a failed liveness probe's kill). */
  reasons: string[];
}

/** Recreates the agents' DaemonSet with the page cache dropped, `count` times in a row. */
async function coldStarts(cluster: Cluster, count: number): Promise<ColdStart[]> {
  await cluster.kubectl(["scale", "-n", NAMESPACE, `deployment/${CONTROLLER_APP}`, "--replicas=0"]);
  const saved = JSON.parse(await cluster.kubectl(["get", "-n", NAMESPACE, `daemonset/${AGENT_APP}`, "-o", "json"]));
  const { name, namespace, labels, annotations } = saved.metadata;
  const daemonSet = JSON.stringify({ ...saved, metadata: { name, namespace, labels, annotations }, status: undefined });
  const starts: ColdStart[] = [];
  for (let i = 0; i < count; i++) {
    await cluster.kubectl(["delete", "-n", NAMESPACE, `daemonset/${AGENT_APP}`, "--wait"]);
    await waitFor("no agent or controller pods", async () =>
      (await listPods(cluster, AGENT_APP)).length + (await listPods(cluster, CONTROLLER_APP)).length === 0,
    120_000, 250);
    for (const node of cluster.nodes) await taintUninitialized(cluster, node.name);
    await run("sh", ["-c", "sync && echo 1 > /proc/sys/vm/drop_caches"]);
    const start = Date.now();
    await cluster.kubectl(["create", "-f", "-"], daemonSet);
    const initialisedAt = new Map<string, number>();
    await waitFor("every node initialised", async () => {
      const nodes = await listNodes(cluster);
      const now = secondsSinceBoot();
      for (const node of nodes.filter(initialised)) {
        const name = node.metadata?.name ?? "";
        initialisedAt.set(name, initialisedAt.get(name) ?? now);
      }
      return nodes.every(initialised);
    }, 180_000, 50);
    const seconds = secondsSince(start);
    await podsReady(cluster, AGENT_APP, NODES, start);
    const pods = await listPods(cluster, AGENT_APP);
    // A restarted container's process started after its node was initialised: it has no such time.
    const podSeconds = pods
      .filter((pod) => (pod.status?.containerStatuses?.[0]?.restartCount ?? 0) === 0)
      .map((pod) => (initialisedAt.get(pod.spec?.nodeName ?? "") ?? Number.NaN) - startedSinceBoot(containerPid(cluster, pod)));
    const statuses = pods.map((pod) => pod.status?.containerStatuses?.[0]);
    const restarts = statuses.reduce((sum, status) => sum + (status?.restartCount ?? 0), 0);
    const reasons = statuses.flatMap((status) => {
      const ended = status?.lastState?.terminated;
      return ended ? [`${ended.reason} (exit ${ended.exitCode})`] : [];
    });
    starts.push({ seconds, podSeconds, memory: await containerMemory(cluster, pods), restarts, reasons });
    console.error(`cold start ${i + 1}: ${seconds.toFixed(1)} s; per pod ${podSeconds.map((s) => s.toFixed(2)).join(", ")} s`);
  }
  return starts;
}

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
      `| process RSS (mapped file pages included) | ${range(agentMemory.map((m) => m.processRss), mib)} | ` +
        `${range(controllerMemory.map((m) => m.processRss), mib)} |`,
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

    if (COLD_STARTS === 0) return;
    const limit = (agentPods[0]?.spec?.containers[0]?.resources?.limits?.memory as string | undefined) ?? "none";
    const starts = await coldStarts(cluster, COLD_STARTS);
    const after = starts.flatMap((start) => start.memory);
    const seconds = (value: number) => `${value.toFixed(1)} s`;
    console.log(`\n${COLD_STARTS} cold starts of the agents in a row, page cache dropped, memory limit ${limit}\n`);
    console.log("| figure | local-ccm | cozystack/local-ccm (Go), as measured beside it (docs) |\n|---|---|---|");
    console.log(`| DaemonSet created → every node initialised | ${range(starts.map((s) => s.seconds), seconds)} | initialises under a 40Mi limit |`);
    const podSeconds = starts.flatMap((s) => s.podSeconds);
    console.log(
      `| each pod: container start → its node initialised (${podSeconds.length} pods not restarted) | ` +
        `${range(podSeconds, (v) => `${v.toFixed(2)} s`)} | |`,
    );
    console.log(`| working set per pod after initialising | ${range(after.map((m) => m.workingSet), mib)} | |`);
    console.log(`| RSS per pod (kubelet) after initialising | ${range(after.map((m) => m.rss), mib)} | |`);
    console.log(`| process RSS after initialising | ${range(after.map((m) => m.processRss), mib)} | 32.0 – 32.6 MiB at rest |`);
    const reasons = starts.flatMap((s) => s.reasons).join(", ");
    console.log(`| container restarts | ${starts.reduce((sum, s) => sum + s.restarts, 0)} ${reasons && `(${reasons})`} | |`);
  } finally {
    await cluster.stop();
  }
}

await main();
