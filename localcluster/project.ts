// The project on the local cluster, for the demo and the benchmarks: the Helm chart installed as a
// user installs it (the image is already on every node), and the states worth waiting for.
import path from "node:path";
import type { Node, Pod } from "kubernetes-types/core/v1.js";
import { isUninitialized } from "../src/kube/nodes.ts";
import { CHART_DIR } from "./chart.ts";
import type { Cluster } from "./cluster.ts";
import { clusterLayout } from "./layout.ts";
import { installMetricsServer } from "./metrics-server.ts";
import { waitFor } from "./wait.ts";

export const RELEASE = "local-ccm";
export const NAMESPACE = "kube-system";
/** The chart's app.kubernetes.io/name of each program's pods. */
export const AGENT_APP = "local-ccm";
export const CONTROLLER_APP = "node-lifecycle-controller";
/** The chart's ServiceAccounts, as the audit log names their users. */
export const AGENT_USER = `system:serviceaccount:${NAMESPACE}:local-ccm`;
export const CONTROLLER_USER = `system:serviceaccount:${NAMESPACE}:node-lifecycle-controller`;

/** `helm install` of the chart into kube-system with `values` as --set pairs. */
export function helmInstallArgs(values: Record<string, string | number> = {}): string[] {
  const sets = Object.entries(values).flatMap(([key, value]) => ["--set", `${key}=${value}`]);
  return ["install", RELEASE, path.relative(process.cwd(), CHART_DIR) || ".", "--namespace", NAMESPACE, ...sets];
}

/** Pool addresses beside the nodes (.10 and up) and the client host (.2) on the slot's public /24, never one of them. */
export function publicPoolRange(slot: number): string {
  const prefix = clusterLayout(slot).publicGateway.replace(/\.1$/, "");
  return `${prefix}.240-${prefix}.250`;
}

/** A LoadBalancerIPPool named `public` of publicPoolRange(slot). */
export const publicPool = (slot: number) => ({
  apiVersion: "local-ccm.io/v1alpha1",
  kind: "LoadBalancerIPPool",
  metadata: { name: "public" },
  spec: { addresses: [publicPoolRange(slot)] },
});

/** The chart's values that run the kubelet-serving CSR approver (the Deployment named explicitly, whatever its
 * default). */
export const CSR_APPROVER_VALUES = { "nodeLifecycleController.enabled": "true", "csrApproval.enabled": "true" };

/**
 * What `npm run cluster -- up --serving-certs` adds to a cluster whose kubelets request their serving certificates
 * and whose apiserver verifies them: the chart with the CSR approver on (its agent initialises the Nodes, whose
 * addresses the approver checks every certificate against) and metrics-server, which verifies them too.
 */
export async function installServingCertificates(
  cluster: Cluster,
  values: Record<string, string | number> = {},
): Promise<void> {
  await cluster.helm(helmInstallArgs({ ...CSR_APPROVER_VALUES, ...values }));
  await installMetricsServer(cluster);
}

export async function listNodes(cluster: Cluster): Promise<Node[]> {
  return (await cluster.admin.request<{ items: Node[] }>({ method: "GET", path: "/api/v1/nodes" })).items;
}

/** The pods of one of the chart's programs. */
export async function listPods(cluster: Cluster, app: string): Promise<Pod[]> {
  const selector = encodeURIComponent(`app.kubernetes.io/name=${app}`);
  const list = await cluster.admin.request<{ items: Pod[] }>({
    method: "GET",
    path: `/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=${selector}`,
  });
  return list.items;
}

const conditionTrue = (conditions: { type: string; status: string }[] | undefined, type: string) =>
  conditions?.some((c) => c.type === type && c.status === "True") ?? false;

/** Ready and not on its way out (a deleted pod stays Ready until its containers stop). */
export const podReady = (pod: Pod) =>
  pod.metadata?.deletionTimestamp === undefined && conditionTrue(pod.status?.conditions, "Ready");
export const nodeReady = (node: Node) => conditionTrue(node.status?.conditions, "Ready");
export const initialised = (node: Node) => !isUninitialized(node);

/** Until every Node of the cluster is initialised by its agent (the chart installed). */
export const allInitialised = (cluster: Cluster, timeoutMs = 120_000) =>
  waitFor(
    "every Node initialised by its agent",
    async () => (await listNodes(cluster)).filter(initialised).length === cluster.nodes.length,
    timeoutMs,
    500,
  );
