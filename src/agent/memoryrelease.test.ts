// native/memory against this kernel: the preload library turns readahead off for every mapped segment of the
// runtime (smaps' `rr` flag: VM_RAND_READ), and releaseFilePages() unmaps the binary's resident pages, which
// fault back in when touched; as a user that may not write the binary too, as the agent runs (uid 65532). A trim
// after work gives back what malloc freed. Then when the agent trims (fake timers).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, closeSync, copyFileSync, fsyncSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { TrimSchedule } from "./memoryrelease.ts";
import { READAHEAD_PRELOAD } from "../../localcluster/image.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
const PRELOAD = path.join(ROOT, READAHEAD_PRELOAD.from);

/** Runs `script` under `runtime` (from the repository, so that require() finds the addon); its stdout as JSON. */
function runScript(runtime: string, script: string, env: NodeJS.ProcessEnv = {}): unknown {
  const ran = spawnSync(runtime, ["-e", script], { cwd: ROOT, encoding: "utf8", timeout: 60_000, env: { ...process.env, ...env } });
  assert.equal(ran.status, 0, ran.stderr);
  return JSON.parse(ran.stdout);
}

/** Whether smaps flags each mapping of a file random-read, by file: node's binary and libc. */
const RANDOM_READ = `
  const smaps = require("fs").readFileSync("/proc/self/smaps", "utf8").split(/\\n(?=[0-9a-f]+-)/);
  const flags = (end) => smaps.filter((m) => m.split("\\n")[0].endsWith(end))
    .map((m) => / rr( |$)/.test(/^VmFlags:(.*)$/m.exec(m)[1] + " "));
  console.log(JSON.stringify({ node: flags(" " + process.execPath), libc: flags("/libc.so.6") }));
`;

test("the preload library marks the segments ld.so maps random-read; without it none is", () => {
  // node's own segments are mapped by the kernel at exec, libc's by ld.so; V8 later maps part of node's binary again
  // (its builtins), after the library ran: releaseFilePages() marks that one.
  const preloaded = runScript(process.execPath, RANDOM_READ, { LD_PRELOAD: PRELOAD }) as Record<string, boolean[]>;
  assert.ok((preloaded.node?.filter(Boolean).length ?? 0) >= 5, JSON.stringify(preloaded));
  assert.ok(preloaded.libc?.length && preloaded.libc.every(Boolean), JSON.stringify(preloaded));
  const plain = runScript(process.execPath, RANDOM_READ, { LD_PRELOAD: "" }) as Record<string, boolean[]>;
  assert.ok(![...(plain.node ?? []), ...(plain.libc ?? [])].some(Boolean), JSON.stringify(plain));
});

