// metrics-server on the local cluster, so `kubectl top nodes` works as on a real one: a client we did not write
// that scrapes every kubelet over TLS and verifies its serving certificate against the cluster CA
// (--kubelet-certificate-authority, never --kubelet-insecure-tls). On a cluster whose kubelets request their serving
// certificates (serverTLSBootstrap), the figures are there only once the CSR approver approved them.
//
// The binary is built from the pinned module like the others (build.ts) and packed into a one-file image the way
// the pause image is (pause.ts), imported on every node. The objects are upstream's own manifest from the same
// module (manifests/base: Deployment, Service, APIService v1beta1.metrics.k8s.io, RBAC, with its kustomization's
// common labels), changed only where this cluster differs; each change says why.
import { existsSync } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { Service as KubeService } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { writeImageTarball } from "./oci-image.ts";
import { CACHE_DIR, ensureBinaries } from "./build.ts";
import type { Cluster } from "./cluster.ts";
import { CONTROL_PLANE_TAINT } from "./node.ts";
import { run } from "./exec.ts";
import { METRICS_SERVER_VERSION } from "./versions.ts";
import { waitFor } from "./wait.ts";

/** The image's name on every node; localhost/ says it comes from no registry. */
export const METRICS_SERVER_IMAGE = `localhost/metrics-server:${METRICS_SERVER_VERSION}`;
export const METRICS_SERVER_NAMESPACE = "kube-system";
/** The cluster CA as every pod has it (the ServiceAccount volume): kube-controller-manager signs kubelets'
 * approved serving certificates with it. */
export const CLUSTER_CA_IN_POD = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/** Its port on the node: on the host network, kubelet already holds upstream's 10250. */
export const METRICS_SERVER_PORT = 4443;

export async function ensureMetricsServerImage(): Promise<string> {
  const dir = path.join(CACHE_DIR, `metrics-server-image-${METRICS_SERVER_VERSION}`);
  const tarball = path.join(dir, "metrics-server.tar");
  if (existsSync(tarball)) return tarball;
  await mkdir(dir, { recursive: true });
  const { metricsServer } = await ensureBinaries();
  await writeImageTarball(
    {
      reference: METRICS_SERVER_IMAGE,
      files: [
        { path: "/metrics-server", source: metricsServer, mode: 0o755 },
        // Upstream's distroless base has it; the manifest mounts an emptyDir there for the self-signed certificate.
        { path: "/tmp", directory: true, mode: 0o1777 },
      ],
      // As upstream's Dockerfile: nobody's uid.
      config: { Entrypoint: ["/metrics-server"], User: "65534" },
    },
    tarball,
  );
  return tarball;
}

type KubeObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> } };

/** Upstream's manifests/base from the pinned module, with its kustomization's commonLabels applied as kustomize
 * does (every object's labels, the Deployment's selector and pod template, the Service's selector). */
async function upstreamManifest(): Promise<KubeObject[]> {
  const download = await run("go", ["mod", "download", "-json", `sigs.k8s.io/metrics-server@${METRICS_SERVER_VERSION}`]);
  const base = path.join((JSON.parse(download) as { Dir: string }).Dir, "manifests/base");
  const read = async (file: string) =>
    parseAllDocuments(await readFile(path.join(base, file), "utf8"))
      .map((doc) => doc.toJS() as unknown)
      .filter((object) => object !== null);
  const [kustomization] = (await read("kustomization.yaml")) as [
    { commonLabels: Record<string, string>; resources: string[] },
  ];
  const labels = kustomization.commonLabels;
  const objects = (await Promise.all(kustomization.resources.map(read))).flat() as KubeObject[];
  for (const object of objects) {
    object.metadata.labels = { ...object.metadata.labels, ...labels };
    if (object.kind === "Deployment") {
      const spec = (object as Deployment).spec as NonNullable<Deployment["spec"]>;
      spec.selector = { ...spec.selector, matchLabels: { ...spec.selector?.matchLabels, ...labels } };
      spec.template.metadata = { ...spec.template.metadata, labels: { ...spec.template.metadata?.labels, ...labels } };
    }
    if (object.kind === "Service") {
      const spec = (object as KubeService).spec as NonNullable<KubeService["spec"]>;
      spec.selector = { ...spec.selector, ...labels };
    }
  }
  return objects;
}

