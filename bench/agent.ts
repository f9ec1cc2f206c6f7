// `npm run bench:agent`: the bundled agent in a network namespace against the real control plane.
// Prints API requests and writes at rest (audit log, by user agent, scaled to an hour), drift-repair
// and IP-change latency (p50/p99 over BENCH_TRIALS trials), RSS, and start-to-first-reconcile time.
// The agent runs as the image runs it: Node's flags from the DaemonSet (BENCH_NODE_ARGS overrides them), the
// image's LD_PRELOAD, and a copy of the runtime of its own, as a pod's image layer holds one (whose page cache the
// cold starts drop). The runtime is this Node unless BENCH_RUNTIME names another's executable
// (e.g. node_modules/@oven/bun-linux-x64/bin/bun, with BENCH_NODE_ARGS="").
// After the rest, BENCH_QUIET_TRIALS (3) drift repairs each after 35 s of quiet: the agent trims its memory 30 s
// after work, so these pay for faulting back what the repair runs (the page cache still holds it).
// Then BENCH_COLD_STARTS (5) cold starts under the DaemonSet's memory limit (BENCH_COLD_LIMIT_MIB overrides it;
// see coldStart below). The runtime's copy goes to BENCH_COLD_DIR (default .cache/bench): point it at a disk with
// another readahead to compare.
// Budgets (issue 4): 0 writes and ≤ 4 requests per hour at rest; both latencies ≤ 1 s p99.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { Node } from "kubernetes-types/core/v1.js";
import { isApiError } from "../src/kube/errors.ts";
import { Informer } from "../src/kube/informer.ts";
import { addressesOf, type NodeHost, registerNode, startAgent, startWorld } from "../test/agent/harness.ts";
import { waitFor } from "../localcluster/wait.ts";
import { cpuSeconds, processMemory } from "./proc.ts";
import { quantile } from "./quantile.ts";
import { SHIPPED_ENV } from "../test/deploy/shipped.ts";
import {
  agentCommand,
  agentRequests,
  BENCH_DIR,
  bundledAgent,
  defaultSourceSwitch,
  isWrite,
  NODE_ARGS,
  RUNTIME,
} from "./shipped-agent.ts";

const TRIALS = Number(process.env.BENCH_TRIALS ?? 50);
const REST_SECONDS = Number(process.env.BENCH_REST_SECONDS ?? 120);
const COLD_STARTS = Number(process.env.BENCH_COLD_STARTS ?? 5);
const QUIET_TRIALS = Number(process.env.BENCH_QUIET_TRIALS ?? 3);
const entry = await bundledAgent();

/** The DaemonSet's memory limit in deploy/, MiB. */
function shippedLimitMiB(): number {
  const daemonSet = readFileSync(path.join(import.meta.dirname, "../deploy/daemonset.yaml"), "utf8");
  const limit = /limits:\s+memory: (\d+)Mi/.exec(daemonSet)?.[1];
  if (!limit) throw new Error("deploy/daemonset.yaml: no memory limit in Mi");
  return Number(limit);
}

interface ColdStart {
  ms: number;
  peakMiB: number;
  oomKills: number;
}

/**
 * The agent started in a cgroup of its own limited as the DaemonSet is, from a private copy of the runtime whose
 * pages are dropped from the page cache (as a pod's first start reads its image's binary from disk): the cgroup is
 * charged every page its faults read, and how much a fault reads is the disk's readahead (read_ahead_kb).
 */
