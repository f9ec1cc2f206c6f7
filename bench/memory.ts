// `npm run bench:memory`: steady-state memory of a process that loads the API layer and keeps an
// informer on one Node, beside a bare Node 24 process and one that only holds an HTTPS connection
// (the floor under any Kubernetes client on Node), sampled together for BENCH_SECONDS (60 s). Each
// runs as bundled CommonJS (localcluster/bundle.ts), as the image does, under plain `node`, under the
// DaemonSet's Node flags and under Bun (localcluster/bun.ts), side by side. The parent reads /proc; the children
// have no IPC channel (it costs ~5 MiB).
// Budget (issue 3): 48 MiB RSS.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { bundle } from "../localcluster/bundle.ts";
import { BUN, NO_BUN } from "../localcluster/bun.ts";
import { startControlPlane } from "../localcluster/controlplane.ts";
import { type ProcessMemory, processMemory } from "./proc.ts";
import { shippedCommand } from "../test/deploy/shipped.ts";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const MiB = 1024 * 1024;

const plane = await startControlPlane();
const children: ChildProcess[] = [];
try {
  await plane.admin.request({ method: "POST", path: "/api/v1/nodes", body: { metadata: { name: "bench-node" } } });
  const fixture = path.join(import.meta.dirname, "../.cache/bench/memory-fixture.cjs");
  await bundle(path.join(import.meta.dirname, "memory-fixture.ts"), fixture);
  const processes = {
    "bare Node": ["bare"],
    "https, one connection": ["https", plane.server, plane.caPath],
    "API layer + informer": ["informer", plane.kubeconfigPath, "bench-node"],
  };
  /** Each runtime's command line before the fixture. */
  const runtimes: Record<string, string[]> = {
    "plain node": [process.execPath],
    "DaemonSet's flags": [process.execPath, ...shippedCommand("local-ccm").nodeArgs],
    ...(NO_BUN ? {} : { [`bun ${execFileSync(BUN, ["--version"], { encoding: "utf8" }).trim()}`]: [BUN] }),
  };
  const runs = Object.entries(processes).flatMap(([name, args]) =>
    Object.entries(runtimes).map(([flags, [runtime, ...runtimeArgs]]) => {
      const child = spawn(runtime as string, [...runtimeArgs, fixture, ...args], { stdio: ["ignore", "inherit", "inherit"] });
      children.push(child);
      return { name, flags, pid: child.pid as number, samples: [] as ProcessMemory[] };
    }),
  );
  for (let s = 0; s < SECONDS; s += 5) {
    await delay(5000);
    for (const run of runs) run.samples.push(processMemory(run.pid));
  }
  // Steady state: the largest sample of the last half of the run, after start-up has settled.
  const steady = (samples: ProcessMemory[], key: "rss" | "anon") =>
    (Math.max(...samples.slice(Math.floor(samples.length / 2)).map((m) => m[key])) / MiB).toFixed(1);
  const line = (first: string, cells: string[]) => console.log(`  ${first.padEnd(24)} ${cells.map((c) => c.padEnd(52)).join("")}`.trimEnd());
  console.log(`Memory over the last ${SECONDS / 2} s of ${SECONDS} s, Node ${process.version}, RSS / anonymous MiB`);
  line("process", Object.entries(runtimes).map(([flags, [, ...args]]) => `${flags} (${args.join(" ") || "no flags"})`));
  for (const name of Object.keys(processes)) {
    line(name, runs.filter((run) => run.name === name).map((run) => `${steady(run.samples, "rss")} / ${steady(run.samples, "anon")}`));
  }
} finally {
  for (const child of children) child.kill();
  await plane.stop();
}
