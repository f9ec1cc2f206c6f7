// `npm run bench:churn`: does the agent's memory stay flat under churn? The bundled agent (the DaemonSet's Node
// flags, instance metadata on: an AWS-style metadata service in its namespace) in a network namespace against the
// real control plane, for BENCH_CHURN_SECONDS (600). Every second the node's ExternalIP flaps (the default route's
// source switches) and someone else writes the agent's Node (a kubelet-like heartbeat in its status), so the
// agent sees a Node watch event that is not its own. RSS and anonymous memory are sampled every second, in detail
// every 10 s. Growth is measured after the warm-up (BENCH_WARMUP_SECONDS, 120) as the difference between the median
// RSS of the last BENCH_WINDOW_SECONDS (120) and of the first as many after it: under churn the agent trims once a
// minute (memoryrelease.ts) and RSS saws, so single samples measure where in the minute they fall; the medians of
// whole minutes measure a trend. Single-sample figures are printed beside it. With each detailed sample its
// /metrics is scraped, as Prometheus would, for the V8 heap in use (nodejs_heap_size_used_bytes): heap that grows
// is JavaScript keeping objects; anonymous memory that grows while it does not is the runtime's own (split into
// malloc's [heap] segment and other anonymous mappings). Also prints the agent's Node writes (audit log: it should
// write once per flap and never for the heartbeat), its warnings and errors; the run fails if the agent exits.
// Budget (issue 17): RSS grows by ≤ 1 MiB after warm-up (the window medians).
import { setTimeout as delay } from "node:timers/promises";
import { registerNode, startAgent, startMetadataServer, startWorld } from "../test/agent/harness.ts";
import { waitFor } from "../localcluster/wait.ts";
import { scrapeMetrics } from "../localcluster/metrics.ts";
import { type AuditEvent, requestKey } from "../localcluster/audit.ts";
import { SHIPPED_ENV } from "../test/deploy/shipped.ts";
import { anonymousBySegment, type ProcessMemory, processMemory } from "./proc.ts";
import { median } from "./quantile.ts";
import {
  agentCommand,
  agentRequests,
  bundledAgent,
  defaultSourceSwitch,
  isWrite,
  NODE_ARGS,
  RUNTIME,
} from "./shipped-agent.ts";

const CHURN_SECONDS = Number(process.env.BENCH_CHURN_SECONDS ?? 600);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 120);
const WINDOW_SECONDS = Number(process.env.BENCH_WINDOW_SECONDS ?? 120);
const SAMPLE_EVERY_SECONDS = 10;
const NODE = "churn-node";
const METRICS_PORT = 10265;
interface Sample {
  second: number;
  memory: ProcessMemory;
  /** V8's heap in use, bytes. */
  heapUsed: number;
  anonymous: ReturnType<typeof anonymousBySegment>;
}
/** One write of the agent's: to its Node or not, and how the apiserver answered. */
interface Write {
  node: boolean;
  key: string;
}
/** Instance metadata on, and kept in line after initialisation, so that every reconcile plans it. */
const METADATA_FLAGS = ["--instance-metadata=aws", "--metadata-timeout=3s", "--update-metadata-labels"];

if (!(WARMUP_SECONDS > 0 && WINDOW_SECONDS > 0 && CHURN_SECONDS >= WARMUP_SECONDS + 2 * WINDOW_SECONDS)) {
  console.error("bench:churn: BENCH_CHURN_SECONDS must be at least BENCH_WARMUP_SECONDS + 2 × BENCH_WINDOW_SECONDS, all > 0");
  process.exit(2);
}

const entry = await bundledAgent();
const world = await startWorld();
try {
  const node = await world.nodeHost(0);
  await registerNode(world.nodes, NODE, "198.18.100.10", { on: node });
  const metadata = await startMetadataServer(node, ["aws"]);
  const metricsAt = `${node.reachableAt}:${METRICS_PORT}`;
  // Plain HTTP: a scrape authorised by the apiserver would add the agent's requests to the ones counted below.
  const metricsFlags = [`--metrics-bind-address=${metricsAt}`, "--secure-metrics=false"];
  const agent = startAgent(node, [`--node-name=${NODE}`, ...metricsFlags, ...METADATA_FLAGS], {
    entry,
    nodeArgs: NODE_ARGS,
    runtime: RUNTIME,
    env: SHIPPED_ENV,
  });
  try {
    await waitFor("the node initialised", () => /node initialised/.test(agent.output()), 60_000).catch((err) => {
      throw new Error(`${(err as Error).message}; the agent said:\n${agent.output()}`);
    });
    const switchSource = await defaultSourceSwitch(node, "198.18.10.20");
    /** A status write as kubelet's heartbeat makes it: the agent's watch sees it, nothing of the agent's changes. */
    const heartbeat = () => {
      const now = new Date().toISOString();
      const ready = { type: "Ready", status: "True", reason: "KubeletReady", lastHeartbeatTime: now };
      return world.nodes.patch(NODE, "strategic", { status: { conditions: [ready] } }, { subresource: "status" });
    };

    const samples: Sample[] = [];
    /** RSS each second, bytes. */
    const rssEachSecond: number[] = [];
    const from = new Date();
    const started = performance.now();
    for (let second = 0; second <= CHURN_SECONDS; second++) {
      // On the second, however long the last one's writes took.
      await delay(Math.max(0, started + second * 1000 - performance.now()));
      if (agent.child.exitCode !== null || agent.child.signalCode !== null) {
        throw new Error(`the agent exited (${agent.child.exitCode ?? agent.child.signalCode}):\n${agent.output()}`);
      }
      const memory = processMemory(agent.child.pid as number);
      rssEachSecond.push(memory.rss);
      if (second % SAMPLE_EVERY_SECONDS === 0) {
        const heapUsed = (await scrapeMetrics(metricsAt)).get("nodejs_heap_size_used_bytes") ?? Number.NaN;
        samples.push({ second, memory, heapUsed, anonymous: anonymousBySegment(agent.child.pid as number) });
      }
      if (second === CHURN_SECONDS) break;
      await Promise.all([switchSource(second), heartbeat()]);
    }
    const until = new Date();
    // The last flap's write has had a second; its audit line may still be on its way.
    await delay(2000);
    const requests = await agentRequests(world.plane.auditLogPath as string, from, until);
    const writes = requests.filter(isWrite).map((e) => ({ node: e.objectRef?.resource === "nodes", key: outcome(e) }));
    report(samples, rssEachSecond, writes, agent.output());
  } finally {
    await agent.stop();
    await metadata.stop();
  }
} finally {
  await world.stop();
}

