// `npm run bench:nlc`: the bundled node-lifecycle-controller, with leader election, under the shipped
// RBAC, in a network namespace, against a real control plane holding 5,000 kubelet-like Nodes, all
// of them watched (--watch-autoscaler-taint=false: every node is decided on every pass, the most
// work a pass can do). For each set of node flags (BENCH_NODE_ARGS, else none and then the
// Deployment's) it prints memory (RSS, RssAnon, peak), CPU over an idle minute and over a minute of
// kubelet status reports, the API requests in the idle minute (audit log, by user agent), and the
// time from a node's NotReady expiry to its deletion. Budget (issue 5): RSS ≤ 150 MiB, idle CPU
// ≈ 0, an expired node handled within one --reconcile-interval. The last run has the kubelet-serving CSR
// approver on as well (--controllers=*,kubelet-serving-csr, under the chart's RBAC for it): side by side with
// the run before it, what the approver costs, and the time from a CSR's creation (by a node, with a real
// request) to its approval as a watcher sees it, for BENCH_CSRS CSRs made 10 at a time. Budget: p99 ≤ 1 s.
import { readFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Node } from "kubernetes-types/core/v1.js";
import { bundleProgram } from "../scripts/bundle.ts";
import { run } from "../localcluster/exec.ts";
import { scrapeMetrics } from "../localcluster/metrics.ts";
import {
  apiTimeAgo,
  auditedRequests,
  ControllerProcess,
  nodeObject,
  startWorld,
  type World,
} from "../test/lifecycle/world.ts";
import { CSR_RESOURCE } from "../src/csr/controller.ts";
import { Informer } from "../src/kube/informer.ts";
import { Resource } from "../src/kube/resource.ts";
import { approverRbac, nodeClient, requestCertificate } from "../test/csr/world.ts";
import { type ProcessMemory, processMemory } from "./proc.ts";
import { shippedCommand } from "../test/deploy/shipped.ts";

const NODES = Number(process.env.BENCH_NODES ?? 5000);
const CSRS = Number(process.env.BENCH_CSRS ?? 200);
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60);
/** Kubelets at rest report their status every 5 min (nodeStatusReportFrequency): NODES / 300 a second. */
const HEARTBEATS_PER_S = Math.ceil(NODES / 300);
const RECONCILE_INTERVAL_S = 30;
const NOT_READY_TIMEOUT_S = 300;
const PING = { timeoutS: 5, count: 3 }; // the defaults: a silent host takes 15 s to be called unreachable
const MiB = 1024 * 1024;
/** Node's own flags, one run each: plain, and as the Deployment gives them. */
const NODE_ARGS: string[][] = process.env.BENCH_NODE_ARGS
  ? [process.env.BENCH_NODE_ARGS.split(" ").filter(Boolean)]
  : [[], shippedCommand("node-lifecycle-controller").nodeArgs];

const nodeName = (i: number) => `node-${String(i).padStart(5, "0")}`;

/** A Node the size kubelet writes: labels, annotations, five conditions, capacity, node info, images. */
function kubeletNode(i: number): Node {
  const name = nodeName(i);
  const now = new Date().toISOString();
  const address = `198.18.${100 + (i >> 8)}.${i & 255}`;
  const base = nodeObject(name, { address, ready: "True", tainted: false });
  const condition = (type: string, status: string, reason: string, message: string) => ({
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: now,
  });
  return {
    ...base,
    metadata: {
      name,
      labels: {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m6i.2xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": `eu-west-1${"abc"[i % 3]}`,
        "node.example.com/pool": `pool-${i % 8}`,
      },
      annotations: {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
        "csi.volume.kubernetes.io/nodeid": JSON.stringify({ "ebs.csi.aws.com": `i-0${i.toString(16)}` }),
      },
    },
    status: {
      ...base.status,
      conditions: [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
      ],
      capacity: { cpu: "8", "ephemeral-storage": "104845292Ki", memory: "32386524Ki", pods: "110" },
      allocatable: { cpu: "7910m", "ephemeral-storage": "95551679124", memory: "31369756Ki", pods: "110" },
      daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
      nodeInfo: {
        machineID: "ec2a4f3b9d3e4c51a6f0b1c2d3e4f5a6",
        systemUUID: "ec2a4f3b-9d3e-4c51-a6f0-b1c2d3e4f5a6",
        bootID: "0b6f2a7e-3c1d-4e8f-9a2b-5c6d7e8f9a0b",
        kernelVersion: "6.1.0-18-cloud-amd64",
        osImage: "Debian GNU/Linux 12 (bookworm)",
        containerRuntimeVersion: "containerd://1.7.13",
        kubeletVersion: "v1.30.0",
        kubeProxyVersion: "v1.30.0",
        operatingSystem: "linux",
        architecture: "amd64",
      },
      images: Array.from({ length: 12 }, (_, n) => ({
        names: [
          `registry.example.com/team-${n}/service@sha256:${String(n).repeat(64).slice(0, 64)}`,
          `registry.example.com/team-${n}/service:v1.${n}.0`,
        ],
        sizeBytes: 50_000_000 + n * 1_000_000,
      })),
    },
  };
}

