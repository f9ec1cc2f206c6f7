import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ConfigError } from "../kube/config.ts";
import { flag, HelpRequested, UsageError, usage } from "./flags.ts";
import { exitFor } from "./main.ts";

describe("exitFor", () => {
  const table = [flag({ name: "x", type: "string", default: "", help: "X." })];

  test("--help: usage on stdout, exit 0", () => {
    assert.deepEqual(exitFor("prog", new HelpRequested(table), 0), {
      code: 0,
      stream: "stdout",
      text: usage("prog", table),
    });
  });

  test("usage and configuration errors: one line on stderr, exit 2", () => {
    assert.deepEqual(exitFor("prog", new UsageError("unknown flag: --y"), 0), {
      code: 2,
      stream: "stderr",
      text: "prog: unknown flag: --y\n",
    });
    assert.deepEqual(exitFor("prog", new ConfigError("cannot read kubeconfig /k: ENOENT"), 5), {
      code: 2,
      stream: "stderr",
      text: "prog: cannot read kubeconfig /k: ENOENT\n",
    });
  });

  test("anything else: one line, exit 1; the stack only from verbosity 4", () => {
    const err = new Error("first\n   second\n");
    assert.deepEqual(exitFor("prog", err, 3), { code: 1, stream: "stderr", text: "prog: first | second\n" });
    const verbose = exitFor("prog", err, 4);
    assert.equal(verbose.code, 1);
    assert.ok(verbose.text.startsWith("prog: first | second\nError: first"));
    assert.match(verbose.text, /\n {4}at /);
    assert.deepEqual(exitFor("prog", "a string", 0), { code: 1, stream: "stderr", text: "prog: a string\n" });
    assert.equal(exitFor("prog", new Error(""), 0).text, "prog: unknown error\n");
  });
});

const FIXTURE = fileURLToPath(new URL("./main.fixture.ts", import.meta.url));

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the fixture; `signal` is sent once it prints "ready". Killed after 20 s whatever happens. */
function runFixture(args: string[], signal?: NodeJS.Signals): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FIXTURE, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    const guard = setTimeout(() => child.kill("SIGKILL"), 20_000);
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      if (signal && stdout.includes("ready\n")) child.kill(signal);
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr });
    });
  });
}

describe("runMain in a real process", () => {
  test("success: the hook runs, exit 0", async () => {
    assert.deepEqual(await runFixture([]), { code: 0, stdout: "done\nhook ran\n", stderr: "" });
  });

  test("--help: usage on stdout, exit 0", async () => {
    const outcome = await runFixture(["--help"]);
    assert.equal(outcome.code, 0);
    assert.equal(outcome.stderr, "");
    assert.match(
      outcome.stdout,
      /^Usage: fixture \[flags\]\n\nFlags:\n {2}--mode string +How to end\. \(default "ok"\)\n/,
    );
    assert.match(outcome.stdout, /\n {2}--v int +Verbosity\.\n/);
  });

  test("unknown flag and bad value: one line, exit 2", async () => {
    assert.deepEqual(await runFixture(["--bogus"]), {
      code: 2,
      stdout: "",
      stderr: "fixture: unknown flag: --bogus\n",
    });
    assert.deepEqual(await runFixture(["--v=x"]), {
      code: 2,
      stdout: "",
      stderr: 'fixture: invalid value "x" for --v: not an integer\n',
    });
  });

  test("ConfigError: one line, exit 2", async () => {
    assert.deepEqual(await runFixture(["--mode=config"]), {
      code: 2,
      stdout: "hook ran\n",
      stderr: "fixture: cannot read kubeconfig /nope: ENOENT\n",
    });
  });

  test("other errors: one line, exit 1; stack at --v=4", async () => {
    assert.deepEqual(await runFixture(["--mode=crash"]), {
      code: 1,
      stdout: "hook ran\n",
      stderr: "fixture: node n1 not found | second line\n",
    });
    const verbose = await runFixture(["--mode=crash", "--v=4"]);
    assert.equal(verbose.code, 1);
    assert.match(verbose.stderr, /^fixture: node n1 not found \| second line\nError: node n1 not found\n/);
    assert.match(verbose.stderr, /\n {4}at .*main\.fixture\.ts/);
  });

  test("an uncaught exception: one line, exit 1", async () => {
    assert.deepEqual(await runFixture(["--mode=uncaught"]), {
      code: 1,
      stdout: "",
      stderr: "fixture: late failure\n",
    });
  });

  test("a failing shutdown hook: one line, exit 1", async () => {
    assert.deepEqual(await runFixture(["--mode=hook-fails"]), {
      code: 1,
      stdout: "",
      stderr: "fixture: lease release failed\n",
    });
  });

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    test(`${signal}: the hook runs, exit 0`, async () => {
      assert.deepEqual(await runFixture(["--mode=wait"], signal), {
        code: 0,
        stdout: "ready\nhook ran\n",
        stderr: "",
      });
    });
  }
});