test("with the preload library, the page cache holds little more of the binary than the process maps, after release and work", (t) => {
  // A fresh copy of the runtime, so that no other process's pages are counted: its pages in the page cache (fincore),
  // what read ahead of each fault brought in, beside the pages the process maps. Unsplit, a fault in node's 41 MiB of
  // code read up to 1 MiB on this machine's disk (read_ahead_kb 8192), MADV_RANDOM notwithstanding: 46 MiB cached
  // for 21 MiB mapped; cut into 32 KiB mappings, 14 MiB for 15 MiB.
  const dir = mkdtempSync(path.join(tmpdir(), "lccm-readahead-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const runtime = path.join(dir, "node");
  copyFileSync(process.execPath, runtime);
  chmodSync(runtime, 0o755);
  // Written back, so that the child's drop from the page cache leaves none of the copy's pages (dirty ones stay).
  const copy = openSync(runtime, "r");
  fsyncSync(copy);
  closeSync(copy);
  const script = `
    const { execFileSync } = require("child_process");
    const cached = () => Number(execFileSync("fincore", ["-b", "-n", "-o", "RES", process.execPath], { encoding: "utf8" }).trim());
    const mapped = () => require("fs").readFileSync("/proc/self/smaps", "utf8").split(/\\n(?=[0-9a-f]+-)/)
      .filter((m) => m.split("\\n")[0].endsWith(" " + process.execPath))
      .reduce((sum, m) => sum + Number(/^Rss:\\s+(\\d+) kB/m.exec(m)[1]) * 1024, 0);
    require("${path.join(ROOT, "node_modules/local-ccm-memory")}").releaseFilePages(true);
    require("zlib").gzipSync(Buffer.alloc(100000, 7));
    require("crypto").generateKeyPairSync("ec", { namedCurve: "P-256" });
    new Intl.DateTimeFormat("de", { dateStyle: "full" }).format(0);
    console.log(JSON.stringify({ cached: cached(), mapped: mapped() }));
  `;
  const { cached, mapped } = runScript(runtime, script, { LD_PRELOAD: PRELOAD }) as { cached: number; mapped: number };
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  t.diagnostic(`binary: ${mib(cached)} in the page cache, ${mib(mapped)} mapped`);
  assert.ok(mapped > 4 * 2 ** 20, `the process maps the binary's pages it ran: ${mib(mapped)}`);
  assert.ok(cached <= 1.25 * mapped, `${mib(cached)} of the binary cached for ${mib(mapped)} mapped`);
});

test("releaseFilePages() unmaps the binary's pages, as a user that may not write it; touched ones come back", () => {
  const script = `
    const fileKiB = () => Number(/RssFile:\\s+(\\d+)/.exec(require("fs").readFileSync("/proc/self/status", "utf8"))[1]);
    const before = fileKiB();
    const released = require("${path.join(ROOT, "node_modules/local-ccm-memory")}").releaseFilePages();
    const after = fileKiB();
    JSON.stringify({ again: [1, 2, 3].map(String) });
    const smaps = require("fs").readFileSync("/proc/self/smaps", "utf8").split(/\\n(?=[0-9a-f]+-)/);
    const own = smaps.filter((m) => m.split("\\n")[0].endsWith(" " + process.execPath));
    const random = own.every((m) => / rr( |$)/.test(/^VmFlags:(.*)$/m.exec(m)[1] + " "));
    console.log(JSON.stringify({ before, after, released, later: fileKiB(), random }));
  `;
  const ran = spawnSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "-e", script], {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, LD_PRELOAD: PRELOAD },
  });
  assert.equal(ran.status, 0, ran.stderr);
  const result = JSON.parse(ran.stdout) as { before: number; after: number; released: number; later: number; random: boolean };
  assert.ok(result.released >= 50 * 2 ** 20, `released ${result.released} bytes: at least node's mapped binary`);
  assert.ok(result.after < result.before / 2, `RssFile ${result.before} KiB → ${result.after} KiB`);
  assert.ok(result.random, "every mapping of the binary random-read afterwards, V8's remap included");
  assert.ok(result.later > result.after, `pages touched again fault back: ${result.after} → ${result.later} KiB`);
});

test("a trim gives back the pages malloc freed inside its heap, and unmaps the binary's pages again", () => {
  // Buffers of 4 KiB come from malloc's main arena; the last one, kept, holds the freed ones below the heap's top,
  // where free() never gives memory back. The trim runs through the agent's module, as the agent runs it.
  const script = `
    const fs = require("fs");
    const kib = (field) => {
      const line = fs.readFileSync("/proc/self/status", "utf8").split("\\n").find((l) => l.startsWith(field + ":"));
      return Number(line.split(/\\s+/)[1]);
    };
    const { trimMemory } = require("./src/agent/memoryrelease.ts");
    const { createLogger } = require("./src/cli/log.ts");
    const lines = [];
    const log = createLogger({ verbosity: 2, format: "json", write: (line) => lines.push(JSON.parse(line)) });
    let held = Array.from({ length: 8000 }, () => Buffer.allocUnsafeSlow(4096).fill(1));
    const kept = Buffer.allocUnsafeSlow(4096).fill(2);
    held = null;
    (async () => {
      for (let i = 0; i < 5; i++) {
        globalThis.gc();
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const before = { anon: kib("RssAnon"), file: kib("RssFile") };
      trimMemory(log, "work");
      const after = { anon: kib("RssAnon"), file: kib("RssFile") };
      console.log(JSON.stringify({ before, after, kept: kept.length, logged: lines }));
    })();
  `;
  const ran = spawnSync(process.execPath, ["--expose-gc", "-e", script], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, LD_PRELOAD: PRELOAD },
  });
  assert.equal(ran.status, 0, ran.stderr);
  type Kib = { anon: number; file: number };
  const result = JSON.parse(ran.stdout) as { before: Kib; after: Kib; logged: { msg: string }[] };
  const summary = JSON.stringify(result);
  assert.ok(result.before.anon - result.after.anon >= 20 * 1024, `RssAnon: at least 20 of the 32 MiB freed: ${summary}`);
  assert.ok(result.after.file < result.before.file / 2, `RssFile: the binary's pages unmapped: ${summary}`);
  assert.ok(result.logged.some((l) => l.msg === "memory trimmed"), summary);
});

