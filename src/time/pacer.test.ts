// The pace of a pass over everything: at once after a quiet spell, then at most every minIntervalMs, and at most a
// quarter of the time however long a pass takes.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Pacer } from "./pacer.ts";

/** A pacer on a clock the test moves; `pass(ms)` is a pass that takes ms. */
function paced(minIntervalMs: number) {
  let nowMs = 1_000;
  const pacer = new Pacer(minIntervalMs, () => nowMs);
  return {
    pacer,
    pass: (ms: number) => pacer.run(() => (nowMs += ms)),
    advance: (ms: number) => void (nowMs += ms),
  };
}

test("the first pass runs at once; the next waits the interval from the end of the last", () => {
  const { pacer, pass, advance } = paced(100);
  assert.equal(pacer.wait(), 0);
  pass(10);
  assert.equal(pacer.wait(), 100);
  advance(60);
  assert.equal(pacer.wait(), 40);
  advance(40);
  assert.equal(pacer.wait(), 0);
  advance(1_000); // a quiet spell: at once again
  assert.equal(pacer.wait(), 0);
});

test("a long pass is followed by three times its length without one", () => {
  const { pacer, pass } = paced(100);
  pass(50);
  assert.equal(pacer.wait(), 150);
  pass(400);
  assert.equal(pacer.wait(), 1_200);
});

test("a pass that throws still sets the pace, and its error reaches the caller", () => {
  const { pacer } = paced(100);
  assert.throws(() => pacer.run(() => {
    throw new Error("boom");
  }), /boom/);
  assert.equal(pacer.wait(), 100);
});

test("property: passes run back to back as soon as allowed spend at most a quarter of the time in passes", () => {
  for (let trial = 0; trial < 200; trial++) {
    const { pacer, pass, advance } = paced(1 + Math.floor(Math.random() * 200));
    let busy = 0;
    const start = 1_000;
    let end = start;
    for (let i = 0; i < 50; i++) {
      advance(pacer.wait());
      const ms = Math.floor(Math.random() * 500);
      busy += ms;
      end = pass(ms);
    }
    // Up to the end of the last pass plus the rest it is owed.
    const elapsed = end + pacer.wait() - start;
    assert.ok(busy <= elapsed / 4 + 1e-9, `${busy} ms of passes in ${elapsed} ms`);
  }
});
