// `npm run cluster -- up [--nodes N] [--control-plane-nodes M] [--proxy-mode iptables|nftables] [--serving-certs]
// [--bgp] [--dual-stack] | kill-node NAME | client [-- COMMAND…] | down | build`: the local cluster
// (localcluster/cluster.ts) for people, kept in .cluster/ and left running until `down`; the first M nodes (default
// 1) are control-plane nodes. With --serving-certs, kubelets request their serving certificates, the apiserver
// verifies them, and the chart (CSR approver on) and metrics-server are installed: `up` returns once `kubectl top
// nodes` shows every node through certificates the approver approved. With --bgp, the cluster's router (router.ts:
// FRR) peers with every node and carries the client host's traffic, so the client reaches BGP addresses through the
// routes it learned. With --dual-stack, the nodes, pods and client host have IPv6 addresses too, and the router
// carries IPv6 routes as well (cluster.ts's dualStack). `client` runs a command (default: a shell) on the client
// host, outside the nodes, with KUBECONFIG set and kubectl on the PATH.
// `build` prepares everything a cluster needs (binaries, container runtime, pause, agnhost, metrics-server and
// CoreDNS images) and upstream's e2e suite (the peer suite's e2e.test): npm's pretest runs it, so `npm test` works on a fresh machine (`npm start` prepares the same through
// startCluster(), after checking it runs as root).
import { rmSync } from "node:fs";
import path from "node:path";
import { spawn } from "node:child_process";
import { parseArgs } from "node:util";
import { ensureAgnhostImage } from "./agnhost.ts";
import { ensureBinaries, ensureE2ETest } from "./build.ts";
import { ensureCoreDNSImage } from "./coredns.ts";
import { startCluster } from "./cluster.ts";
import { MAX_NODES } from "./layout.ts";
import { clientCommand } from "./node-network.ts";
import { type ClusterRecord, killRecordedNode, recordFor, removeCluster, removeLeftovers } from "./slots.ts";
import { ensureMetricsServerImage, nodeMetrics } from "./metrics-server.ts";
import { PROXY_MODES, type ProxyMode } from "./kube-proxy.ts";
import { ensurePauseImage } from "./pause.ts";
import { installServingCertificates } from "./project.ts";
import { NODE_ASN, startRouter } from "./router.ts";
import { ensureRuntime } from "./runtime.ts";

// LOCAL_CCM_CLUSTER_DIR lets the CLI's own test use a temp folder instead.
const DIR = path.resolve(process.env.LOCAL_CCM_CLUSTER_DIR ?? path.join(import.meta.dirname, "../.cluster"));
const KUBECONFIG = path.join(DIR, "kubeconfig");
const USAGE =
  "usage: npm run cluster -- up [--nodes N] [--control-plane-nodes M] [--proxy-mode iptables|nftables]" +
  " [--serving-certs] [--bgp] [--dual-stack] | kill-node NAME | client [-- COMMAND…] | down | build";

/** How long `up --serving-certs` waits for `kubectl top nodes`: the chart's pods start, every CSR is approved,
 * metrics-server waits out its readiness probe's 20 s and scrapes twice. */
const SERVING_CERTS_TIMEOUT_MS = 300_000;

class UsageError extends Error {}

const UP_FLAGS = {
  nodes: { type: "string" },
  "control-plane-nodes": { type: "string" },
  "proxy-mode": { type: "string" },
  "serving-certs": { type: "boolean" },
  bgp: { type: "boolean" },
  "dual-stack": { type: "boolean" },
} as const;

type UpFlags = {
  nodes?: string;
  "control-plane-nodes"?: string;
  "proxy-mode"?: string;
  "serving-certs"?: boolean;
  bgp?: boolean;
  "dual-stack"?: boolean;
};

/**
 * Reads `up`'s flags. parseArgs runs unstrict so that each mistake is named as a person typed it
 * ("unknown flag --bogus"), not in parseArgs' words about positionals.
 */
function parseUpFlags(args: string[]): UpFlags {
  const { tokens } = parseArgs({ args, options: UP_FLAGS, strict: false, tokens: true });
  for (const token of tokens) {
    if (token.kind === "positional") throw new UsageError(`unexpected argument ${token.value}\n${USAGE}`);
    if (token.kind !== "option") continue;
    const flag = UP_FLAGS[token.name as keyof typeof UP_FLAGS] as { type: string } | undefined;
    if (!flag) throw new UsageError(`unknown flag ${token.rawName}\n${USAGE}`);
    if (flag.type === "string" && token.value === undefined)
      throw new UsageError(`${token.rawName} needs a value\n${USAGE}`);
    if (flag.type === "boolean" && token.value !== undefined)
      throw new UsageError(`${token.rawName} takes no value\n${USAGE}`);
  }
  return parseArgs({ args, options: UP_FLAGS, strict: true }).values;
}