test("the agent trims once quiet after work, and at most once per maxWaitMs while work goes on", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const trims: number[] = [];
  const trimmer = new TrimSchedule((after) => {
    assert.equal(after, "work");
    trims.push(Date.now());
  }, { quietMs: 30_000, maxWaitMs: 60_000, restMs: 2_000 });
  trimmer.worked();
  t.mock.timers.tick(29_999);
  assert.deepEqual(trims, [], "not while it may still be working");
  t.mock.timers.tick(1);
  assert.deepEqual(trims, [30_000], "30 s quiet after the work");
  // Work every second from 40 s on: trims 60 s after the first work since the last trim.
  for (let second = 40; second < 200; second++) {
    t.mock.timers.tick(second * 1000 - Date.now());
    trimmer.worked();
  }
  assert.deepEqual(trims, [30_000, 100_000, 160_000]);
  // From 199 s on, quiet: 60 s after the first work since the trim at 160 s comes before 30 s of quiet.
  t.mock.timers.tick(20_999);
  assert.equal(trims.length, 3);
  t.mock.timers.tick(1);
  assert.deepEqual(trims, [30_000, 100_000, 160_000, 220_000]);
  trimmer.worked();
  trimmer.stop();
  t.mock.timers.tick(120_000);
  assert.equal(trims.length, 4, "none after stop()");
});

test("at rest, a reconcile that did no work is trimmed restMs after; work before then puts it off; none while a trim is due", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const trims: string[] = [];
  const trimmer = new TrimSchedule((after) => trims.push(`${after}@${Date.now()}`), {
    quietMs: 30_000,
    maxWaitMs: 60_000,
    restMs: 2_000,
  });
  trimmer.rested();
  t.mock.timers.tick(1_999);
  assert.deepEqual(trims, [], "what runs just after the reconcile (GC tasks) is given time to end");
  t.mock.timers.tick(1);
  assert.deepEqual(trims, ["rest@2000"]);
  t.mock.timers.tick(3_000);
  trimmer.worked();
  t.mock.timers.tick(10_000);
  trimmer.rested();
  t.mock.timers.tick(2_000);
  assert.deepEqual(trims, ["rest@2000"], "the trim after work is due at 35 s: the resync at 15 s leaves it to that one");
  t.mock.timers.tick(18_000);
  assert.deepEqual(trims, ["rest@2000", "work@35000"]);
  t.mock.timers.tick(10_000);
  trimmer.rested();
  trimmer.rested();
  t.mock.timers.tick(1_000);
  trimmer.worked();
  t.mock.timers.tick(29_999);
  assert.deepEqual(trims, ["rest@2000", "work@35000"], "work 1 s after the resync at 45 s: no trim at rest, one 30 s after");
  t.mock.timers.tick(1);
  assert.deepEqual(trims, ["rest@2000", "work@35000", "work@76000"]);
  trimmer.rested();
  trimmer.stop();
  t.mock.timers.tick(10_000);
  assert.equal(trims.length, 3, "none after stop()");
});

test("a trim after work collects V8's garbage first; a trim at rest leaves V8 alone", () => {
  const script = `
    import { trimMemory } from "./src/agent/memoryrelease.ts";
    const log = { v: () => undefined };
    const heap = () => process.memoryUsage().heapUsed;
    let kept;
    const garbage = () => { kept = Array.from({ length: 300000 }, (_, i) => ({ i, s: "x" + i })); kept = undefined; };
    garbage();
    const restBefore = heap();
    trimMemory(log, "rest");
    const rest = heap();
    garbage();
    const workBefore = heap();
    trimMemory(log, "work");
    console.log(JSON.stringify({ restBefore, rest, workBefore, work: heap() }));
  `;
  const ran = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(ran.status, 0, ran.stderr);
  const { restBefore, rest, workBefore, work } = JSON.parse(ran.stdout) as Record<string, number>;
  const mib = (bytes = 0) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  assert.ok((work ?? 0) < (workBefore ?? 0) / 2, `after work: ${mib(workBefore)} → ${mib(work)}`);
  assert.ok((rest ?? 0) > (restBefore ?? 0) / 2, `at rest: ${mib(restBefore)} → ${mib(rest)}`);
});
