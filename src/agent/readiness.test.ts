import assert from "node:assert/strict";
import { test } from "node:test";
import { type AgentReadiness, agentReadiness, type ReadinessInput } from "./readiness.ts";

const base: ReadinessInput = { nodeName: "n1", synced: true, found: true, result: {} };
const REFUSED = 'refusing to write node "n1": it is not this host: none of its provided-node-ip (10.0.0.2) is …';

const cases: [string, Partial<ReadinessInput>, AgentReadiness][] = [
  ["initialised, last reconcile fine", {}, { ok: true, rule: "ready" }],
  ["watch not synced", { synced: false, found: false }, { ok: false, rule: "not-synced", reason: "node watch not synced yet" }],
  ["no such Node", { found: false }, { ok: false, rule: "node-missing", reason: 'node "n1" not found' }],
  [
    "the last reconcile failed (an API error), even on an initialised node",
    { error: "the server is unavailable", result: undefined },
    { ok: false, rule: "reconcile-failed", reason: "last reconcile failed: the server is unavailable" },
  ],
  [
    "started, first reconcile still running",
    { result: undefined },
    { ok: false, rule: "not-reconciled", reason: "first reconcile not finished yet" },
  ],
  ["the Node is not this host", { result: { refused: REFUSED } }, { ok: false, rule: "not-this-host", reason: REFUSED }],
  [
    "metadata unavailable: the taint stays, not ready",
    { result: { taintKept: "no metadata yet: aws instance metadata did not answer within 10000 ms" } },
    {
      ok: false,
      rule: "taint-kept",
      reason: 'node "n1" not initialised: no metadata yet: aws instance metadata did not answer within 10000 ms',
    },
  ],
  [
    "waiting for kubelet's InternalIP: not ready until it comes",
    { result: { taintKept: "no InternalIP yet (from kubelet, provided-node-ip or detection)" } },
    {
      ok: false,
      rule: "taint-kept",
      reason: 'node "n1" not initialised: no InternalIP yet (from kubelet, provided-node-ip or detection)',
    },
  ],
];

for (const [name, input, expected] of cases) {
  test(`readiness: ${name}`, () => {
    assert.deepEqual(agentReadiness({ ...base, ...input }), expected);
  });
}
