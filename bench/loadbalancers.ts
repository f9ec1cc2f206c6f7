// What bench:l2 and bench:bgp share: the local clusters they start, the Services they create, what they measure at
// rest (API requests from the audit log, the announcers' memory) and how they print figures.
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { Pod, Service } from "kubernetes-types/core/v1.js";
import { NETEXEC_PORT } from "../localcluster/agnhost.ts";
import { auditEvents, tokenPod } from "../localcluster/audit.ts";
import { type Cluster, type ClusterOptions, startCluster } from "../localcluster/cluster.ts";
import { METALLB_NAMESPACE } from "../localcluster/metallb.ts";
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
import { containerCgroup } from "../test/e2e/cluster-objects.ts";
import { processMemory } from "./proc.ts";
import { quantile } from "./quantile.ts";

const MiB = 1024 * 1024;
/** A cluster start that hit the inotify limit (other clusters on the machine) is tried again this many times. */
const START_TRIES = 5;
/** Generous: the machine runs other work too. */
const WAIT_MS = 180_000;

/** Who announces and who assigns, as the audit log names them, and the announcers' pods and container. */
export interface Announcers {
  users: { announcer: string; controller: string };
  announcerPods(cluster: Cluster): Promise<Pod[]>;
  /** The announcer's container in those pods; any others (MetalLB's FRR mode has three) are counted beside it. */
  container: string;
}

export const METALLB_ANNOUNCERS: Announcers = {
  users: {
    announcer: `system:serviceaccount:${METALLB_NAMESPACE}:metallb-speaker`,
    controller: `system:serviceaccount:${METALLB_NAMESPACE}:metallb-controller`,
  },
  async announcerPods(cluster) {
    const selector = encodeURIComponent("app.kubernetes.io/component=speaker");
    const path = `/api/v1/namespaces/${METALLB_NAMESPACE}/pods?labelSelector=${selector}`;
    return (await cluster.admin.request<{ items: Pod[] }>({ method: "GET", path })).items;
  },
  container: "speaker",
};

export const OUR_ANNOUNCERS: Announcers = {
  users: { announcer: AGENT_USER, controller: CONTROLLER_USER },
  announcerPods: (cluster) => listPods(cluster, AGENT_APP),
  container: "local-ccm",
};

/** The chart installed with `values`; resolves once every node is initialised and every agent and the controller Ready. */
export async function installOurs(cluster: Cluster, values: Record<string, string>): Promise<void> {
  await cluster.helm(helmInstallArgs(values));
  await waitFor("every node initialised", async () => (await listNodes(cluster)).every(initialised), WAIT_MS, 250);
  await waitFor("the agents and the controller Ready", async () => {
    const pods = [...(await listPods(cluster, AGENT_APP)), ...(await listPods(cluster, CONTROLLER_APP))];
    return pods.length > cluster.nodes.length && pods.every(podReady);
  }, WAIT_MS, 250);
}

/**
 * startCluster, tried again after 30 s when a kubelet found no inotify instance left: with other clusters on the
 * machine, ten nodes of ours can exhaust them (128 per user here: kubelet exits, "inotify_init: too many open files").
 */
export async function startClusterRetrying(label: string, options: ClusterOptions): Promise<Cluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startCluster({ ...options, log: (line) => console.error(`cluster: ${line}`) });
    } catch (err) {
      if (attempt >= START_TRIES || !String((err as Error).message).includes("too many open files")) throw err;
      console.error(`${label}: a kubelet found no inotify instance left; starting again in 30 s`);
      await delay(30_000);
    }
  }
}

/** A LoadBalancer Service in "default" for the netexec backends. */
export const loadBalancer = (name: string, spec: Service["spec"] = {}): Service => ({
  apiVersion: "v1",
  kind: "Service",
  metadata: { name, namespace: "default" },
  spec: { type: "LoadBalancer", selector: { app: "netexec" }, ports: [{ port: 80, targetPort: NETEXEC_PORT }], ...spec },
});

export const applyJson = (cluster: Cluster, object: unknown) =>
  cluster.kubectl(["apply", "-f", "-"], JSON.stringify(object));
export const createService = (cluster: Cluster, service: Service) =>
  cluster.admin.request({ method: "POST", path: "/api/v1/namespaces/default/services", body: service });

export const ingressIP = async (cluster: Cluster, name: string) => {
  const service = await cluster.admin.request<Service>({
    method: "GET",
    path: `/api/v1/namespaces/default/services/${name}`,
  });
  return service.status?.loadBalancer?.ingress?.[0]?.ip;
};

export const loadAverage = () =>
  loadavg()
    .map((load) => load.toFixed(1))
    .join(" / ");

