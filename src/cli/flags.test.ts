import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { flag, flagsMarkdown, HelpRequested, parseFlags, UsageError, usage } from "./flags.ts";
import { inRange } from "./validate.ts";

const table = [
  flag({ name: "name", type: "string", default: "", env: "NAME", help: "The name.", required: true }),
  flag({ name: "target", type: "list", default: "8.8.8.8", help: "Targets | pipes.", helm: "ip.target" }),
  flag({ name: "enabled", type: "bool", default: "true", help: "On or off." }),
  flag({ name: "once", type: "bool", default: "false", help: "Run once." }),
  flag({ name: "interval", type: "duration", default: "10s", help: "How often." }),
  flag({ name: "count", type: "int", default: "3", help: "How many.", validate: inRange(1, 9) }),
  flag({ name: "ratio", type: "float", default: "0.55", help: "A fraction." }),
] as const;

const parse = (argv: string[], env: Record<string, string> = {}) => parseFlags(table, argv, env);

function usageError(argv: string[], message: string, env: Record<string, string> = {}) {
  assert.throws(
    () => parse(argv, env),
    (err: unknown) => {
      assert.ok(err instanceof UsageError);
      assert.equal(err.message, message);
      return true;
    },
  );
}

describe("parseFlags", () => {
  test("defaults, typed", () => {
    const { values, given } = parse(["--name=n1"]);
    assert.deepEqual(values, {
      name: "n1",
      target: ["8.8.8.8"],
      enabled: true,
      once: false,
      interval: 10_000,
      count: 3,
      ratio: 0.55,
    });
    assert.deepEqual([...given], ["name"]);
  });

  test("--flag=value and --flag value are the same", () => {
    const a = parse(["--name=n1", "--interval=1m30s", "--count=5", "--ratio=1"]).values;
    const b = parse(["--name", "n1", "--interval", "1m30s", "--count", "5", "--ratio", "1"]).values;
    assert.deepEqual(a, b);
    assert.equal(a.interval, 90_000);
    assert.equal(a.count, 5);
    assert.equal(a.ratio, 1);
  });

  test("a single leading dash works as in Go's flag package", () => {
    assert.equal(parse(["-name=n1", "-count", "4"]).values.count, 4);
  });

  test("booleans: bare, =true, =false and Go's other spellings", () => {
    assert.equal(parse(["--name=n", "--once"]).values.once, true);
    assert.equal(parse(["--name=n", "--enabled=false"]).values.enabled, false);
    assert.equal(parse(["--name=n", "--once=true"]).values.once, true);
    for (const spelling of ["0", "f", "F", "FALSE", "False"]) {
      assert.equal(parse(["--name=n", `--enabled=${spelling}`]).values.enabled, false, spelling);
    }
    for (const spelling of ["1", "t", "T", "TRUE", "True"]) {
      assert.equal(parse(["--name=n", `--once=${spelling}`]).values.once, true, spelling);
    }
  });

  test("a bare boolean never consumes the next argument", () => {
    usageError(
      ["--name=n", "--enabled", "false"],
      'unexpected argument "false" (flags are written --name=value)',
    );
    const { values } = parse(["--once", "--name=n"]);
    assert.equal(values.once, true);
    assert.equal(values.name, "n");
  });

  test("lists: comma-separated, trimmed, empty items dropped, repeats append", () => {
    assert.deepEqual(parse(["--name=n", "--target=1.1.1.1, ::1,,"]).values.target, ["1.1.1.1", "::1"]);
    assert.deepEqual(parse(["--name=n", "--target="]).values.target, []);
    assert.deepEqual(parse(["--name=n", "--target=a", "--target", "b,c"]).values.target, ["a", "b", "c"]);
  });

  test("a repeated scalar keeps its last value", () => {
    assert.equal(parse(["--name=a", "--name=b"]).values.name, "b");
  });

  test("env fallback; the command line wins; empty env counts as unset", () => {
    assert.equal(parse([], { NAME: "from-env" }).values.name, "from-env");
    assert.deepEqual([...parse([], { NAME: "from-env" }).given], ["name"]);
    assert.equal(parse(["--name=flag"], { NAME: "from-env" }).values.name, "flag");
    usageError([], "missing required flag --name (or env NAME)", { NAME: "" });
  });

  test("-h and --help ask for help, before any later flag is looked at", () => {
    for (const argv of [["-h"], ["--help"], ["--name=n", "--help"], ["-h", "--bogus"]]) {
      assert.throws(
        () => parse(argv),
        (err: unknown) => err instanceof HelpRequested && err.table === table,
      );
    }
  });

  test("error messages", () => {
    usageError(["--name=n", "--bogus=1"], "unknown flag: --bogus");
    usageError(["--name=n", "--interval"], "flag needs an argument: --interval");
    usageError(["--interval", "--name=n"], "flag needs an argument: --interval");
    usageError(
      ["--name=n", "--interval=abc"],
      'invalid value "abc" for --interval: not a duration (e.g. 10s, 1m30s, 500ms)',
    );
    usageError(["--name=n", "--interval=-1s"], 'invalid value "-1s" for --interval: must not be negative');
    usageError(
      ["--name=n", "--interval=597h"],
      'invalid value "597h" for --interval: too long (at most 596h)',
    );
    usageError(["--name=n", "--count=x"], 'invalid value "x" for --count: not an integer');
    usageError(["--name=n", "--count=1.5"], 'invalid value "1.5" for --count: not an integer');
    usageError(["--name=n", "--count=10"], 'invalid value "10" for --count: must be between 1 and 9');
    usageError(["--name=n", "--ratio=abc"], 'invalid value "abc" for --ratio: not a number');
    usageError(["--name=n", "--ratio=NaN"], 'invalid value "NaN" for --ratio: not a number');
    usageError(
      ["--name=n", "--enabled=yes"],
      'invalid value "yes" for --enabled: not a boolean (true or false)',
    );
    usageError(["--name=n", "--enabled="], 'invalid value "" for --enabled: not a boolean (true or false)');
    usageError([], "missing required flag --name (or env NAME)");
    usageError(["--name="], "missing required flag --name (or env NAME)");
    usageError(["--name=n", "extra"], 'unexpected argument "extra" (flags are written --name=value)');
    usageError(["--name=n", "--", "extra"], 'unexpected argument "extra"');
  });

  test("errors from an env var name it", () => {
    const envTable = [
      flag({ name: "wait", type: "duration", default: "1s", env: "WAIT", help: "" }),
    ] as const;
    assert.throws(() => parseFlags(envTable, [], { WAIT: "soon" }), {
      name: "UsageError",
      message: 'invalid value "soon" for WAIT (--wait): not a duration (e.g. 10s, 1m30s, 500ms)',
    });
  });

  test("-- ends the flags", () => {
    assert.equal(parse(["--name=n", "--"]).values.name, "n");
  });

  test("validation sees the final value and shows the raw text", () => {
    usageError(["--name=n", "--count=0"], 'invalid value "0" for --count: must be between 1 and 9');
    assert.equal(parse(["--name=n", "--count=0", "--count=2"]).values.count, 2);
  });
});

