import assert from "node:assert/strict";
import { setImmediate as nextTurn } from "node:timers/promises";
import { test } from "node:test";
import fc from "fast-check";
import { waitFor } from "../../localcluster/wait.ts";
import { WorkQueue } from "./workqueue.ts";

/** A sync that records calls and finishes only when told, so tests see what runs at once. */
function gatedSync() {
  const calls: string[] = [];
  const open = new Map<string, () => void>();
  let concurrent = 0;
  let maxConcurrent = 0;
  const running = new Set<string>();
  return {
    calls,
    running,
    get maxConcurrent() {
      return maxConcurrent;
    },
    sync: (key: string) =>
      new Promise<void>((resolve) => {
        assert.ok(!running.has(key), `${key} synced twice at once`);
        calls.push(key);
        running.add(key);
        maxConcurrent = Math.max(maxConcurrent, ++concurrent);
        open.set(key, () => {
          running.delete(key);
          concurrent--;
          resolve();
        });
      }),
    finish(key: string) {
      const done = open.get(key);
      assert.ok(done, `${key} is not being synced`);
      open.delete(key);
      done();
    },
  };
}

test("a key added many times before its sync starts is synced once", async () => {
  const gate = gatedSync();
  const queue = new WorkQueue({ sync: gate.sync, workers: 1 });
  queue.add("x");
  for (let i = 0; i < 5; i++) queue.add("a");
  queue.add("b");
  queue.add("a");
  assert.equal(queue.length, 3);
  assert.deepEqual(gate.calls, [], "no sync starts inside add(): the burst is taken in whole first");
  for (const key of ["x", "a", "b"]) {
    await waitFor(`${key}'s sync`, () => gate.running.has(key));
    gate.finish(key);
  }
  await queue.idle();
  assert.deepEqual(gate.calls, ["x", "a", "b"]);
});

test("a key added while it is synced is synced again after, never twice at once", async () => {
  const gate = gatedSync();
  const queue = new WorkQueue({ sync: gate.sync, workers: 4 });
  queue.add("a");
  await waitFor("a's sync", () => gate.running.has("a"));
  queue.add("a");
  queue.add("a");
  await nextTurn();
  assert.deepEqual(gate.calls, ["a"], "not started again while running");
  gate.finish("a");
  await waitFor("a's second sync", () => gate.calls.length === 2);
  gate.finish("a");
  await queue.idle();
  assert.deepEqual(gate.calls, ["a", "a"]);
});

test("workers bound how many keys sync at once", async () => {
  const gate = gatedSync();
  const queue = new WorkQueue({ sync: gate.sync, workers: 2 });
  for (const key of ["a", "b", "c", "d"]) queue.add(key);
  await waitFor("two syncs", () => gate.running.size === 2);
  await nextTurn();
  assert.deepEqual(gate.calls, ["a", "b"]);
  gate.finish("a");
  await waitFor("c starts", () => gate.calls.includes("c"));
  for (const key of ["b", "c"]) gate.finish(key);
  await waitFor("d starts", () => gate.calls.includes("d"));
  gate.finish("d");
  await queue.idle();
  assert.equal(gate.maxConcurrent, 2);
});

test("a failing key is retried with growing, capped, jittered delays; a success forgets its failures", async () => {
  const delays: number[] = [];
  let failuresLeft = 4;
  let successes = 0;
  const queue = new WorkQueue({
    backoff: { baseMs: 8, capMs: 32 },
    sync: async () => {
      if (failuresLeft-- > 0) throw new Error("boom");
      successes++;
    },
    onError: (key, err, retryInMs) => {
      assert.equal(key, "a");
      assert.equal((err as Error).message, "boom");
      delays.push(retryInMs);
    },
  });
  queue.add("a");
  await waitFor("a success after four failures", () => successes === 1, 10_000, 5);
  // Retry n waits 50–100 % of min(base·2ⁿ, cap).
  const ceilings = [8, 16, 32, 32];
  delays.forEach((delay, n) => {
    assert.ok(delay >= (ceilings[n] as number) / 2 && delay <= (ceilings[n] as number), `retry ${n}: ${delay} ms`);
  });
  failuresLeft = 1;
  queue.add("a");
  await waitFor("a fails once more and succeeds", () => successes === 2, 10_000, 5);
  assert.ok((delays[4] as number) <= 8, `the count restarts after a success: ${delays[4]} ms`);
});

test("addAfter adds a key later; the earlier of two pending delays wins", async () => {
  const synced: string[] = [];
  const queue = new WorkQueue({ sync: async (key) => void synced.push(key) });
  const started = Date.now();
  queue.addAfter("a", 60_000);
  queue.addAfter("a", 30);
  queue.addAfter("a", 50_000);
  await waitFor("a synced", () => synced.length === 1);
  assert.ok(Date.now() - started >= 25);
  await queue.stop();
});

test("stop lets syncs under way finish, starts no other and drops delayed keys", async () => {
  const gate = gatedSync();
  const queue = new WorkQueue({ sync: gate.sync });
  queue.add("a");
  queue.add("b");
  queue.addAfter("c", 1);
  await waitFor("a's sync", () => gate.running.has("a"));
  let stopped = false;
  const stopping = queue.stop().then(() => {
    stopped = true;
  });
  await nextTurn();
  assert.ok(!stopped, "stop waits for the sync under way");
  gate.finish("a");
  await stopping;
  queue.add("d");
  await new Promise((resolve) => setTimeout(resolve, 20)); // past c's delay: nothing may start now
  assert.deepEqual(gate.calls, ["a"]);
  assert.equal(queue.length, 0);
});

test("whatever the order of adds and sync ends, a key never syncs twice at once and its last add is synced", async () => {
  const keys = ["a", "b", "c"];
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.oneof(fc.constantFrom(...keys).map((key) => ({ add: key })), fc.constant({ tick: true })), {
        maxLength: 40,
      }),
      fc.integer({ min: 1, max: 3 }),
      async (steps, workers) => {
        const gate = gatedSync();
        const queue = new WorkQueue({ sync: gate.sync, workers });
        const pendingSince = new Map<string, number>();
        for (const step of steps) {
          if ("add" in step) {
            pendingSince.set(step.add, gate.calls.length);
            queue.add(step.add);
          } else {
            const [running] = gate.running;
            if (running) gate.finish(running);
          }
          await nextTurn();
        }
        // Let everything finish: each key added must start a sync after its last add.
        while (queue.length > 0) {
          for (const key of [...gate.running]) gate.finish(key);
          await nextTurn();
        }
        for (const [key, since] of pendingSince)
          assert.ok(gate.calls.slice(since).includes(key), `${key} not synced after its last add`);
        assert.ok(gate.maxConcurrent <= workers);
      },
    ),
    { seed: 20261124, numRuns: 200 },
  );
});