function parseUp(args: string[]): {
  nodes: number;
  controlPlaneNodes: number;
  proxyMode: ProxyMode;
  servingCerts: boolean;
  bgp: boolean;
  dualStack: boolean;
} {
  const values = parseUpFlags(args);
  const nodes = Number(values.nodes ?? 2);
  if (!Number.isInteger(nodes) || nodes < 1 || nodes > MAX_NODES)
    throw new UsageError(`--nodes takes a number from 1 to ${MAX_NODES}\n${USAGE}`);
  const controlPlaneNodes = Number(values["control-plane-nodes"] ?? 1);
  if (!Number.isInteger(controlPlaneNodes) || controlPlaneNodes < 0 || controlPlaneNodes > nodes)
    throw new UsageError(`--control-plane-nodes takes a number from 0 to the nodes (${nodes})\n${USAGE}`);
  const proxyMode = values["proxy-mode"] ?? "iptables";
  if (!(PROXY_MODES as readonly string[]).includes(proxyMode))
    throw new UsageError(`--proxy-mode takes ${PROXY_MODES.join(" or ")}, not ${proxyMode}\n${USAGE}`);
  return {
    nodes,
    controlPlaneNodes,
    proxyMode: proxyMode as ProxyMode,
    servingCerts: values["serving-certs"] ?? false,
    bgp: values.bgp ?? false,
    dualStack: values["dual-stack"] ?? false,
  };
}

function running(): ClusterRecord {
  const record = recordFor(DIR);
  if (!record) throw new UsageError(`no cluster running in ${DIR} (npm run cluster -- up)`);
  return record;
}

async function up(args: string[]): Promise<void> {
  const { nodes, controlPlaneNodes, proxyMode, servingCerts, bgp, dualStack } = parseUp(args);
  if (recordFor(DIR)) {
    console.log(`already running (npm run cluster -- down first for another)\nexport KUBECONFIG=${KUBECONFIG}`);
    return;
  }
  rmSync(DIR, { recursive: true, force: true });
  const log = (line: string) => console.error(`cluster: ${line}`);
  const cluster = await startCluster({
    nodes: Array.from({ length: nodes }, () => ({ serverTLSBootstrap: servingCerts })),
    controlPlaneNodes,
    proxyMode,
    verifyKubeletServingCertificates: servingCerts,
    dualStack,
    dir: DIR,
    detached: true,
    log,
  });
  cluster.admin.close();
  if (servingCerts) {
    log("installing the chart with the CSR approver on, and metrics-server");
    await installServingCertificates(cluster);
    await nodeMetrics(cluster, SERVING_CERTS_TIMEOUT_MS);
  }
  const router = bgp ? await startRouter(cluster) : undefined;
  console.log(await cluster.kubectl(["get", "nodes", "-o", "wide"]));
  if (servingCerts) {
    console.log(await cluster.kubectl(["get", "csr"]));
    console.log(await cluster.kubectl(["top", "nodes"]));
  }
  const worker = cluster.nodes.find((node) => !node.controlPlane) ?? cluster.nodes[0];
  console.log(`logs in ${DIR}; kill a node with: npm run cluster -- kill-node ${worker?.name}`);
  console.log(`from outside the nodes: npm run cluster -- client -- curl http://${worker?.publicIP}:<nodePort>/`);
  if (router) {
    console.log(`router ${router.ip} (AS ${router.asn}) peers with every node (in any other AS, e.g. ${NODE_ASN}) and`);
    console.log(`carries the client's traffic; what it learned: vtysh --vty_socket ${DIR}/router -c 'show bgp summary'`);
  }
  console.log(`export KUBECONFIG=${KUBECONFIG}`);
}

/** Runs the command on the client host with the terminal attached; resolves with its exit code. */
async function client(args: string[]): Promise<number> {
  const record = running();
  const [command = process.env.SHELL ?? "/bin/sh", ...rest] = args[0] === "--" ? args.slice(1) : args;
  const { kubectl } = await ensureBinaries();
  const { argv, env } = clientCommand(record.slot, record.dir, kubectl, command, rest);
  const child = spawn(argv[0] as string, argv.slice(1), { stdio: "inherit", env });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

function down(): void {
  const record = recordFor(DIR);
  if (record) removeCluster(record);
  const leftovers = removeLeftovers();
  rmSync(DIR, { recursive: true, force: true });
  const also = leftovers.length > 0 ? ` (and what killed runs left in slots ${leftovers.join(", ")})` : "";
  console.log(`${record ? "removed" : "not running"}${also}`);
}

const commands: Record<string, (args: string[]) => Promise<number | void> | void> = {
  up,
  client,
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
    await ensureMetricsServerImage();
    await ensureAgnhostImage();
    await ensureCoreDNSImage();
    await ensureE2ETest();
  },
};

const [name = "", ...rest] = process.argv.slice(2);
const command = commands[name];
if (!command) {
  console.error(name ? `cluster: unknown command ${name}\n${USAGE}` : USAGE);
  process.exit(2);
}
try {
  process.exit((await command(rest)) ?? 0);
} catch (err) {
  console.error(`cluster: ${(err as Error).message}`);
  process.exit(err instanceof UsageError ? 2 : 1);
}