async function coldStart(host: NodeHost, name: string, runtime: string, limitMiB: number): Promise<ColdStart> {
  await registerNode(world.nodes, name, "198.18.100.10", { on: host });
  const cgroup = `/sys/fs/cgroup/memory/local-ccm-bench-${process.pid}-${name}`;
  mkdirSync(cgroup);
  try {
    writeFileSync(path.join(cgroup, "memory.limit_in_bytes"), String(limitMiB * 2 ** 20));
    execFileSync("sync", [runtime, entry]);
    for (const file of [runtime, entry]) execFileSync("dd", [`if=${file}`, "iflag=nocache", "count=0", "status=none"]);
    const started = performance.now();
    const agent = startAgent(host, [`--node-name=${name}`], { entry, nodeArgs: NODE_ARGS, runtime, cgroup, env: SHIPPED_ENV });
    try {
      await waitFor(`${name} initialised`, () => /node initialised/.test(agent.output()), 120_000, 20);
      const ms = performance.now() - started;
      const read = (file: string) => readFileSync(path.join(cgroup, file), "utf8");
      const peakMiB = Number(read("memory.max_usage_in_bytes")) / 2 ** 20;
      return { ms, peakMiB, oomKills: Number(/oom_kill (\d+)/.exec(read("memory.oom_control"))?.[1] ?? NaN) };
    } finally {
      await agent.stop();
    }
  } finally {
    // The cgroup empties once the killed process is reaped.
    await waitFor("the cgroup removed", () => {
      try {
        rmdirSync(cgroup);
        return true;
      } catch {
        return false;
      }
    }, 10_000, 50);
  }
}

const privateRuntime = path.join(process.env.BENCH_COLD_DIR ?? BENCH_DIR, `own-${path.basename(RUNTIME)}`);
copyFileSync(RUNTIME, privateRuntime);
chmodSync(privateRuntime, 0o755);

