// The Go oracle (main.go and the reader files beside it): built once with the Go toolchain that builds the
// pinned upstream binaries, into a git-ignored cache keyed by its sources and the Go version, then run as
// one long-lived process per test file that answers one JSON line per question.
//
// `node test/oracle/oracle.ts build` (npm's pretest) builds it ahead; a test that finds it missing builds it.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import { run } from "../../localcluster/exec.ts";

const SOURCE_DIR = import.meta.dirname;
const CACHE_DIR = path.resolve(import.meta.dirname, "../../.cache/oracle");

/** The oracle binary's path, built when missing: its name carries a hash of what built it. */
export async function ensureOracle(): Promise<string> {
  const files = (await readdir(SOURCE_DIR)).filter((name) => /\.go$|^go\.(mod|sum)$/.test(name)).sort();
  const hash = createHash("sha256").update(await run("go", ["version"]));
  for (const name of files) hash.update(`${name}\0`).update(await readFile(path.join(SOURCE_DIR, name)));
  const binary = path.join(CACHE_DIR, `oracle-${hash.digest("hex").slice(0, 16)}`);
  if (existsSync(binary)) return binary;
  await mkdir(CACHE_DIR, { recursive: true });
  // Built under a name of this process's own, then renamed: test files that start at once do not share one.
  const partial = `${binary}.${process.pid}.partial`;
  const env = { ...process.env, CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false -mod=readonly" };
  await run("go", ["build", "-trimpath", "-o", partial, "."], { cwd: SOURCE_DIR, env });
  await rename(partial, binary);
  return binary;
}

export interface Oracle {
  /** What Go reads from `input` with the reader named `kind` (a file of test/oracle/). */
  ask<T>(kind: string, input: unknown): Promise<T>;
  close(): Promise<void>;
}

export async function startOracle(): Promise<Oracle> {
  const child = spawn(await ensureOracle(), [], { stdio: ["pipe", "pipe", "inherit"] });
  const waiting: { resolve: (value: unknown) => void; reject: (error: Error) => void }[] = [];
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const fail = (error: Error) => {
    for (const pending of waiting.splice(0)) pending.reject(error);
  };
  child.once("error", fail);
  child.once("close", (code, signal) => fail(new Error(`the oracle exited (${signal ?? `exit ${code}`})`)));
  // Answers come in the order of the questions.
  createInterface({ input: child.stdout }).on("line", (line) => {
    const answer = JSON.parse(line) as { protocolError?: string };
    const pending = waiting.shift();
    if (!pending) return;
    if (answer && typeof answer === "object" && "protocolError" in answer)
      pending.reject(new Error(`oracle: ${answer.protocolError}`));
    else pending.resolve(answer);
  });
  return {
    ask<T>(kind: string, input: unknown): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        waiting.push({ resolve: resolve as (value: unknown) => void, reject });
        child.stdin.write(`${JSON.stringify({ kind, input })}\n`);
      });
    },
    async close() {
      child.stdin.end();
      await exited;
    },
  };
}

if (import.meta.main) {
  const binary = await ensureOracle();
  console.error(`oracle: ${path.relative(process.cwd(), binary)}`);
}