/** "verb resource[/subresource] code", e.g. "update nodes/status 200". */
function outcome(event: AuditEvent): string {
  return `${requestKey(event)} ${event.responseStatus?.code ?? "?"}`;
}

function report(samples: Sample[], rssEachSecond: number[], writes: Write[], output: string): void {
  const row = (label: string, value: string) => console.log(`  ${label.padEnd(40)} ${value}`);
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const pair = (m: Pick<ProcessMemory, "rss" | "anon">) => `${mib(m.rss)} / ${mib(m.anon)}`;
  const signed = (bytes: number) => `${bytes >= 0 ? "+" : "−"}${mib(Math.abs(bytes))}`;
  const growth = (a: ProcessMemory, b: Pick<ProcessMemory, "rss" | "anon">) =>
    `${signed(b.rss - a.rss)} / ${signed(b.anon - a.anon)}`;
  const warmSample = samples.find((s) => s.second >= WARMUP_SECONDS) as Sample;
  const endSample = samples.at(-1) as Sample;
  const warm = warmSample.memory;
  const end = endSample.memory;
  const after = samples.filter((s) => s.second >= WARMUP_SECONDS).map((s) => s.memory);
  const max = { rss: Math.max(...after.map((m) => m.rss)), anon: Math.max(...after.map((m) => m.anon)) };
  const counted = (some: Write[]) => {
    const byKey = new Map<string, number>();
    for (const { key } of some) byKey.set(key, (byKey.get(key) ?? 0) + 1);
    return [...byKey].map(([key, count]) => `${count} × ${key}`).join(", ") || "none";
  };
  const nodeWrites = writes.filter((w) => w.node);
  const otherWrites = writes.filter((w) => !w.node);
  // Text log lines start with klog's severity letter: W for warnings, E for errors.
  const complaints = output.split("\n").filter((line) => /^[WE]\d{4} /.test(line));
  const flaps = CHURN_SECONDS;

  console.log(`local-ccm agent churn (bundled, ${agentCommand()} ${METADATA_FLAGS.join(" ")})`);
  console.log(`  ${CHURN_SECONDS} s: ${flaps} ExternalIP flaps and ${flaps} heartbeats, warm-up ${WARMUP_SECONDS} s`);
  row("RSS / anonymous at start", pair((samples[0] as Sample).memory));
  row("RSS / anonymous at end of warm-up", pair(warm));
  row("RSS / anonymous at end", pair(end));
  row("RSS / anonymous max after warm-up", pair(max));
  const firstWindow = median(rssEachSecond.slice(WARMUP_SECONDS, WARMUP_SECONDS + WINDOW_SECONDS));
  const lastWindow = median(rssEachSecond.slice(-WINDOW_SECONDS));
  row(`RSS median, first / last ${WINDOW_SECONDS} s`, `${mib(firstWindow)} / ${mib(lastWindow)}`);
  row("growth: last − first window", `${signed(lastWindow - firstWindow)}   (budget: RSS ≤ +1.0 MiB)`);
  row("growth: end − warm-up (single samples)", growth(warm, end));
  row("growth: max − warm-up (single samples)", growth(warm, max));
  const heaps = samples.filter((s) => s.second >= WARMUP_SECONDS).map((s) => s.heapUsed);
  const heapRange = `${mib(Math.min(...heaps))}–${mib(Math.max(...heaps))}`;
  row("V8 heap used: warm-up, end, range", `${mib(warmSample.heapUsed)}, ${mib(endSample.heapUsed)}, ${heapRange}`);
  const series = (bytes: (s: Sample) => number) => samples.map((s) => (bytes(s) / 2 ** 20).toFixed(1)).join(" ");
  row(`RSS every ${SAMPLE_EVERY_SECONDS} s, MiB`, series((s) => s.memory.rss));
  row(`anonymous every ${SAMPLE_EVERY_SECONDS} s, MiB`, series((s) => s.memory.anon));
  row(`anonymous: [heap] every ${SAMPLE_EVERY_SECONDS} s, MiB`, series((s) => s.anonymous.brk));
  row(`anonymous: other every ${SAMPLE_EVERY_SECONDS} s, MiB`, series((s) => s.anonymous.mapped));
  row(`V8 heap used every ${SAMPLE_EVERY_SECONDS} s, MiB`, series((s) => s.heapUsed));
  row("Node writes by the agent", `${nodeWrites.length} for ${flaps} flaps (${counted(nodeWrites)})`);
  row("its other writes", `${otherWrites.length} (${counted(otherWrites)})`);
  row("warnings / errors logged", String(complaints.length));
  for (const line of [...new Set(complaints.map((l) => l.slice(l.indexOf("] ") + 2)))].slice(0, 10)) {
    console.log(`    ${line}`);
  }
}
