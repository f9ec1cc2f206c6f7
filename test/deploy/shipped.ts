// The flags Node itself is given in the shipped manifests, so that tests and benchmarks run the
// programs the way the DaemonSet and the Deployment do.
import { readFileSync } from "node:fs";
import path from "node:path";
import type { PodSpec } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { DEPLOY_DIR } from "../../scripts/render-manifests.ts";

type Workload = { spec?: { template?: { spec?: PodSpec } } } | null;

/** Node's flags in the command of the container named `container` in deploy/`manifest`. */
export function shippedNodeArgs(manifest: string, container: string): string[] {
  const text = readFileSync(path.join(DEPLOY_DIR, manifest), "utf8");
  const command = parseAllDocuments(text)
    .flatMap((doc) => (doc.toJS() as Workload)?.spec?.template?.spec?.containers ?? [])
    .find((c) => c.name === container)?.command;
  const [executable, ...args] = command ?? [];
  // Node's own flags come before the script.
  const script = args.findIndex((arg) => !arg.startsWith("-"));
  if (executable !== "node" || script < 0) throw new Error(`deploy/${manifest}: no \`node … script\` command for ${container}`);
  return args.slice(0, script);
}
