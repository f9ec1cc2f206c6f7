// `npm run cluster -- up [--nodes N] [--control-plane-nodes M] | kill-node NAME | down | build`: the local
// cluster (localcluster/cluster.ts) for people, kept in .cluster/ and left running until `down`; the first M
// nodes (default 1) are control-plane nodes.
// `build` prepares everything a cluster needs (binaries, container runtime, pause image): npm's
// pretest runs it, so `npm test` works on a fresh machine (`npm start` prepares the same through
// startCluster(), after checking it runs as root).
import { rmSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { ensureBinaries } from "./build.ts";
import {
  type ClusterRecord,
  killRecordedNode,
  MAX_NODES,
  recordFor,
  removeCluster,
  removeLeftovers,
  startCluster,
} from "./cluster.ts";
import { ensurePauseImage } from "./pause.ts";
import { ensureRuntime } from "./runtime.ts";

// LOCAL_CCM_CLUSTER_DIR lets the CLI's own test use a temp folder instead.
const DIR = path.resolve(process.env.LOCAL_CCM_CLUSTER_DIR ?? path.join(import.meta.dirname, "../.cluster"));
const KUBECONFIG = path.join(DIR, "kubeconfig");
const USAGE = "usage: npm run cluster -- up [--nodes N] [--control-plane-nodes M] | kill-node NAME | down | build";

class UsageError extends Error {}

function parseUp(args: string[]): { nodes: number; controlPlaneNodes: number } {
  let values: { nodes?: string; "control-plane-nodes"?: string };
  try {
    ({ values } = parseArgs({
      args,
      options: { nodes: { type: "string" }, "control-plane-nodes": { type: "string" } },
      strict: true,
    }));
  } catch (err) {
    throw new UsageError(`${(err as Error).message}; ${USAGE}`);
  }
  const nodes = Number(values.nodes ?? 2);
  if (!Number.isInteger(nodes) || nodes < 1 || nodes > MAX_NODES)
    throw new UsageError(`--nodes takes a number from 1 to ${MAX_NODES}; ${USAGE}`);
  const controlPlaneNodes = Number(values["control-plane-nodes"] ?? 1);
  if (!Number.isInteger(controlPlaneNodes) || controlPlaneNodes < 0 || controlPlaneNodes > nodes)
    throw new UsageError(`--control-plane-nodes takes a number from 0 to the nodes (${nodes}); ${USAGE}`);
  return { nodes, controlPlaneNodes };
}

function running(): ClusterRecord {
  const record = recordFor(DIR);
  if (!record) throw new UsageError(`no cluster running in ${DIR} (npm run cluster -- up)`);
  return record;
}

async function up(args: string[]): Promise<void> {
  const { nodes, controlPlaneNodes } = parseUp(args);
  if (recordFor(DIR)) {
    console.log(`already running (npm run cluster -- down first for another)\nexport KUBECONFIG=${KUBECONFIG}`);
    return;
  }
  rmSync(DIR, { recursive: true, force: true });
  const log = (line: string) => console.error(`cluster: ${line}`);
  const cluster = await startCluster({ nodes, controlPlaneNodes, dir: DIR, detached: true, log });
  cluster.admin.close();
  console.log(await cluster.kubectl(["get", "nodes", "-o", "wide"]));
  const worker = cluster.nodes.find((node) => !node.controlPlane) ?? cluster.nodes[0];
  console.log(`logs in ${DIR}; kill a node with: npm run cluster -- kill-node ${worker?.name}`);
  console.log(`export KUBECONFIG=${KUBECONFIG}`);
}

function down(): void {
  const record = recordFor(DIR);
  if (record) removeCluster(record);
  const leftovers = removeLeftovers();
  rmSync(DIR, { recursive: true, force: true });
  const also = leftovers.length > 0 ? ` (and what killed runs left in slots ${leftovers.join(", ")})` : "";
  console.log(`${record ? "removed" : "not running"}${also}`);
}

const commands: Record<string, (args: string[]) => Promise<void> | void> = {
  up,
  down,
  "kill-node": (args) => {
    if (args.length !== 1) throw new UsageError(USAGE);
    killRecordedNode(running(), args[0] as string);
    console.log(`${args[0]}: kubelet, containerd and its pods killed, link down`);
  },
  build: async () => {
    await ensureBinaries();
    await ensureRuntime();
    await ensurePauseImage();
  },
};

const [name = "", ...rest] = process.argv.slice(2);
const command = commands[name];
if (!command) {
  console.error(USAGE);
  process.exit(2);
}
try {
  await command(rest);
  process.exit(0);
} catch (err) {
  console.error(`cluster: ${(err as Error).message}`);
  process.exit(err instanceof UsageError ? 2 : 1);
}
