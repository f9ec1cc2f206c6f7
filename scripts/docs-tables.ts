// `npm run readme`: rewrites the docs' generated tables from their single sources in the code: each program's flag
// table (between <!-- flags:PROGRAM --> and <!-- /flags -->), its metrics (between <!-- metrics:PROGRAM --> and
// <!-- /metrics -->), node-lifecycle-controller's controllers (between <!-- controllers:PROGRAM --> and
// <!-- /controllers -->) and the upstream load-balancer specs the peer suite skips in each mode
// (test/upstream/loadbalancer.ts). Each table lives in exactly one of the docs files (README.md, docs/*.md, the
// chart's README), wherever its text is; test/docs checks they agree.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { createMetrics as createAgentMetrics } from "../src/agent/metrics.ts";
import { agentFlagTable } from "../src/agent/flags.ts";
import { flagsMarkdown } from "../src/cli/flags.ts";
import { metricsMarkdown } from "../src/cli/metrics.ts";
import { managerFlagTable } from "../src/manager/flags.ts";
import { createMetrics as createManagerMetrics } from "../src/manager/metrics.ts";
import { controllersMarkdown } from "../src/manager/registry.ts";
import { notApplicableMarkdown } from "../test/upstream/loadbalancer.ts";

export const ROOT = path.resolve(import.meta.dirname, "..");

/** The documentation, as paths relative to the repository: the README, every page of docs/, the chart's README. */
export function docsFiles(): string[] {
  const pages = readdirSync(path.join(ROOT, "docs"))
    .filter((name) => name.endsWith(".md"))
    .sort()
    .map((name) => `docs/${name}`);
  return ["README.md", ...pages, "charts/local-ccm/README.md"];
}

/** Each generated table: its marker kind, the program, and its Markdown. */
const TABLES = [
  ["flags", "local-ccm", () => flagsMarkdown(agentFlagTable)],
  ["flags", "node-lifecycle-controller", () => flagsMarkdown(managerFlagTable)],
  ["controllers", "node-lifecycle-controller", () => controllersMarkdown()],
  ["metrics", "local-ccm", () => metricsMarkdown(createAgentMetrics().registry)],
  ["metrics", "node-lifecycle-controller", () => metricsMarkdown(createManagerMetrics().registry)],
  ["upstream", "loadbalancer", () => notApplicableMarkdown("node-address")],
  ["upstream", "loadbalancer-l2", () => notApplicableMarkdown("l2")],
  ["upstream", "loadbalancer-bgp", () => notApplicableMarkdown("bgp")],
] as const;

/**
 * The docs (path → text) with every marked table regenerated in the one file that holds its marker. A marker in no
 * file or in two fails: a table that moved with its text must not be left behind, nor kept twice.
 */
export function renderDocsTables(docs: ReadonlyMap<string, string>): Map<string, string> {
  const out = new Map(docs);
  for (const [kind, program, markdown] of TABLES) {
    const pattern = new RegExp(`(<!-- ${kind}:${program} -->\\n)[\\s\\S]*?(<!-- /${kind} -->)`);
    const holders = [...out].filter(([, text]) => pattern.test(text)).map(([file]) => file);
    if (holders.length !== 1)
      throw new Error(`<!-- ${kind}:${program} --> must be in exactly one docs file, found in: ${holders.join(", ") || "none"}`);
    const file = holders[0] as string;
    const table = markdown().trimEnd();
    out.set(file, (out.get(file) as string).replace(pattern, (_, open: string, close: string) => `${open}${table}\n${close}`));
  }
  return out;
}

/** The docs files' current text. */
export function readDocs(): Map<string, string> {
  return new Map(docsFiles().map((file) => [file, readFileSync(path.join(ROOT, file), "utf8")]));
}

if (import.meta.main) {
  const docs = readDocs();
  for (const [file, text] of renderDocsTables(docs))
    if (text !== docs.get(file)) {
      writeFileSync(path.join(ROOT, file), text);
      console.log(`${file}: tables updated`);
    }
  console.log("docs tables up to date");
}
