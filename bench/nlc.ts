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
// request) to its approval as a watcher sees it, for BENCH_CSRS CSRs made 10 at a time; then as many again
// while other nodes send hostile requests (two PEM blocks, a BEGIN line with a trailing space; a valid block and
// unterminated BEGIN lines, at the 16 KiB bound and at 512 KiB), with the controller's longest /healthz answer
// in both phases. Budget: p99 ≤ 1 s. Before the cluster starts, in this process: the approver's decision time for the largest
// request it reads, and for each hostile request, with the longest event-loop stall (budget ≤ 50 ms).
import path from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setImmediate as nextTurn } from "node:timers/promises";
import { setTimeout as delay } from "node:timers/promises";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import { bundleProgram } from "../localcluster/bundle.ts";
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
import { NO_CLUSTER_ADDRESSES } from "../src/csr/cluster.ts";
import { csrObject, opensslCsr } from "../src/csr/csr.fixture.ts";
import { type CsrConfig, csrFacts, decideCSR, KUBELET_SERVING_SIGNER } from "../src/csr/decide.ts";
import { indexNode, indexNodes } from "../src/csr/nodes.ts";
import { MAX_REQUEST_BYTES } from "../src/csr/request.ts";
import type { KubeClient } from "../src/kube/client.ts";
import { Informer } from "../src/kube/informer.ts";
import { Resource } from "../src/kube/resource.ts";
import { approverRbac, nodeClient, requestCertificate } from "../test/csr/world.ts";
import { kubeletNode, nodeAddress, nodeName } from "./nodes.ts";
import { cpuSeconds, type ProcessMemory, processMemory } from "./proc.ts";
import { quantile } from "./quantile.ts";
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
  /** The CSR phases, honest requests only and with hostile ones; undefined without the approver. */
  csr?: { honest: CsrFigures; mixed: CsrFigures };
}

/** Hostile requests of a node: kind 1 (two blocks, Go reads the first) and kind 4 (unterminated BEGIN lines). */
function hostileRequests(node: string, address: string, victimAddress: string): [label: string, text: string][] {
  const subject = `/O=system:nodes/CN=system:node:${node}`;
  const honest = opensslCsr({ subject, sans: `DNS:${node},IP:${address}` });
  const hostile = opensslCsr({ subject, sans: `DNS:${node},DNS:kubernetes.default.svc,IP:${victimAddress}` });
  const line = "-----BEGIN CERTIFICATE REQUEST-----\n";
  const padded = (bytes: number) => honest + line.repeat(Math.floor((bytes - honest.length) / line.length));
  return [
    ["kind 1: two blocks, BEGIN line + space", hostile.replace("REQUEST-----\n", "REQUEST----- \n") + honest],
    ["kind 4: BEGIN lines to the bound", padded(MAX_REQUEST_BYTES)],
    [`kind 4: BEGIN lines to ${OVER_BOUND_BYTES / 1024} KiB`, padded(OVER_BOUND_BYTES)],
  ];
}

const OVER_BOUND_BYTES = 512 * 1024;

interface ReaderFigures {
  largest: { bytes: number; sans: number; meanMs: number; p99Ms: number; maxMs: number; action: string };
  hostile: { label: string; bytes: number; maxMs: number; reason: string }[];
  /** The longest event-loop delay while the hostile requests were decided, 20 times each. */
  stallMs: number;
}

/**
 * In this process, as the controller does per CSR event (spec.request decoded, read, decided against an index of
 * NODES nodes): the largest request read (DNS SANs up to the size bound, all the node's own), and the hostile ones.
 */
