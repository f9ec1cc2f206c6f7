import assert from "node:assert/strict";
import { test } from "node:test";
import { parseFlags, UsageError } from "../cli/flags.ts";
import { serviceConfig, serviceFlagTable } from "./flags.ts";

const parse = (argv: string[]) => serviceConfig(parseFlags(serviceFlagTable, argv, {}).values);

test("defaults: our class only, every eligible node, 16 per Service, the nodes' own ports and NodePorts refused", () => {
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
    nodePortRange: { from: 30000, to: 32767 },
    unknownGuard: { threshold: 0.55, graceMs: 20_000 },
  });
});

test("every flag set", () => {
  const config = parse([
    "--lb-claim-classless",
    "--lb-node-selector=edge in (a,b)",
    "--lb-max-nodes=3",
    "--lb-reserved-ports=2222,30000-30010",
    "--lb-node-port-range=20000-22767",
    "--lb-unknown-threshold=1",
    "--lb-unknown-grace=0s",
  ]);
  assert.deepEqual(config.unknownGuard, { threshold: 1, graceMs: 0 });
  assert.deepEqual(config.nodePortRange, { from: 20000, to: 22767 });
  assert.equal(config.claimClassless, true);
  assert.equal(config.nodeSelector?.text, "edge in (a,b)");
  assert.equal(config.maxNodes, 3);
  assert.deepEqual(config.reservedPorts, [
    { from: 2222, to: 2222 },
    { from: 30000, to: 30010 },
  ]);
  assert.deepEqual(parse(["--lb-reserved-ports="]).reservedPorts, []);
  // kube-apiserver's other notations, and its reading of empty: its default.
  assert.deepEqual(parse(["--lb-node-port-range=30000+99"]).nodePortRange, { from: 30000, to: 30099 });
  assert.deepEqual(parse(["--lb-node-port-range= 8080 "]).nodePortRange, { from: 8080, to: 8080 });
  assert.deepEqual(parse(["--lb-node-port-range="]).nodePortRange, { from: 30000, to: 32767 });
});

const NOT_A_PORT = "is not a port (1-65535) or a range of ports (from-to)";
for (const [argv, message] of [
  ["--lb-reserved-ports=22,70000", `invalid value "22,70000" for --lb-reserved-ports: "70000" ${NOT_A_PORT}`],
  ["--lb-reserved-ports=90-80", `invalid value "90-80" for --lb-reserved-ports: "90-80" ${NOT_A_PORT}`],
  ["--lb-max-nodes=0", 'invalid value "0" for --lb-max-nodes: must be between 1 and 1000'],
  ["--lb-unknown-threshold=0", 'invalid value "0" for --lb-unknown-threshold: must be greater than 0 and at most 1'],
  ["--lb-unknown-threshold=1.5", 'invalid value "1.5" for --lb-unknown-threshold: must be greater than 0 and at most 1'],
  [
    "--lb-node-port-range=32767-30000",
    'invalid value "32767-30000" for --lb-node-port-range: "32767-30000": the range ends below its start',
  ],
  [
    "--lb-node-port-range=30000-70000",
    'invalid value "30000-70000" for --lb-node-port-range: "30000-70000": a port range cannot go above 65535',
  ],
  [
    "--lb-node-port-range=1-2+3",
    'invalid value "1-2+3" for --lb-node-port-range: "1-2+3" is not a port range (from-to, from+offset or one port)',
  ],
  [
    "--lb-node-selector=a in (",
    'invalid value "a in (" for --lb-node-selector: ' +
      `invalid label selector "a in (": found end of input, expected ',' or ')'`,
  ],
] as const)
  test(`refused: ${argv}`, () => {
    assert.throws(() => parse([argv]), (err: unknown) => err instanceof UsageError && err.message === message);
  });
