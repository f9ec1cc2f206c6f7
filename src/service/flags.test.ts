import assert from "node:assert/strict";
import { test } from "node:test";
import { parseFlags, UsageError } from "../cli/flags.ts";
import { serviceConfig, serviceFlagTable } from "./flags.ts";

const parse = (argv: string[]) => serviceConfig(parseFlags(serviceFlagTable, argv, {}).values);

test("defaults: only our class, every eligible node, 16 per Service, the nodes' own ports reserved", () => {
  assert.deepEqual(parse([]), {
    claimClassless: false,
    maxNodes: 16,
    reservedPorts: [
      { from: 22, to: 22 },
      { from: 2379, to: 2380 },
      { from: 6443, to: 6443 },
      { from: 10250, to: 10250 },
      { from: 10256, to: 10256 },
      { from: 10263, to: 10266 },
    ],
  });
});

test("every flag set", () => {
  const config = parse([
    "--lb-claim-classless",
    "--lb-node-selector=edge in (a,b)",
    "--lb-max-nodes=3",
    "--lb-reserved-ports=2222,30000-30010",
  ]);
  assert.equal(config.claimClassless, true);
  assert.equal(config.nodeSelector?.text, "edge in (a,b)");
  assert.equal(config.maxNodes, 3);
  assert.deepEqual(config.reservedPorts, [
    { from: 2222, to: 2222 },
    { from: 30000, to: 30010 },
  ]);
  assert.deepEqual(parse(["--lb-reserved-ports="]).reservedPorts, []);
});

const NOT_A_PORT = "is not a port (1-65535) or a range of ports (from-to)";
for (const [argv, message] of [
  ["--lb-reserved-ports=22,70000", `invalid value "22,70000" for --lb-reserved-ports: "70000" ${NOT_A_PORT}`],
  ["--lb-reserved-ports=90-80", `invalid value "90-80" for --lb-reserved-ports: "90-80" ${NOT_A_PORT}`],
  ["--lb-max-nodes=0", 'invalid value "0" for --lb-max-nodes: must be between 1 and 1000'],
  [
    "--lb-node-selector=a in (",
    'invalid value "a in (" for --lb-node-selector: ' +
      `invalid label selector "a in (": found end of input, expected ',' or ')'`,
  ],
] as const)
  test(`refused: ${argv}`, () => {
    assert.throws(() => parse([argv]), (err: unknown) => err instanceof UsageError && err.message === message);
  });
