// What the end-to-end tests read from a local cluster: Nodes, the project's pods, the audit log, and
// a pod's memory as kubelet and the kernel count it.
import { readFile } from "node:fs/promises";
import path from "node:path";
import type { Node, Pod } from "kubernetes-types/core/v1.js";
import { type AuditEvent, auditEvents } from "../../localcluster/audit.ts";
import type { Cluster } from "../../localcluster/cluster.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";
import { CONTROLLER_APP, NAMESPACE } from "../../localcluster/project.ts";

export const DEPLOY = path.resolve(import.meta.dirname, "../../deploy");
export const CHART = path.resolve(import.meta.dirname, "../../charts/local-ccm");

export const getNode = (cluster: Cluster, name: string) =>
  cluster.admin.request<Node>({ method: "GET", path: `/api/v1/nodes/${name}` });

/** The Node, or undefined once it is deleted. */
export async function findNode(cluster: Cluster, name: string): Promise<Node | undefined> {
  try {
    return await getNode(cluster, name);
  } catch (err) {
    if (isApiError(err, "NotFound")) return undefined;
    throw err;
  }
}

export const hasTaint = (node: Node, key: string) => (node.spec?.taints ?? []).some((taint) => taint.key === key);

export const readyStatus = (node: Node) => node.status?.conditions?.find((c) => c.type === "Ready")?.status;

export const addressesOf = (node: Node, type: string) =>
  (node.status?.addresses ?? []).filter((a) => a.type === type).map((a) => a.address);

/** The pod holding the controller's Lease (the chart's default resource name), if any. */
export async function leaseHolder(cluster: Cluster): Promise<string | undefined> {
  const lease = await cluster.admin.request<{ spec: { holderIdentity?: string } }>({
    method: "GET",
    path: `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases/${CONTROLLER_APP}`,
  });
  // The identity is <pod name>_<random>.
  return lease.spec.holderIdentity?.replace(/_[0-9a-f]+$/, "");
}

/** `kubectl taint` with the uninitialized taint again, as kubelet registered it. */
export async function taintUninitialized(cluster: Cluster, name: string): Promise<void> {
  await cluster.kubectl(["taint", "node", name, `${UNINITIALIZED_TAINT}=true:NoSchedule`, "--overwrite"]);
}

/** The cluster's audit log since `since` (the cluster must be started with audit: true). */
export async function clusterAuditEvents(cluster: Cluster, since: Date): Promise<AuditEvent[]> {
  const file = cluster.controlPlane.auditLogPath;
  if (!file) throw new Error("the cluster was started without audit: true");
  return auditEvents(file, { since });
}

/** Successful writes to Nodes (DELETE included) in the audit log. */
export const nodeWrites = (events: AuditEvent[]) =>
  events.filter(
    (event) =>
      ["patch", "update", "delete"].includes(event.verb) &&
      event.objectRef?.resource === "nodes" &&
      (event.responseStatus?.code ?? 0) < 300,
  );

const MiB = 1024 * 1024;

export interface PodMemory {
  /** kubelet's /stats/summary: usage minus inactive file pages (what evictions and `kubectl top` use). */
  workingSetMiB: number;
  rssMiB: number;
  /** The container's memory cgroup (v1): the highest usage since it started, and what it holds now. */
  peakMiB: number;
  pageCacheMiB: number;
  mappedFileMiB: number;
  /** Page faults that read from disk, since the container started. */
  majorFaults: number;
}

/** The memory cgroup (v1) of a pod's first container on the local cluster's host. */
export function containerCgroup(cluster: Cluster, pod: Pod): string {
  const containerId = pod.status?.containerStatuses?.[0]?.containerID?.replace(/^containerd:\/\//, "");
  const qos = (pod.status?.qosClass ?? "").toLowerCase();
  return path.join(
    `/sys/fs/cgroup/memory/lccm-c${cluster.slot}-${pod.spec?.nodeName ?? ""}/kubepods`,
    qos === "guaranteed" ? "" : qos,
    `pod${pod.metadata?.uid}`,
    containerId ?? "",
  );
}

/** The memory of a pod's (only) container, from kubelet and from its cgroup on the host. */
export async function podMemory(cluster: Cluster, pod: Pod): Promise<PodMemory> {
  const node = pod.spec?.nodeName ?? "";
  const summary = JSON.parse(await cluster.kubectl(["get", "--raw", `/api/v1/nodes/${node}/proxy/stats/summary`])) as {
    pods: { podRef: { name: string }; containers?: { memory: { workingSetBytes: number; rssBytes: number } }[] }[];
  };
  const stats = summary.pods.find((p) => p.podRef.name === pod.metadata?.name)?.containers?.[0]?.memory;
  if (!stats) throw new Error(`kubelet on ${node} has no stats of ${pod.metadata?.name}`);
  const cgroup = containerCgroup(cluster, pod);
  const stat = new Map(
    (await readFile(path.join(cgroup, "memory.stat"), "utf8"))
      .trim()
      .split("\n")
      .map((line) => line.split(" ") as [string, string]),
  );
  const peak = Number(await readFile(path.join(cgroup, "memory.max_usage_in_bytes"), "utf8"));
  const mib = (bytes: number | string | undefined) => Math.round((Number(bytes) / MiB) * 10) / 10;
  return {
    workingSetMiB: mib(stats.workingSetBytes),
    rssMiB: mib(stats.rssBytes),
    peakMiB: mib(peak),
    pageCacheMiB: mib(stat.get("cache")),
    mappedFileMiB: mib(stat.get("mapped_file")),
    majorFaults: Number(stat.get("pgmajfault")),
  };
}

export const formatMemory = (m: PodMemory) =>
  `working set ${m.workingSetMiB} MiB, RSS ${m.rssMiB} MiB, peak ${m.peakMiB} MiB, ` +
  `page cache ${m.pageCacheMiB} MiB (${m.mappedFileMiB} MiB mapped), ${m.majorFaults} major faults`;
