// The docs' Helm examples tried as written: each `helm install` command of the sh blocks of the README, docs/ and
// the chart's README, and the values file it names (the yaml block that begins with "# <file name>"), rendered with
// `helm template`; each example must change something real (flags the programs accept, not the defaults). The
// published chart's `oci://` reference must be the one the release workflow pushes, at the chart's version; it is
// rendered from the checkout, which is what that workflow packages.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { parse, parseAllDocuments } from "yaml";
import type { Container } from "kubernetes-types/core/v1.js";
import { parseAgentFlags } from "../../src/agent/flags.ts";
import { nodeLifecycle } from "../../src/lifecycle/definition.ts";
import { configOf, parseManagerFlags } from "../../src/manager/flags.ts";
import { ensureBinaries } from "../../localcluster/build.ts";
import { run } from "../../localcluster/exec.ts";
import { readDocs } from "../../scripts/docs-tables.ts";
import { releaseReferences } from "../../scripts/release.ts";
import { KUBE_VERSION_FLAG } from "../../scripts/render-manifests.ts";
import { CHART_CERTIFICATE_ARGS } from "./shipped.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");

/** Fenced blocks of one language, in order. */
function blocks(markdown: string, language: string): string[] {
  return [...markdown.matchAll(new RegExp("^```" + language + "\\n([\\s\\S]*?)^```$", "gm"))].map((m) => m[1] as string);
}

/** The words of a shell command as sh splits them: blanks, backslash-newline, single and double quotes. */
function shellWords(command: string): string[] {
  const words: string[] = [];
  let [word, quote, started] = ["", "", false];
  const text = command.replace(/\\\n/g, " ");
  for (let i = 0; i < text.length; i++) {
    const char = text[i] as string;
    if (quote) {
      if (char === quote) quote = "";
      else word += char;
    } else if (char === "'" || char === '"') [quote, started] = [char, true];
    else if (char === "\\") [word, started, i] = [word + (text[i + 1] ?? ""), true, i + 1];
    else if (/\s/.test(char)) {
      if (started || word) words.push(word);
      [word, started] = ["", false];
    } else word += char;
  }
  assert.equal(quote, "", `unclosed quote in: ${command}`);
  if (started || word) words.push(word);
  return words;
}

