import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ConfigError } from "../kube/config.ts";
import { flag, HelpRequested, parseFlags, UsageError, usage } from "./flags.ts";
import { exitFor, runHooks, type ShutdownHook } from "./main.ts";
import { BUILD } from "./version.ts";

describe("exitFor", () => {
  const table = [flag({ name: "x", type: "string", default: "", help: "X." })];

  test("--help: usage on stdout, exit 0", () => {
    assert.deepEqual(exitFor("prog", new HelpRequested(table), 0), {
      code: 0,
      stream: "stdout",
      text: usage("prog", table),
    });
  });

  test("--version, before any later flag is looked at: version, commit and runtime on stdout, exit 0", () => {
    for (const argv of [["--version"], ["-version"], ["--version", "--bogus"]]) {
      let thrown: unknown;
      try {
        parseFlags(table, argv, {});
      } catch (err) {
        thrown = err;
      }
      assert.deepEqual(exitFor("prog", thrown, 0), {
        code: 0,
        stream: "stdout",
        text: `prog ${BUILD.version} (revision ${BUILD.revision}, node ${process.versions.node})\n`,
      });
    }
    assert.match(usage("prog", table), /\n {2}--version +Print the version/);
  });

  test("--help lists the program's commands, when it has any", () => {
    const commands = [{ name: "release-all", help: "Lets go." }];
    const { text } = exitFor("prog", new HelpRequested(table), 0, commands);
    assert.match(text, /^Usage: prog \[command\] \[flags\]\n\nCommands:\n {2}release-all +Lets go\.\n\nFlags:\n/);
    assert.match(usage("prog", table), /^Usage: prog \[flags\]\n\nFlags:\n/);
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

describe("runHooks", () => {
  test("hooks add up and run last-added first, one at a time, also those added meanwhile", async () => {
    const ran: string[] = [];
    const hooks: ShutdownHook[] = [];
    hooks.push(() => {
      ran.push("client closed");
    });
    hooks.push(async () => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      ran.push("events flushed");
    });
    hooks.push(async () => {
      hooks.push(() => {
        ran.push("added while stopping");
      });
      ran.push("loop stopped");
    });
    assert.equal(await runHooks(hooks), undefined);
    assert.deepEqual(ran, ["loop stopped", "added while stopping", "events flushed", "client closed"]);
    assert.deepEqual(hooks, [], "each hook runs once");
  });

  test("a failing hook does not stop the others; the first failure is the result", async () => {
    const ran: string[] = [];
    const first = new Error("lease release failed");
    const hooks: ShutdownHook[] = [
      () => {
        ran.push("client closed");
      },
      async () => {
        throw new Error("events not flushed");
      },
      () => {
        throw first;
      },
    ];
    assert.deepEqual(await runHooks(hooks), { failed: first });
    assert.deepEqual(ran, ["client closed"]);
  });
});

const FIXTURE = fileURLToPath(new URL("./main.fixture.ts", import.meta.url));

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the fixture; each signal is sent once stdout holds its line ("ready", "stopping"), in order.
 * Killed after 20 s whatever happens.
 */
function runFixture(args: string[], signals: [line: string, signal: NodeJS.Signals][] = []): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FIXTURE, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    const guard = setTimeout(() => child.kill("SIGKILL"), 20_000);
    const pending = [...signals];
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      for (let next = pending[0]; next && stdout.includes(`${next[0]}\n`); next = pending[0]) {
        pending.shift();
        child.kill(next[1]);
      }
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

/** What the fixture's two hooks print, in the order they run. */
const HOOKS = "hook 2 ran (stopped: true)\nhook 1 ran\n";

describe("runMain in a real process", () => {
  test("success: the hooks run last-added first, exit 0", async () => {
    assert.deepEqual(await runFixture([]), { code: 0, stdout: `done\n${HOOKS}`, stderr: "" });
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

  test("ConfigError: the hooks run, one line, exit 2", async () => {
    assert.deepEqual(await runFixture(["--mode=config"]), {
      code: 2,
      stdout: HOOKS,
      stderr: "fixture: cannot read kubeconfig /nope: ENOENT\n",
    });
  });

  test("other errors: one line, exit 1; stack at --v=4", async () => {
    assert.deepEqual(await runFixture(["--mode=crash"]), {
      code: 1,
      stdout: HOOKS,
      stderr: "fixture: node n1 not found | second line\n",
    });
    const verbose = await runFixture(["--mode=crash", "--v=4"]);
    assert.equal(verbose.code, 1);
    assert.match(verbose.stderr, /^fixture: node n1 not found \| second line\nError: node n1 not found\n/);
    assert.match(verbose.stderr, /\n {4}at .*main\.fixture\.ts/);
  });

  test("an uncaught exception: one line, exit 1, no hooks", async () => {
    assert.deepEqual(await runFixture(["--mode=uncaught"]), {
      code: 1,
      stdout: "",
      stderr: "fixture: late failure\n",
    });
  });

  test("failing shutdown hooks: the others still run; the first failure as one line, exit 1", async () => {
    assert.deepEqual(await runFixture(["--mode=hook-fails"]), {
      code: 1,
      stdout: HOOKS,
      stderr: "fixture: lease release failed\n",
    });
  });

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    test(`${signal}: untilStopped() resolves, every hook runs (also one added then), exit 0`, async () => {
      assert.deepEqual(await runFixture(["--mode=wait"], [["ready", signal]]), {
        code: 0,
        stdout: "ready\nhook 2 ran (stopped: true)\nhook added during shutdown ran\nhook 1 ran\n",
        stderr: "",
      });
    });
  }

  test("unlessStopped: true when the work ends first, false when a signal comes first", async () => {
    assert.deepEqual(await runFixture(["--mode=wait-for"], [["ready (quick work done: true)", "SIGTERM"]]), {
      code: 0,
      stdout: "ready (quick work done: true)\nendless work done: false\nhook 2 ran (stopped: true)\nhook 1 ran\n",
      stderr: "",
    });
  });

  test("a second signal during shutdown: one line, exit 1 at once", async () => {
    assert.deepEqual(
      await runFixture(["--mode=stuck"], [
        ["ready", "SIGTERM"],
        ["stopping", "SIGINT"],
      ]),
      { code: 1, stdout: "ready\nstopping\n", stderr: "fixture: SIGINT during shutdown, exiting at once\n" },
    );
  });
});
