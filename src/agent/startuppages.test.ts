// native/memory against this kernel: the preload library turns readahead off for every mapped segment of the
// runtime (smaps' `rr` flag: VM_RAND_READ), and releaseFilePages() unmaps the binary's resident pages, which
// fault back in when touched; as a user that may not write the binary too, as the agent runs (uid 65532).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { test } from "node:test";
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