async function readerFigures(): Promise<ReaderFigures> {
  const subject = "/O=system:nodes/CN=system:node:big";
  const names = (count: number) => Array.from({ length: count }, (_, i) => `big-${i}.nodes.example.com`);
  const request = (count: number) => opensslCsr({ subject, sans: names(count).map((name) => `DNS:${name}`).join(",") });
  let count = 480;
  let text = request(count);
  while (text.length > MAX_REQUEST_BYTES) text = request((count -= 5));
  const big = indexNode({
    name: "big",
    uninitialized: false,
    addresses: names(count).map((address) => ({ type: "Hostname", address })),
  });
  const others = Array.from({ length: NODES }, (_, i) =>
    indexNode({
      name: nodeName(i),
      uninitialized: false,
      addresses: [
        { type: "InternalIP", address: nodeAddress(i) },
        { type: "Hostname", address: nodeName(i) },
      ],
    }),
  );
  const index = indexNodes([big, ...others]);
  const config: CsrConfig = {
    apiServerNames: [],
    ipAllowlist: [],
    maxExpirationSeconds: 86_400,
    pendingTimeoutMs: 600_000,
  };
  const decide = (request: string, node: string) => {
    const csr = csrObject(request, { username: `system:node:${node}` });
    const started = performance.now();
    const decision = decideCSR(csrFacts(csr), index, config, new Date(), NO_CLUSTER_ADDRESSES);
    return { ms: performance.now() - started, decision };
  };
  const times: number[] = [];
  let action = "";
  for (let i = 0; i < 200; i++) {
    const { ms, decision } = decide(text, "big");
    times.push(ms);
    action = decision.action;
  }
  const hostile = hostileRequests(nodeName(1), "198.18.100.1", "198.18.100.0");
  const worst = new Map<string, { maxMs: number; reason: string }>();
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  for (let round = 0; round < 20; round++)
    for (const [label, request] of hostile) {
      await nextTurn();
      const { ms, decision } = decide(request, nodeName(1));
      worst.set(label, { maxMs: Math.max(ms, worst.get(label)?.maxMs ?? 0), reason: decision.reason });
    }
  loop.disable();
  return {
    largest: {
      bytes: text.length,
      sans: count,
      meanMs: times.reduce((sum, ms) => sum + ms, 0) / times.length,
      p99Ms: quantile(times.sort((a, b) => a - b), 0.99),
      maxMs: Math.max(...times),
      action,
    },
    hostile: hostile.map(([label, request]) => ({
      label,
      bytes: request.length,
      ...(worst.get(label) as { maxMs: number; reason: string }),
    })),
    stallMs: loop.max / 1e6,
  };
}

interface CsrFigures {
  /** Creation → approval seen, in seconds, sorted. */
  latencies: number[];
  hostileSent: number;
  hostileDenied: number;
  /** The controller's longest /healthz answer while the CSRs arrived. */
  healthMaxMs: number;
}

/**
 * CSRS nodes (from node `first` on) each ask for a serving certificate, 10 at a time, and with `hostile`, with
 * each ten another node sends one hostile request: the seconds from each honest creation to its approval, and
 * what became of the hostile ones.
 */
async function csrLatencies(world: World, healthAddress: string, first: number, hostile: boolean): Promise<CsrFigures> {
  const batches = Math.ceil(CSRS / 10);
  const clients = await Promise.all(
    Array.from({ length: CSRS + batches }, (_, i) => nodeClient(world.plane, nodeName(first + i))),
  );
  const approved = new Map<string, number>();
  const denied = new Set<string>();
  const informer = new Informer(new Resource<CertificateSigningRequest>(world.plane.admin, CSR_RESOURCE));
  const seen = (csr: CertificateSigningRequest) => {
    const name = csr.metadata?.name ?? "";
    if (csr.status?.conditions?.some((c) => c.type === "Approved")) approved.set(name, performance.now());
    if (csr.status?.conditions?.some((c) => c.type === "Denied")) denied.add(name);
  };
  informer.addHandlers({ onAdd: seen, onUpdate: (_, csr) => seen(csr) });
  informer.start();
  await informer.waitForSync();
  const createdAt = new Map<string, number>();
  const hostileNames: string[] = [];
  // Made before the clock runs: openssl blocks this process.
  const hostileTexts = Array.from({ length: hostile ? batches : 0 }, (_, batch) => {
    const sender = first + CSRS + batch;
    const kinds = hostileRequests(nodeName(sender), nodeAddress(sender), nodeAddress(first));
    return (kinds[batch % kinds.length] as [string, string])[1];
  });
  let probing = true;
  let healthMaxMs = 0;
  const probe = (async () => {
    while (probing) {
      const started = performance.now();
      await fetch(`http://${healthAddress}/healthz`).then((res) => res.arrayBuffer());
      healthMaxMs = Math.max(healthMaxMs, performance.now() - started);
      await delay(20);
    }
  })();
  try {
    for (let i = 0, batch = 0; i < CSRS; i += 10, batch++) {
      const text = hostileTexts[batch];
      const name = `hostile-${first}-${batch}`;
      await Promise.all([
        text && createRequest(clients[CSRS + batch] as KubeClient, name, text).then(() => hostileNames.push(name)),
        ...clients.slice(i, Math.min(i + 10, CSRS)).map(async (client, n) => {
          const node = nodeName(first + i + n);
          const sent = performance.now();
          const sans = `DNS:${node},IP:${nodeAddress(first + i + n)}`;
          const name = await requestCertificate(client, node, { sans });
          createdAt.set(name, sent);
        }),
      ]);
    }
    await waitUntil(
      () => [...createdAt.keys()].every((name) => approved.has(name)) && hostileNames.every((name) => denied.has(name)),
      60_000,
    );
    return {
      latencies: [...createdAt]
        .map(([name, sent]) => ((approved.get(name) as number) - sent) / 1000)
        .sort((a, b) => a - b),
      hostileSent: hostileNames.length,
      hostileDenied: hostileNames.filter((name) => denied.has(name)).length,
      healthMaxMs,
    };
  } finally {
    probing = false;
    await probe;
    await informer.stop();
    for (const client of clients) client.close();
  }
}