/** `helm install` commands of a page's sh blocks (continuation lines joined). */
function helmInstalls(markdown: string): string[][] {
  return blocks(markdown, "sh")
    .flatMap((block) => block.replace(/\\\n/g, " ").split("\n"))
    .map((line) => line.replace(/\s+#.*$/, ""))
    .filter((line) => line.startsWith("helm install "))
    .map(shellWords);
}

/** Where the release (scripts/release.ts, which .github/workflows/release.yml runs) pushes the chart. */
function publishedChart(): string {
  const workflow = readFileSync(path.join(ROOT, ".github/workflows/release.yml"), "utf8");
  assert.match(workflow, /node scripts\/release\.ts --tag "\$GITHUB_REF_NAME" /, "the workflow publishes with the script");
  return releaseReferences(`v${chartVersion}`).chart;
}
const chart = readFileSync(path.join(ROOT, "charts/local-ccm/Chart.yaml"), "utf8");
const chartVersion = (parse(chart) as { version: string }).version;

let helm: string;
const docs = readDocs();
const readme = docs.get("README.md") as string;
const allInstalls = [...docs.values()].flatMap(helmInstalls);
const dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-readme-"));
before(async () => {
  ({ helm } = await ensureBinaries());
  // The values files the docs show, under the names their first line gives.
  for (const block of [...docs.values()].flatMap((text) => blocks(text, "yaml"))) {
    const name = /^# (values[-\w]*\.yaml)\n/.exec(block)?.[1];
    if (name) writeFileSync(path.join(dir, name), block);
  }
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Each program's args in `helm template` output, less the chart's metrics certificate (every install passes it). */
async function renderedArgs(words: string[]): Promise<Record<string, string[]>> {
  const [command, verb, release, chart, ...options] = words;
  assert.deepEqual([command, verb], ["helm", "install"]);
  let rest = options;
  if (chart?.startsWith("oci://")) {
    assert.equal(chart, publishedChart(), "the chart's published reference");
    const version = rest.indexOf("--version");
    assert.equal(rest[version + 1], chartVersion, `${words.join(" ")}: --version is the chart's version`);
    rest = rest.filter((_, i) => i !== version && i !== version + 1);
  }
  // `helm template` takes the same release, chart and value options; the chart is the repository's.
  const chartDir = chart?.startsWith("oci://") ? path.join(ROOT, "charts/local-ccm") : path.join(ROOT, chart as string);
  const output = await run(helm, ["template", release as string, chartDir, KUBE_VERSION_FLAG, ...rest], { cwd: dir });
  const args: Record<string, string[]> = {};
  for (const doc of parseAllDocuments(output)) {
    const obj = doc.toJS() as { kind?: string; spec?: { template?: { spec?: { containers?: Container[] } } } } | null;
    if (obj?.kind !== "DaemonSet" && obj?.kind !== "Deployment") continue;
    const container = obj.spec?.template?.spec?.containers?.[0] as Container;
    args[container.name] = (container.args ?? []).filter((arg) => !CHART_CERTIFICATE_ARGS.includes(arg));
  }
  return args;
}

test("the docs' helm install commands render, each changing flags the programs accept", async () => {
  assert.ok(allInstalls.length >= 5, `helm install examples found: ${allInstalls.length}`);
  assert.ok(allInstalls.filter((words) => words[3]?.startsWith("oci://")).length >= 2, "installs from the OCI registry");
  for (const words of allInstalls) {
    const args = await renderedArgs(words);
    const agent = args["local-ccm"] ?? [];
    const controller = args["node-lifecycle-controller"] ?? [];
    assert.ok(agent.length + controller.length > 0, `${words.join(" ")} changes no flag`);
    parseAgentFlags(agent, { NODE_NAME: "node-a" });
    parseManagerFlags(controller, { POD_NAMESPACE: "kube-system" }, () => undefined);
  }
});

test("the README's install, from the OCI registry, sets InternalIP CIDRs as a --set list and the dry run", async () => {
  const [quickStart] = helmInstalls(readme);
  assert.equal(quickStart?.[3], publishedChart());
  const args = await renderedArgs(quickStart as string[]);
  assert.deepEqual(args["local-ccm"], ["--internal-ip-cidr=10.0.0.0/24,fd00:10::/64"]);
  assert.deepEqual(args["node-lifecycle-controller"], ["--dry-run=true"]);
});

test("the values file example gives its rules as lists, reaching the agent and the controller", async () => {
  const install = allInstalls.find((words) => words.includes("-f"));
  assert.ok(install, "a helm install with a values file");
  const args = await renderedArgs(install);
  assert.deepEqual(args["local-ccm"], [
    "--internal-ip-cidr=10.0.0.0/16",
    "--provider-id=local://{nodeName}",
    "--region-rules=name:^([a-z]+)-=$1",
    "--zone-rules=cidr:10.0.1.0/24=rack-1,cidr:10.0.2.0/24=rack-2",
  ]);
  const flags = parseAgentFlags(args["local-ccm"] ?? [], { NODE_NAME: "node-a" });
  assert.deepEqual(
    flags.metadata.rules.rules.map((rule) => rule.field),
    ["region", "zone", "zone"],
  );
  const parsed = parseManagerFlags(args["node-lifecycle-controller"] ?? [], {}, () => undefined);
  const lifecycle = configOf(parsed, nodeLifecycle);
  assert.equal(lifecycle.watchAutoscalerTaint, false);
  assert.equal(lifecycle.unhealthyThreshold, 0.4);
  assert.equal(lifecycle.protectedLabels.length, 2);
});