interface Memory {
  rss: number;
  anon: number;
}

export interface Rest {
  /** By user: requests per node (a pod-bound token's node; "-" without), each as "verb resource" → count. */
  byUser: Map<string, Map<string, Map<string, number>>>;
  /** The announcers' process RSS and its anonymous part, per pod. */
  memory: Memory[];
  /** The processes of the announcers' pods' other containers, summed per pod (shared pages counted in each). */
  besides: Memory[];
  /** The announcer pods' container restarts since they started, with the last one's reason: "0" when none. */
  restarts: string;
  load: string;
}

export const SKIPPED_REST: Rest = { byUser: new Map(), memory: [], besides: [], restarts: "not run", load: "not run" };

/** `seconds` at rest (after 10 s for the last writes to settle): the audited requests, then the announcers' memory. */
export async function atRest(cluster: Cluster, impl: Announcers, seconds: number): Promise<Rest> {
  await delay(10_000); // writes that follow the last change settle
  const since = new Date();
  await delay(seconds * 1000);
  const until = new Date();
  const load = loadAverage();
  const log = cluster.controlPlane.auditLogPath as string;
  const byUser = new Map<string, Map<string, Map<string, number>>>();
  for (const user of [impl.users.announcer, impl.users.controller]) {
    const byNode = new Map<string, Map<string, number>>();
    for (const event of await auditEvents(log, { user, since, until })) {
      const node = tokenPod(event).node ?? "-";
      const { resource = "?", subresource } = event.objectRef ?? {};
      const key = `${event.verb} ${subresource ? `${resource}/${subresource}` : resource}`;
      const counts = byNode.get(node) ?? new Map<string, number>();
      counts.set(key, (counts.get(key) ?? 0) + 1);
      byNode.set(node, counts);
    }
    byUser.set(user, byNode);
  }
  // Some request of theirs in the whole log, or the log is misread.
  if ((await auditEvents(log, { user: impl.users.announcer })).length === 0)
    throw new Error(`no request of ${impl.users.announcer} audited`);
  // A container restarted meanwhile has a cgroup of a new ID before its pod's status shows it.
  const announcerPods = await waitFor("the announcer pods' containers running as their status says", async () => {
    const listed = await impl.announcerPods(cluster);
    return listed.every((pod) => containerProcesses(cluster, pod) !== undefined) && listed;
  }, 60_000, 1000);
  const pods = announcerPods.map((pod) => containerProcesses(cluster, pod) as Map<string, number[]>);
  const memory = pods.map((containers) => {
    const main = containers.get(impl.container)?.[0];
    if (main === undefined) throw new Error(`no process in an announcer pod's container ${impl.container}`);
    const { rss, anon } = processMemory(main);
    return { rss, anon };
  });
  const besides = pods.map((containers) =>
    summedMemory([...containers].filter(([name]) => name !== impl.container).flatMap(([, pids]) => pids)),
  );
  return { byUser, memory, besides, restarts: await restarts(cluster, announcerPods), load };
}

/**
 * The pods' container restarts in all, and per container the count and how the last one ended; the end of that
 * container's log goes to stderr.
 */
async function restarts(cluster: Cluster, pods: Pod[]): Promise<string> {
  const each: { count: number; text: string }[] = [];
  for (const pod of pods)
    for (const { name, restartCount, lastState } of pod.status?.containerStatuses ?? []) {
      if (restartCount === 0) continue;
      const { reason = "unknown", exitCode, signal } = lastState?.terminated ?? {};
      const ended = `${reason}, exit ${exitCode ?? "?"}${signal ? `, signal ${signal}` : ""}`;
      const where = `${pod.spec?.nodeName} ${name}`;
      each.push({ count: restartCount, text: `${where}: ${restartCount} (last: ${ended})` });
      const args = ["logs", "--previous", "-n", pod.metadata?.namespace ?? "", pod.metadata?.name ?? "", "-c", name];
      const log = await cluster.kubectl([...args, "--tail=8"]).catch((err: Error) => err.message);
      // What kubelet told about the pod in its Events: a probe that failed, a kill and why.
      const selector = `involvedObject.name=${pod.metadata?.name}`;
      const eventArgs = ["get", "events", "-n", pod.metadata?.namespace ?? "", "--field-selector", selector];
      const events = await cluster.kubectl(eventArgs).catch((err: Error) => err.message);
      console.error(`${where}: restarted ${restartCount} times; the end of its last run's log:\n${log}`);
      console.error(`${where}: its pod's Events:\n${events}`);
    }
  const total = each.reduce((sum, { count }) => sum + count, 0);
  return total === 0 ? "0" : `${total}: ${each.map(({ text }) => text).join(", ")}`;
}