/** User + system CPU time of a process in clock ticks (fields 14 and 15 of /proc/<pid>/stat). */
function cpuTicks(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return Number(fields[11]) + Number(fields[12]);
}

/**
 * A minute (IDLE_SECONDS) of kubelet status reports: HEARTBEATS_PER_S Nodes a second get a new
 * Ready heartbeat time, each Node once at most.
 */
async function heartbeats(world: World): Promise<void> {
  let sent = 0;
  for (let second = 0; second < IDLE_SECONDS; second++) {
    const tick = delay(1000);
    const now = new Date().toISOString();
    const batch = Array.from({ length: HEARTBEATS_PER_S }, (_, n) => nodeName((sent + n) % NODES));
    const patch = { status: { conditions: [{ type: "Ready", lastHeartbeatTime: now }] } };
    await Promise.all(batch.map((name) => world.nodes.patch(name, "strategic", patch, { subresource: "status" })));
    sent += batch.length;
    await tick;
  }
}

/** The controller's /metrics, as series → value (its address comes from its log). */
async function scrape(nlc: ControllerProcess): Promise<Map<string, number>> {
  const serving = await nlc.waitForLog("serving /healthz, /readyz and /metrics");
  return scrapeMetrics(String(serving.address));
}

interface Figures {
  syncS: number;
  idle: ProcessMemory;
  after: ProcessMemory;
  heap: number;
  cpuIdle: number;
  cpuHeartbeats: number;
  passes: number;
  idleRequests: Map<string, number>;
  probingS: number;
  deletedS: number;
  icmpUnavailable: boolean;
  /** Creation → approval seen, in seconds, sorted; empty without the approver. */
  csrLatencies: number[];
}

/** CSRS nodes each ask for a serving certificate, 10 at a time; the seconds from each creation to its approval. */
async function csrLatencies(world: World): Promise<number[]> {
  const clients = await Promise.all(Array.from({ length: CSRS }, (_, i) => nodeClient(world.plane, nodeName(i))));
  const approved = new Map<string, number>();
  const informer = new Informer(new Resource<CertificateSigningRequest>(world.plane.admin, CSR_RESOURCE));
  const seen = (csr: CertificateSigningRequest) => {
    if (csr.status?.conditions?.some((c) => c.type === "Approved")) approved.set(csr.metadata?.name ?? "", performance.now());
  };
  informer.addHandlers({ onAdd: seen, onUpdate: (_, csr) => seen(csr) });
  informer.start();
  await informer.waitForSync();
  const createdAt = new Map<string, number>();
  try {
    for (let i = 0; i < CSRS; i += 10) {
      await Promise.all(
        clients.slice(i, i + 10).map(async (client, n) => {
          const node = nodeName(i + n);
          const address = `198.18.${100 + ((i + n) >> 8)}.${(i + n) & 255}`;
          const sent = performance.now();
          const name = await requestCertificate(client, node, { sans: `DNS:${node},IP:${address}` });
          createdAt.set(name, sent);
        }),
      );
    }
    await waitUntil(() => [...createdAt.keys()].every((name) => approved.has(name)), 60_000);
    return [...createdAt].map(([name, sent]) => ((approved.get(name) as number) - sent) / 1000).sort((a, b) => a - b);
  } finally {
    await informer.stop();
    for (const client of clients) client.close();
  }
}

