// `npm run readme`: rewrites the README's generated tables from their single sources in the code:
// each program's flag table (between <!-- flags:PROGRAM --> and <!-- /flags -->), its metrics
// (between <!-- metrics:PROGRAM --> and <!-- /metrics -->), node-lifecycle-controller's controllers (between
// <!-- controllers:PROGRAM --> and <!-- /controllers -->) and the upstream load-balancer specs the peer suite
// skips in each mode (test/upstream/loadbalancer.ts). test/docs checks they agree.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { createMetrics as createAgentMetrics } from "../src/agent/metrics.ts";
import { agentFlagTable } from "../src/agent/flags.ts";
import { flagsMarkdown } from "../src/cli/flags.ts";
import { metricsMarkdown } from "../src/cli/metrics.ts";
import { managerFlagTable } from "../src/manager/flags.ts";
import { createMetrics as createManagerMetrics } from "../src/manager/metrics.ts";
import { controllersMarkdown } from "../src/manager/registry.ts";
import { notApplicableMarkdown } from "../test/upstream/loadbalancer.ts";

export const README = path.resolve(import.meta.dirname, "../README.md");

/** Each generated table: its marker kind, the program, and its Markdown. */
const TABLES = [
  ["flags", "local-ccm", () => flagsMarkdown(agentFlagTable)],
  ["flags", "node-lifecycle-controller", () => flagsMarkdown(managerFlagTable)],
  ["controllers", "node-lifecycle-controller", () => controllersMarkdown()],
  ["metrics", "local-ccm", () => metricsMarkdown(createAgentMetrics().registry)],
  ["metrics", "node-lifecycle-controller", () => metricsMarkdown(createManagerMetrics().registry)],
  ["upstream", "loadbalancer", () => notApplicableMarkdown("node-address")],
  ["upstream", "loadbalancer-l2", () => notApplicableMarkdown("l2")],
] as const;

/** README text with every marked table regenerated. */
export function renderReadmeTables(readme: string): string {
  let text = readme;
  for (const [kind, program, markdown] of TABLES) {
    const pattern = new RegExp(`(<!-- ${kind}:${program} -->\\n)[\\s\\S]*?(<!-- /${kind} -->)`);
    if (!pattern.test(text)) throw new Error(`README.md has no <!-- ${kind}:${program} --> section`);
    text = text.replace(pattern, (_, open: string, close: string) => `${open}${markdown().trimEnd()}\n${close}`);
  }
  return text;
}

if (import.meta.main) {
  writeFileSync(README, renderReadmeTables(readFileSync(README, "utf8")));
  console.log("README.md tables updated");
}
