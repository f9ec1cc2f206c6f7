// The GitHub workflows are linted by actionlint (built from its pinned module with the other binaries), with
// shellcheck over their `run:` scripts: no error in any of them. A broken workflow shows that both checks bite, and
// the CI workflow is shown to run the suite the way .ci/run does.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { accessSync, constants, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { parse } from "yaml";
import { ensureBinaries } from "../../localcluster/build.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
const WORKFLOWS = path.join(ROOT, ".github/workflows");

interface LintError {
  message: string;
  filepath: string;
  line: number;
  column: number;
  kind: string;
}

/** Where a command is on PATH, or undefined. */
function onPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not there
    }
  }
  return undefined;
}

describe("GitHub workflows", () => {
  let actionlint: string;
  let shellcheck: string;
  const scratch = mkdtempSync(path.join(os.tmpdir(), "local-ccm-workflows-"));
  before(async () => {
    ({ actionlint } = await ensureBinaries());
    const found = onPath("shellcheck");
    assert.ok(found, "actionlint checks run: scripts with shellcheck: apt-get install shellcheck (npm test's pretest installs it as root)");
    shellcheck = found;
  });
  after(() => rmSync(scratch, { recursive: true, force: true }));

  /** actionlint's findings on `files` (exit 1 means findings; anything else but 0 is a failure of its own). */
  const lint = (files: string[]): Promise<LintError[]> =>
    new Promise((resolve, reject) => {
      const args = ["-no-color", "-format", "{{json .}}", `-shellcheck=${shellcheck}`, ...files];
      execFile(actionlint, args, { cwd: ROOT }, (err, stdout, stderr) => {
        if (err && err.code !== 1) return reject(new Error(`actionlint failed (${err.code}): ${stderr}`));
        resolve(JSON.parse(stdout || "[]") as LintError[]);
      });
    });
  const workflows = () =>
    readdirSync(WORKFLOWS)
      .filter((name) => name.endsWith(".yml"))
      .map((name) => path.join(WORKFLOWS, name));

  test("actionlint finds no error in any workflow", async () => {
    const files = workflows();
    assert.deepEqual(files.map((file) => path.basename(file)).sort(), ["ci.yml", "release.yml"]);
    const errors = await lint(files);
    const lines = errors.map((e) => `${path.relative(ROOT, e.filepath)}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    assert.deepEqual(lines, []);
  });

  test("a broken workflow is caught: a wrong expression and an unquoted variable in a script", async () => {
    const broken = path.join(scratch, "broken.yml");
    writeFileSync(
      broken,
      [
        "on: push",
        "jobs:",
        "  test:",
        "    runs-on: ubuntu-24.04",
        "    steps:",
        "      - run: echo ${{ github.no_such_field }}",
        "      - run: rm -rf $DIR/build",
        "",
      ].join("\n"),
    );
    const kinds = (await lint([broken])).map((e) => e.kind).sort();
    assert.deepEqual(kinds, ["expression", "shellcheck"]);
  });

  test("ci.yml runs on pull requests, as root, the commands .ci/run runs", () => {
    const ci = parse(readFileSync(path.join(WORKFLOWS, "ci.yml"), "utf8")) as {
      on: Record<string, unknown>;
      jobs: Record<string, { steps: { run?: string; uses?: string }[] }>;
    };
    assert.ok("pull_request" in ci.on);
    const steps = Object.values(ci.jobs).flatMap((job) => job.steps);
    assert.ok(steps.some((step) => step.run?.includes('sudo -E env "PATH=$PATH" bash .ci/run')));
    assert.ok(steps.some((step) => step.uses?.startsWith("actions/setup-go@")));
    const script = readFileSync(path.join(ROOT, ".ci/run"), "utf8");
    for (const command of ["npm ci", "npm run check", "npm test"])
      assert.match(script, new RegExp(`^${command}$`, "m"), `.ci/run runs ${command}`);
  });
});
