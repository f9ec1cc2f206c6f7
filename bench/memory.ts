// `npm run bench:memory`: steady-state memory of a process that loads the API layer and keeps an
// informer on one Node, beside a bare Node 24 process, sampled together for 60 s. Both run as
// bundled CommonJS (scripts/bundle.ts), as the container image does. Budget: 48 MiB RSS.
import { fork } from "node:child_process";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { bundle } from "../scripts/bundle.ts";
import { startControlPlane } from "../test/controlplane/controlplane.ts";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const MiB = 1024 * 1024;
type Sample = { rss: number; anon: number };

const plane = await startControlPlane();
try {
  await plane.admin.request({ method: "POST", path: "/api/v1/nodes", body: { metadata: { name: "bench-node" } } });
  const fixture = path.join(import.meta.dirname, "../.cache/bench/memory-fixture.cjs");
  await bundle(path.join(import.meta.dirname, "memory-fixture.ts"), fixture);
  const runs = { "bare Node": fork(fixture, []), "API layer + informer": fork(fixture, [plane.kubeconfigPath, "bench-node"]) };
  const sample = (child: ReturnType<typeof fork>) =>
    new Promise<Sample>((resolve) => {
      child.once("message", (m) => resolve(m as Sample));
      child.send("sample");
    });
  const samples = new Map<string, Sample[]>(Object.keys(runs).map((name) => [name, []]));
  for (let s = 0; s < SECONDS; s += 5) {
    await delay(5000);
    for (const [name, child] of Object.entries(runs)) samples.get(name)?.push(await sample(child));
  }
  // Steady state: the last half of the run, after start-up allocations have settled.
  const mib = (bytes: number) => (bytes / MiB).toFixed(1).padStart(8);
  console.log(`Memory over the last ${SECONDS / 2} s of ${SECONDS} s, Node ${process.version}, MiB`);
  console.log(`  ${"process".padEnd(24)} ${"RSS max".padStart(8)} ${"anon max".padStart(8)}`);
  for (const [name, values] of samples) {
    const tail = values.slice(Math.floor(values.length / 2));
    console.log(`  ${name.padEnd(24)} ${mib(Math.max(...tail.map((v) => v.rss)))} ${mib(Math.max(...tail.map((v) => v.anon)))}`);
  }
  for (const child of Object.values(runs)) child.kill();
} finally {
  await plane.stop();
}
