// The programs' commands in the shipped manifests (deploy/, rendered from the chart), so that tests
// and benchmarks start the programs with the same Node flags as the DaemonSet and the Deployment.
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import type { Container, PodSpec } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { DEPLOY_DIR } from "../../scripts/render-manifests.ts";
import { READAHEAD_PRELOAD } from "../../localcluster/image.ts";

type Workload = { spec?: { template?: { spec?: PodSpec } } } | null;

export interface ShippedCommand {
  /** Node's own flags. */
  nodeArgs: string[];
  /** The program's file in the image. */
  script: string;
}

/**
 * The chart's metrics certificate as the programs are told of it: passed by default to each program with secure
 * metrics (metrics.generateCertificate), whatever else the values set.
 */
export const CHART_CERTIFICATE_ARGS = [
  "--metrics-cert-file=/etc/local-ccm/metrics-tls/tls.crt",
  "--metrics-key-file=/etc/local-ccm/metrics-tls/tls.key",
];

/** The containers of the workloads (DaemonSets, Deployments) in a manifests file's text. */
export function workloadContainers(manifests: string): Container[] {
  return parseAllDocuments(manifests).flatMap((doc) => (doc.toJS() as Workload)?.spec?.template?.spec?.containers ?? []);
}

/** The `node [flags] script` command of the container named `container` in deploy/. */
export function shippedCommand(container: string): ShippedCommand {
  const command = readdirSync(DEPLOY_DIR)
    .filter((file) => file.endsWith(".yaml"))
    .flatMap((file) => workloadContainers(readFileSync(path.join(DEPLOY_DIR, file), "utf8")))
    .find((c) => c.name === container)?.command;
  const [executable, ...args] = command ?? [];
  const script = args.findIndex((arg) => !arg.startsWith("-"));
  if (executable !== "node" || script < 0) throw new Error(`deploy/: no \`node … script\` command for ${container}`);
  return { nodeArgs: args.slice(0, script), script: args[script] as string };
}

/** The image's LD_PRELOAD (localcluster/image.ts), naming the library as built here: run as the image runs. */
export const SHIPPED_ENV = {
  LD_PRELOAD: path.resolve(import.meta.dirname, "../..", READAHEAD_PRELOAD.from),
} as const;