/** The memory of those of `pids` still running, summed: a probe's vtysh, say, may have ended since. */
function summedMemory(pids: number[]): Memory {
  const sum = { rss: 0, anon: 0 };
  for (const pid of pids) {
    try {
      const { rss, anon } = processMemory(pid);
      sum.rss += rss;
      sum.anon += anon;
    } catch {
      // ended since
    }
  }
  return sum;
}

/**
 * A pod's processes by container name, from each container's cgroup (kubelet lists them by name, not in order);
 * undefined while a container's cgroup is not the one its status names (it restarted, or is restarting).
 */
function containerProcesses(cluster: Cluster, pod: Pod): Map<string, number[]> | undefined {
  try {
    // containerCgroup finds the first container's: its folder's parent is the pod's.
    const podCgroup = path.dirname(containerCgroup(cluster, pod));
    return new Map(
      (pod.status?.containerStatuses ?? []).map((status) => {
        const id = status.containerID?.replace(/^containerd:\/\//, "") ?? "";
        const procs = readFileSync(path.join(podCgroup, id, "cgroup.procs"), "utf8");
        return [status.name, procs.split("\n").filter(Boolean).map(Number)];
      }),
    );
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** "p50 / p99" of sorted seconds. */
export const latency = (sorted: number[]) =>
  sorted.length ? `${quantile(sorted, 0.5).toFixed(2)} s / ${quantile(sorted, 0.99).toFixed(2)} s` : "—";
export const mib = (bytes: number) => (bytes / MiB).toFixed(1);
export const span = (values: number[], format: (value: number) => string) => {
  if (values.length === 0) return "—";
  const [low, high] = [Math.min(...values), Math.max(...values)].map(format);
  return low === high ? `${low}` : `${low}–${high}`;
};

/** The announcers' RSS and anonymous memory (or others of theirs) over their pods, "low–high MiB (low–high MiB)". */
export const memorySpan = (rest: Rest, memory = rest.memory) =>
  `${span(memory.map((m) => m.rss), mib)} MiB (${span(memory.map((m) => m.anon), mib)} MiB)`;

/** "n per node (what)", the busiest node's detail; requests of tokens without a node under "-". */
export function perNode(byNode: Map<string, Map<string, number>> | undefined, nodes: number): string {
  if (!byNode) return "—";
  const totals = [...byNode].map(
    ([node, counts]) => [node, [...counts.values()].reduce((a, b) => a + b, 0), counts] as const,
  );
  if (totals.length === 0) return "0";
  const [, most, counts] = totals.reduce((a, b) => (b[1] > a[1] ? b : a));
  const detail = [...counts].map(([what, n]) => `${n} ${what}`).join(", ");
  const idle = nodes - totals.length;
  const low = idle > 0 ? 0 : Math.min(...totals.map(([, n]) => n));
  return `${low === most ? most : `${low}–${most}`} (busiest: ${detail})`;
}

/** All requests of a user, "n (what)". */
export function total(byNode: Map<string, Map<string, number>> | undefined): string {
  if (!byNode) return "—";
  const counts = new Map<string, number>();
  for (const perKey of byNode.values())
    for (const [what, n] of perKey) counts.set(what, (counts.get(what) ?? 0) + n);
  const sum = [...counts.values()].reduce((a, b) => a + b, 0);
  return sum ? `${sum} (${[...counts].map(([what, n]) => `${n} ${what}`).join(", ")})` : "0";
}

/** The implementations named on the command line (all of them when none is), or a one-line error. */
export function pickImplementations<T>(all: Record<string, T>, argv = process.argv.slice(2)): T[] {
  const names = argv.length ? argv : Object.keys(all);
  const unknown = names.filter((name) => !(name in all));
  if (unknown.length) throw new Error(`unknown implementation ${unknown.join(", ")}: pick from ${Object.keys(all).join(", ")}`);
  return names.map((name) => all[name] as T);
}

/**
 * Prints the header of a Markdown table with a column per run, and returns the row printer: a figure's name, its
 * cell for each run, and a note (a budget, a goal).
 */
export function sideBySide<I extends { label: string }, F>(runs: [I, F][]) {
  console.log(`| figure | ${runs.map(([impl]) => impl.label).join(" | ")} | |`);
  console.log(`|---|${runs.map(() => "---|").join("")}---|`);
  return (figure: string, cell: (figures: F, impl: I) => string, note = "") =>
    console.log(`| ${figure} | ${runs.map(([impl, f]) => cell(f, impl)).join(" | ")} | ${note} |`);
}