async function waitUntil(check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out waiting for the CSRs' approvals");
    await delay(50);
  }
}

/** One run of the controller: start, an idle minute, then one node expires and is deleted. */
async function measure(world: World, nodeArgs: string[], run: number, approver: boolean): Promise<Figures> {
  const started = Date.now();
  const nlc = new ControllerProcess(
    world,
    [
      `--kubeconfig=${world.kubeconfig}`,
      "--watch-autoscaler-taint=false",
      `--reconcile-interval=${RECONCILE_INTERVAL_S}s`,
      `--not-ready-timeout=${NOT_READY_TIMEOUT_S}s`,
      `--ping-timeout=${PING.timeoutS}s`,
      `--ping-count=${PING.count}`,
      "--leader-elect-resource-namespace=kube-system",
      "--v=2",
      `--health-bind-address=${world.proberIP}:0`,
      `--metrics-bind-address=${world.proberIP}:0`,
      "--secure-metrics=false",
      ...(approver ? ["--controllers=*,kubelet-serving-csr"] : []),
    ],
    { entry, nodeArgs },
  );
  try {
    const synced = await nlc.waitForLog("node cache synced", {}, 120_000);
    await nlc.waitForLog("started leading", {}, 60_000);
    await delay(10_000); // start-up allocations settle

    const idleFrom = new Date();
    const cpuBefore = cpuSeconds(nlc.pid);
    await delay(IDLE_SECONDS * 1000);
    const cpuIdle = cpuSeconds(nlc.pid) - cpuBefore;
    const idleTo = new Date();
    const idle = processMemory(nlc.pid);
    const scraped = await scrape(nlc);

    const cpuBeforeHeartbeats = cpuSeconds(nlc.pid);
    await heartbeats(world);
    const cpuHeartbeats = cpuSeconds(nlc.pid) - cpuBeforeHeartbeats;

    // One node goes NotReady (its host gone) and expires 10 s from now.
    const name = `expiring-node-${run}`;
    const since = apiTimeAgo(NOT_READY_TIMEOUT_S * 1000 - 10_000);
    const expiry = since.getTime() + NOT_READY_TIMEOUT_S * 1000;
    await world.nodes.create(nodeObject(name, { address: await world.deadAddress(), since }));
    const timeout = (RECONCILE_INTERVAL_S + PING.timeoutS * PING.count + 40) * 1000;
    const sinceExpiry = async (msg: string) =>
      (Date.parse((await nlc.waitForLog(msg, { node: name }, timeout)).ts ?? "") - expiry) / 1000;
    const probingS = await sinceExpiry("probing");
    const deletedS = await sinceExpiry("deleted node");
    const latencies = approver ? await csrLatencies(world) : [];
    return {
      csrLatencies: latencies,
      syncS: (Date.parse(synced.ts ?? "") - started) / 1000,
      idle,
      after: processMemory(nlc.pid),
      heap: scraped.get("nodejs_heap_size_used_bytes") ?? Number.NaN,
      cpuIdle,
      cpuHeartbeats,
      passes: scraped.get("node_lifecycle_controller_reconciles_total") ?? Number.NaN,
      idleRequests: await auditedRequests(world, idleFrom, idleTo),
      probingS,
      deletedS,
      icmpUnavailable: nlc.lines.some((line) => line.msg.startsWith("ICMP probes unavailable")),
    };
  } finally {
    await nlc.stop();
  }
}