/** What this cluster changes in upstream's Deployment, and why. */
function adapt(deployment: Deployment): void {
  const pod = deployment.spec?.template.spec;
  const container = pod?.containers[0];
  if (!pod || !container?.args) throw new Error("metrics-server's upstream Deployment changed shape");
  container.image = METRICS_SERVER_IMAGE;
  container.args = [
    // The host network (below) shares the node's ports with kubelet, which holds upstream's 10250.
    ...container.args.map((arg) => (arg.startsWith("--secure-port=") ? `--secure-port=${METRICS_SERVER_PORT}` : arg)),
    // What upstream leaves to the cluster: verify kubelets' serving certificates, against the cluster CA.
    `--kubelet-certificate-authority=${CLUSTER_CA_IN_POD}`,
  ];
  for (const port of container.ports ?? []) if (port.name === "https") port.containerPort = METRICS_SERVER_PORT;
  // Pods on different nodes of this cluster do not reach each other (the host forwards nothing): a pod could
  // scrape only its own node's kubelet, since the others' replies to a pod address have no route back.
  pod.hostNetwork = true;
  // So that a cluster of control-plane nodes only (`up --nodes 1`) runs it too.
  pod.tolerations = [{ key: CONTROL_PLANE_TAINT.key, operator: "Exists", effect: CONTROL_PLANE_TAINT.effect }];
}

/** The objects `installMetricsServer` applies: upstream's manifest, adapted (see `adapt`). */
export async function metricsServerManifest(): Promise<KubeObject[]> {
  const objects = await upstreamManifest();
  const deployment = objects.find((object) => object.kind === "Deployment");
  if (!deployment) throw new Error("metrics-server's upstream manifest has no Deployment");
  adapt(deployment as Deployment);
  return objects;
}

/** Imports the image on every node and applies the manifest; `kubectl top` works once the APIService is
 * Available and metrics-server scraped twice (see `nodeMetrics`). */
export async function installMetricsServer(cluster: Cluster): Promise<void> {
  const tarball = await ensureMetricsServerImage();
  for (const node of cluster.nodes) await node.ctr(["images", "import", tarball]);
  const list = { apiVersion: "v1", kind: "List", items: await metricsServerManifest() };
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(list));
}

export interface NodeMetrics {
  name: string;
  cpu: string;
  memory: string;
}

/** `kubectl top nodes` as kubectl prints it: a row per node; a node without metrics shows <unknown>. */
export async function kubectlTopNodes(cluster: Cluster): Promise<NodeMetrics[]> {
  const out = await cluster.kubectl(["top", "nodes", "--no-headers"]);
  return out
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [name = "", cpu = "", , memory = ""] = line.trim().split(/\s+/);
      return { name, cpu, memory };
    });
}

/** A figure, not <unknown>: 12m, 1, 345Mi. */
export const hasFigures = (row: NodeMetrics) => /^\d+m?$/.test(row.cpu) && /^\d+(Ki|Mi|Gi)$/.test(row.memory);

/** Waits until `kubectl top nodes` shows figures for the nodes named (default: every node of the cluster). */
export function nodeMetrics(
  cluster: Cluster,
  timeoutMs: number,
  names = cluster.nodes.map((node) => node.name),
): Promise<NodeMetrics[]> {
  return waitFor(
    `kubectl top nodes to show figures for ${names.join(", ")}`,
    async () => {
      const rows = await kubectlTopNodes(cluster);
      return names.every((name) => rows.some((row) => row.name === name && hasFigures(row))) && rows;
    },
    timeoutMs,
    1_000,
  );
}
