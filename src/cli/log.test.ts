import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createLogger, type LogFormat } from "./log.ts";

const NOW = new Date("2025-11-22T06:07:08.009Z");

function capture(verbosity: number, format: LogFormat) {
  const lines: string[] = [];
  const log = createLogger({ verbosity, format, write: (line) => lines.push(line), now: () => NOW });
  return { log, lines };
}

const pid = String(process.pid).padStart(7);

describe("text format", () => {
  test("klog header, message, key=value fields", () => {
    const { log, lines } = capture(0, "text");
    log.info("Reconciled", { node: "n1", addresses: 2, changed: false });
    assert.deepEqual(lines, [`I1122 06:07:08.009000 ${pid}] Reconciled node=n1 addresses=2 changed=false`]);
  });

  test("severity letters", () => {
    const { log, lines } = capture(0, "text");
    log.warn("w");
    log.error("e");
    assert.deepEqual(
      lines.map((line) => line.slice(0, 5)),
      ["W1122", "E1122"],
    );
  });

  test("values that need it are quoted; errors print their message; objects as JSON", () => {
    const { log, lines } = capture(0, "text");
    log.info("m", {
      reason: "no route",
      empty: "",
      eq: "a=b",
      err: new Error('boom "x"'),
      list: ["a", "b"],
      missing: undefined,
    });
    assert.equal(
      lines[0]?.slice((lines[0]?.indexOf("] ") ?? 0) + 2),
      'm reason="no route" empty="" eq="a=b" err="boom \\"x\\"" list=["a","b"] missing=undefined',
    );
  });

  test("errors: message, else code or name, then aggregated errors and causes, in both formats", () => {
    const attempts = [new Error("connect ECONNREFUSED ::1:6443"), new Error("connect ECONNREFUSED 127.0.0.1:6443")];
    const refused = Object.assign(new AggregateError(attempts), { code: "ECONNREFUSED" });
    const wrapped = new Error("listing nodes failed", { cause: new Error("socket hang up") });
    const repeated = new Error("bad selector: no key", { cause: new Error("no key") });
    const cyclic = new Error("loop");
    cyclic.cause = cyclic;
    const text = capture(0, "text");
    const json = capture(0, "json");
    for (const { log } of [text, json]) log.error("failed", { err: refused, wrapped, repeated, cyclic });
    const refusedText = "ECONNREFUSED (connect ECONNREFUSED ::1:6443; connect ECONNREFUSED 127.0.0.1:6443)";
    assert.ok(
      text.lines[0]?.endsWith(
        ` failed err=${JSON.stringify(refusedText)} wrapped="listing nodes failed: socket hang up"` +
          ` repeated="bad selector: no key"` +
          ` cyclic="loop"`,
      ),
      text.lines[0],
    );
    const entry = JSON.parse(json.lines[0] ?? "");
    assert.equal(entry.err, refusedText);
    assert.equal(entry.wrapped, "listing nodes failed: socket hang up");
    assert.equal(entry.repeated, "bad selector: no key");
    assert.equal(entry.cyclic, "loop");
  });

  test("a multi-line message stays on one line", () => {
    const { log, lines } = capture(0, "text");
    log.info("two\nlines");
    assert.equal(lines.length, 1);
    assert.ok(lines[0]?.endsWith('] "two\\nlines"'));
  });
});

describe("json format", () => {
  test("one object per line: ts, level, v, msg, fields", () => {
    const { log, lines } = capture(2, "json");
    log.info("Reconciled", { node: "n1", took: 1.5 });
    log.v(2)?.("Detail", { n: 1 });
    log.warn("Careful", { err: new Error("no route") });
    log.error("Broken");
    assert.deepEqual(
      lines.map((line) => JSON.parse(line)),
      [
        { ts: "2025-11-22T06:07:08.009Z", level: "info", v: 0, msg: "Reconciled", node: "n1", took: 1.5 },
        { ts: "2025-11-22T06:07:08.009Z", level: "info", v: 2, msg: "Detail", n: 1 },
        { ts: "2025-11-22T06:07:08.009Z", level: "warning", msg: "Careful", err: "no route" },
        { ts: "2025-11-22T06:07:08.009Z", level: "error", msg: "Broken" },
      ],
    );
  });

  test("fields never overwrite ts, level or msg; bigint and cycles do not throw", () => {
    const { log, lines } = capture(0, "json");
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    log.info("real", { msg: "fake", level: "fake", big: 10n });
    log.info("cyclic", { cyclic });
    const first = JSON.parse(lines[0] ?? "");
    assert.equal(first.msg, "real");
    assert.equal(first.level, "info");
    assert.equal(first.field_msg, "fake");
    assert.equal(first.big, "10");
    assert.equal(lines.length, 2);
    assert.equal(typeof JSON.parse(lines[1] ?? ""), "string");
  });
});

describe("levels", () => {
  test("info at level N is printed when N <= v; warnings and errors always", () => {
    for (let verbosity = 0; verbosity <= 5; verbosity++) {
      const { log, lines } = capture(verbosity, "text");
      for (let level = 0; level <= 5; level++) log.v(level)?.(`level ${level}`);
      log.warn("w");
      log.error("e");
      assert.equal(lines.length, verbosity + 1 + 2, `verbosity ${verbosity}`);
      assert.ok(lines.at(-3)?.endsWith(`level ${verbosity}`));
    }
  });

  test("a disabled level returns undefined, so its fields are never built", () => {
    const { log } = capture(1, "text");
    let built = false;
    const build = () => {
      built = true;
      return { value: 1 };
    };
    log.v(4)?.("expensive", build());
    assert.equal(log.v(4), undefined);
    assert.equal(built, false);
    assert.equal(typeof log.v(1), "function");
    assert.equal(log.v(-1), undefined);
  });

  test("with() adds fields to every line and keeps the level", () => {
    const { log, lines } = capture(1, "json");
    const nodeLog = log.with({ node: "n1" });
    nodeLog.info("a", { x: 1 });
    nodeLog.v(1)?.("b");
    assert.equal(nodeLog.v(2), undefined);
    assert.deepEqual(
      lines.map((line) => JSON.parse(line)),
      [
        { ts: NOW.toISOString(), level: "info", v: 0, msg: "a", node: "n1", x: 1 },
        { ts: NOW.toISOString(), level: "info", v: 1, msg: "b", node: "n1" },
      ],
    );
  });
});
