import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type Oracle, startOracle } from "./oracle.ts";

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

test("the oracle answers each question in order, a batch at once", async () => {
  const inputs = Array.from({ length: 500 }, (_, i) => ({ i, text: "x".repeat(i) }));
  assert.deepEqual(await Promise.all(inputs.map((input) => oracle.ask("echo", input))), inputs);
});

test("a question for a reader the oracle lacks is refused, and the next one still answered", async () => {
  await assert.rejects(oracle.ask("no-such-reader", 1), /oracle: no reader "no-such-reader"/);
  assert.equal(await oracle.ask("echo", 2), 2);
});
