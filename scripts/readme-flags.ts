// `npm run readme`: rewrites the flag tables in README.md from the programs' flag tables (the single
// source), between <!-- flags:PROGRAM --> and <!-- /flags --> markers. test/docs checks they agree.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { agentFlagTable } from "../src/agent/flags.ts";
import { flagsMarkdown } from "../src/cli/flags.ts";
import { lifecycleFlagTable } from "../src/lifecycle/flags.ts";

export const README = path.resolve(import.meta.dirname, "../README.md");
const TABLES = { "local-ccm": agentFlagTable, "node-lifecycle-controller": lifecycleFlagTable };

/** README text with every marked flag table regenerated. */
export function renderFlagTables(readme: string): string {
  let text = readme;
  for (const [program, table] of Object.entries(TABLES)) {
    const pattern = new RegExp(`(<!-- flags:${program} -->\\n)[\\s\\S]*?(<!-- /flags -->)`);
    if (!pattern.test(text)) throw new Error(`README.md has no <!-- flags:${program} --> section`);
    text = text.replace(pattern, (_, open: string, close: string) => `${open}${flagsMarkdown(table).trimEnd()}\n${close}`);
  }
  return text;
}

if (import.meta.main) {
  writeFileSync(README, renderFlagTables(readFileSync(README, "utf8")));
  console.log("README.md flag tables updated");
}