/** A kubelet-serving CSR with exactly this request text. */
async function createRequest(client: KubeClient, name: string, request: string): Promise<void> {
  await new Resource<CertificateSigningRequest>(client, CSR_RESOURCE).create({
    metadata: { name },
    spec: {
      request: Buffer.from(request).toString("base64"),
      signerName: KUBELET_SERVING_SIGNER,
      usages: ["digital signature", "server auth"],
    },
  });
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
    const synced = await nlc.waitForLog("caches synced", {}, 120_000);
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
    const healthAddress = String((await nlc.waitForLog("serving /healthz, /readyz and /metrics")).address);
    const csr = approver
      ? {
          honest: await csrLatencies(world, healthAddress, 0, false),
          mixed: await csrLatencies(world, healthAddress, CSRS + Math.ceil(CSRS / 10), true),
        }
      : undefined;
    return {
      ...(csr ? { csr } : {}),
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

const reader = await readerFigures();
console.log(`kubelet-serving CSR reader and decision (this process, an index of ${NODES + 1} nodes)`);
const { largest } = reader;
console.log(
  `  largest request read: ${largest.bytes} bytes, ${largest.sans} DNS SANs (${largest.action}):` +
    ` mean ${largest.meanMs.toFixed(2)} ms, p99 ${largest.p99Ms.toFixed(2)} ms,` +
    ` max ${largest.maxMs.toFixed(2)} ms of 200`,
);
for (const { label, bytes, maxMs, reason } of reader.hostile)
  console.log(`  ${label} (${bytes} bytes): max ${maxMs.toFixed(2)} ms over 20 — ${reason}`);
console.log(`  longest event-loop delay while deciding those: ${reader.stallMs.toFixed(1)} ms (budget ≤ 50 ms)`);
if (process.env.BENCH_READER_ONLY) process.exit(0);

const entry = await bundleProgram("node-lifecycle-controller", path.join(import.meta.dirname, "../.cache/bench"));
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
  const seconds = (sorted: number[], q: number) => `${quantile(sorted, q).toFixed(3)} s`;
  const latency = ({ latencies }: CsrFigures) => `p50 ${seconds(latencies, 0.5)}, p99 ${seconds(latencies, 0.99)}`;
  row(`CSR created → approved (${CSRS})`, (f) => (f.csr ? latency(f.csr.honest) : "-"), "budget: p99 ≤ 1 s");
  row("the same, hostile CSRs meanwhile", (f) => (f.csr ? latency(f.csr.mixed) : "-"), "budget: p99 ≤ 1 s");
  row("hostile CSRs denied", (f) => (f.csr ? `${f.csr.mixed.hostileDenied} of ${f.csr.mixed.hostileSent}` : "-"));
  const health = ({ healthMaxMs }: CsrFigures) => `${healthMaxMs.toFixed(1)} ms`;
  row(
    "longest /healthz answer: honest / mixed",
    (f) => (f.csr ? `${health(f.csr.honest)} / ${health(f.csr.mixed)}` : "-"),
    "the approver's event loop, and this loaded machine's scheduling",
  );
  for (const [label, f] of runs)
    console.log(`  API requests in the idle ${IDLE_SECONDS} s, ${label}: ${requests(f.idleRequests)}`);
  console.log(`  API requests over the whole bench: ${requests(await auditedRequests(world))}`);
} finally {
  await world.stop();
}