const world = await startWorld();
try {
  const node = await world.nodeHost(0);
  await registerNode(world.nodes, "bench-node", "198.18.100.10", { on: node });
  // Our own watch on the Node timestamps every change the agent makes.
  const seen: { at: number; addresses: string[] }[] = [];
  const informer = new Informer(world.nodes, { fieldSelector: "metadata.name=bench-node" });
  informer.addHandlers({ onUpdate: (_, n: Node) => seen.push({ at: performance.now(), addresses: addressesOf(n) }) });
  informer.start();
  await informer.waitForSync();
  const until = async (what: string, check: (addresses: string[]) => boolean, from: number): Promise<number> => {
    for (let i = 0; i < 2000; i++) {
      const hit = seen.find((s) => s.at >= from && check(s.addresses));
      if (hit) return hit.at - from;
      await delay(2);
    }
    throw new Error(`no ${what} within 4 s`);
  };

  const started = performance.now();
  const agent = startAgent(node, ["--node-name=bench-node", "--reconcile-interval=10s"], {
    entry,
    nodeArgs: NODE_ARGS,
    runtime: privateRuntime,
    env: SHIPPED_ENV,
  });
  const firstReconcile = await until("first reconcile", (a) => a.includes(`ExternalIP=${node.external.v4}`), started)
    .catch(async (err: unknown) => {
      await agent.stop();
      throw new Error(`${(err as Error).message}; the agent said:\n${agent.output()}`);
    });

  const driftMs: number[] = [];
  /** Someone else removes the ExternalIP (retrying when the agent wrote in between). */
  const dropExternalIP = async () => {
    for (let attempt = 0; ; attempt++) {
      const n = await world.nodes.get("bench-node");
      const addresses = (n.status?.addresses ?? []).filter((a) => a.type !== "ExternalIP");
      try {
        return await world.nodes.update({ ...n, status: { ...n.status, addresses } }, { subresource: "status" });
      } catch (err) {
        if (!isApiError(err, "Conflict") || attempt >= 10) throw err;
      }
    }
  };
  for (let i = 0; i < TRIALS; i++) {
    await dropExternalIP();
    const t0 = performance.now();
    driftMs.push(await until("drift repair", (a) => a.includes(`ExternalIP=${node.external.v4}`), t0));
  }

  const changeMs: number[] = [];
  const switchSource = await defaultSourceSwitch(node, "198.18.10.20");
  for (let i = 0; i < TRIALS; i++) {
    const source = await switchSource(i);
    const t0 = performance.now();
    changeMs.push(await until("IP change", (a) => a.includes(`ExternalIP=${source}`), t0));
  }

  // At rest: nothing changes for REST_SECONDS; count what the agent asks of the apiserver, its CPU, and its RSS
  // every second (the agent trims 2 s after each resync, 30 s after its last write: the series shows both).
  await delay(3000);
  const pid = agent.child.pid as number;
  const restFrom = Date.now();
  const cpuFrom = cpuSeconds(pid);
  const rssAtRest: number[] = [];
  while (Date.now() - restFrom < REST_SECONDS * 1000) {
    await delay(1000);
    rssAtRest.push(processMemory(pid).rss);
  }
  const restTo = Date.now();
  const cpuAtRest = (cpuSeconds(pid) - cpuFrom) / ((restTo - restFrom) / 1000);
  const atRest = await agentRequests(world.plane.auditLogPath as string, new Date(restFrom), new Date(restTo));
  const writes = atRest.filter(isWrite).length;
  const memory = processMemory(pid);
  const quietDriftMs: number[] = [];
  for (let i = 0; i < QUIET_TRIALS; i++) {
    await delay(35_000);
    await dropExternalIP();
    const t0 = performance.now();
    quietDriftMs.push(await until("drift repair", (a) => a.includes(`ExternalIP=${node.external.v4}`), t0));
  }
  await agent.stop();
  await informer.stop();

  const limitMiB = Number(process.env.BENCH_COLD_LIMIT_MIB ?? shippedLimitMiB());
  const cold: ColdStart[] = [];
  for (let i = 0; i < COLD_STARTS; i++) cold.push(await coldStart(node, `cold-${i}`, privateRuntime, limitMiB));

  const pct = (values: number[], p: number) => quantile([...values].sort((a, b) => a - b), p / 100);
  const perHour = (count: number) => ((count * 3600) / REST_SECONDS).toFixed(1);
  const ms = (v: number) => `${v.toFixed(0)} ms`;
  console.log(`local-ccm agent (bundled, ${agentCommand()}), ${TRIALS} trials, ${REST_SECONDS} s at rest`);
  console.log(`  start to first reconcile          ${ms(firstReconcile)}`);
  console.log(`  drift repair       p50 / p99      ${ms(pct(driftMs, 50))} / ${ms(pct(driftMs, 99))}`);
  console.log(`  IP change to Node  p50 / p99      ${ms(pct(changeMs, 50))} / ${ms(pct(changeMs, 99))}`);
  if (quietDriftMs.length > 0) console.log(`  drift repair after 35 s quiet     ${quietDriftMs.map(ms).join(", ")}`);
  console.log(`  API requests at rest              ${atRest.length} in ${REST_SECONDS} s = ${perHour(atRest.length)} per hour (${[...new Set(atRest.map((e) => e.verb))].join(", ") || "none"})`);
  console.log(`  API writes at rest                ${writes} = ${perHour(writes)} per hour`);
  console.log("  watch renewal (by design)         every 30-60 min: at most 2 requests per hour");
  console.log(`  RSS / anonymous at rest           ${(memory.rss / 2 ** 20).toFixed(1)} MiB / ${(memory.anon / 2 ** 20).toFixed(1)} MiB`);
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const rssQuantiles = [50, 90].map((p) => mib(pct(rssAtRest, p))).join(" / ");
  console.log(`  RSS at rest each second p50/p90/max ${rssQuantiles} / ${mib(Math.max(...rssAtRest))} (${rssAtRest.length} samples)`);
  console.log(`    every second, MiB               ${rssAtRest.map((bytes) => (bytes / 2 ** 20).toFixed(1)).join(" ")}`);
  console.log(`  CPU at rest                       ${(cpuAtRest * 100).toFixed(3)} %`);
  if (cold.length > 0) {
    const cgroupPeaks = cold.map((c) => c.peakMiB.toFixed(1)).join(", ");
    console.log(`  cold starts under ${limitMiB}Mi, to initialised ${cold.map((c) => ms(c.ms)).join(", ")}`);
    console.log(`    cgroup peak                     ${cgroupPeaks} MiB; OOM kills ${cold.reduce((n, c) => n + c.oomKills, 0)}`);
  }
} finally {
  await world.stop();
}