const entry = await bundleProgram("node-lifecycle-controller", path.join(import.meta.dirname, "../.cache/bench"));
const ticks = Number(await run("getconf", ["CLK_TCK"]));
const cpuSeconds = (pid: number) => cpuTicks(pid) / ticks;
const world = await startWorld({ subnet: 252, audit: true });
try {
  const created = performance.now();
  for (let i = 0; i < NODES; i += 50) {
    const batch = Array.from({ length: Math.min(50, NODES - i) }, (_, n) => kubeletNode(i + n));
    await Promise.all(batch.map((node) => world.nodes.create(node)));
  }
  const createdS = (performance.now() - created) / 1000;
  const nodeKiB = JSON.stringify(await world.nodes.get("node-00000")).length / 1024;
  const runs: [string, Figures][] = [];
  for (const [i, nodeArgs] of NODE_ARGS.entries())
    runs.push([`node ${nodeArgs.join(" ") || "(no flags)"}`, await measure(world, nodeArgs, i, false)]);
  const lastArgs = NODE_ARGS.at(-1) ?? [];
  await world.plane.kubectl(["apply", "-f", "-"], await approverRbac(world.plane.binaries.helm));
  runs.push([`the same + CSR approver`, await measure(world, lastArgs, NODE_ARGS.length, true)]);

  const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
  const s = (seconds: number) => `${seconds.toFixed(1)} s`;
  const requests = (counts: Map<string, number>) =>
    [...counts].map(([request, count]) => `${request} ×${count}`).join(", ") || "none";
  const row = (label: string, value: (f: Figures) => string, note = "") =>
    console.log(`  ${label.padEnd(34)}${runs.map(([, f]) => value(f).padEnd(36)).join("")}${note}`);
  console.log(`node-lifecycle-controller (bundled), Node ${process.version}`);
  console.log(`  ${NODES} kubelet-like Nodes of ${nodeKiB.toFixed(1)} KiB JSON each, created in ${s(createdS)}`);
  console.log(
    `  every node watched (--watch-autoscaler-taint=false), --reconcile-interval=${RECONCILE_INTERVAL_S}s,` +
      ` --not-ready-timeout=${NOT_READY_TIMEOUT_S}s, probe ${PING.count} × ${PING.timeoutS} s, leader election on`,
  );
  console.log(`  ${"".padEnd(34)}${runs.map(([label]) => label.padEnd(36)).join("")}`);
  row("start to synced cache", (f) => s(f.syncS));
  row("RSS / RssAnon after idle", (f) => `${mib(f.idle.rss)} / ${mib(f.idle.anon)}`, "budget: RSS ≤ 150 MiB");
  row("peak RSS (VmHWM)", (f) => mib(f.idle.peak));
  row("V8 heap used after idle", (f) => mib(f.heap));
  row("RSS / RssAnon after the deletion", (f) => `${mib(f.after.rss)} / ${mib(f.after.anon)}`);
  const share = (cpu: number) => `${cpu.toFixed(2)} s = ${((cpu / IDLE_SECONDS) * 100).toFixed(2)}% of a core`;
  row(`CPU over ${IDLE_SECONDS} s idle`, (f) => share(f.cpuIdle));
  row(`CPU, ${HEARTBEATS_PER_S} heartbeats/s for ${IDLE_SECONDS} s`, (f) => share(f.cpuHeartbeats), "kubelets reporting every 5 min");
  row("passes over all nodes so far", (f) => String(f.passes));
  row("expiry → probe started", (f) => s(f.probingS), `budget: ≤ one interval (${RECONCILE_INTERVAL_S} s)`);
  row("expiry → deleted", (f) => s(f.deletedS), `a silent host: ${PING.count} × ${PING.timeoutS} s of ICMP`);
  row("ICMP probes", (f) => (f.icmpUnavailable ? "UNAVAILABLE (TCP only)" : "available"));
  const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
  row(
    `CSR created → approved (${CSRS})`,
    (f) =>
      f.csrLatencies.length
        ? `p50 ${(quantile(f.csrLatencies, 0.5) as number).toFixed(3)} s, p99 ${(quantile(f.csrLatencies, 0.99) as number).toFixed(3)} s`
        : "-",
    "budget: p99 ≤ 1 s",
  );
  for (const [label, f] of runs)
    console.log(`  API requests in the idle ${IDLE_SECONDS} s, ${label}: ${requests(f.idleRequests)}`);
  console.log(`  API requests over the whole bench: ${requests(await auditedRequests(world))}`);
} finally {
  await world.stop();
}