describe("usage", () => {
  test("lists every flag with type, env, default or required, and -h", () => {
    const text = usage("demo", table);
    assert.match(text, /^Usage: demo \[flags\]\n\nFlags:\n/);
    assert.match(text, /\n {2}--name string +The name\. \[env NAME\] \(required\)\n/);
    assert.match(text, /\n {2}--target strings +Targets \| pipes\. \(default "8\.8\.8\.8"\)\n/);
    assert.match(text, /\n {2}--enabled +On or off\. \(default true\)\n/);
    assert.match(text, /\n {2}--once +Run once\.\n/);
    assert.match(text, /\n {2}--interval duration +How often\. \(default 10s\)\n/);
    assert.match(text, /\n {2}-h, --help +Show this help and exit\.\n$/);
    // Descriptions start in one column.
    const columns = text
      .split("\n")
      .filter((line) => line.startsWith("  -"))
      .map((line) => line.search(/ {3}\S/));
    assert.equal(new Set(columns).size, 1);
  });
});

describe("flagsMarkdown", () => {
  test("one row per flag: flag | env | default | helm value | description", () => {
    const lines = flagsMarkdown(table).trimEnd().split("\n");
    assert.equal(lines[0], "| flag | env | default | helm value | description |");
    assert.equal(lines[1], "|---|---|---|---|---|");
    assert.equal(lines[2], "| `--name` | `NAME` | required | — | The name. |");
    assert.equal(lines[3], "| `--target` |  | `8.8.8.8` | `ip.target` | Targets \\| pipes. |");
    assert.equal(lines[4], "| `--enabled` |  | `true` | — | On or off. |");
    assert.equal(lines.length, 2 + table.length);
  });

  test('an empty default shows as ""', () => {
    const md = flagsMarkdown([flag({ name: "x", type: "string", default: "", help: "X." })]);
    assert.match(md, /\| `--x` \| {2}\| `""` \| — \| X\. \|/);
  });
});
