// What the container image runs, without a Docker engine: the Dockerfile's two stages replayed in
// folders. The build stage gets only the files its COPY lines take (minus .dockerignore), with this
// machine's `npm ci` results (node_modules, the built ICMP addon) standing in for its own, and runs
// the build; the runtime folder then holds exactly what the runtime stage copies from it, and the
// bundles must start there — no dev dependency, no source, nothing from the repository.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { bundle } from "../../scripts/bundle.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { run } from "../../localcluster/exec.ts";
import { shippedCommand } from "./shipped.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
const PROGRAMS = Object.entries(
  (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { bin: Record<string, string> }).bin,
);
/** What `npm ci` makes in the build stage; here, this machine's own `npm ci` made them. */
const NPM_CI_OUTPUTS = ["node_modules", "native/icmp/build"];

interface Stage {
  from: string;
  workdir: string;
  /** COPY/ADD instructions: sources (repository paths, or paths of another stage) and destination. */
  copies: { stage: string | undefined; sources: string[]; to: string }[];
  lines: string[];
}

/** The Dockerfile's stages, with continuation lines joined. */
function parseStages(dockerfile: string): Stage[] {
  const lines = dockerfile
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
  const stages: Stage[] = [];
  for (const line of lines) {
    const [instruction = "", ...args] = line.split(/\s+/);
    if (instruction === "FROM") {
      stages.push({ from: args.join(" "), workdir: "/", copies: [], lines: [] });
      continue;
    }
    const stage = stages.at(-1);
    assert.ok(stage, `instruction before FROM: ${line}`);
    stage.lines.push(line);
    if (instruction === "WORKDIR") stage.workdir = path.posix.resolve(stage.workdir, args[0] as string);
    if (instruction === "ADD") assert.fail(`ADD is not used: ${line}`);
    if (instruction === "COPY") {
      const fromStage = args[0]?.startsWith("--from=") ? (args.shift() as string).slice(7) : undefined;
      const to = path.posix.resolve(stage.workdir, args.pop() as string) + (line.endsWith("/") ? "/" : "");
      stage.copies.push({ stage: fromStage, sources: args, to });
    }
  }
  return stages;
}

/** .dockerignore entries as a predicate on context-relative paths (plain paths and `*.ext`). */
function dockerignored(text: string): (relative: string) => boolean {
  const entries = text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
  return (relative) =>
    entries.some((entry) =>
      entry.startsWith("*.")
        ? relative.endsWith(entry.slice(1))
        : relative === entry || relative.startsWith(`${entry}/`),
    );
}

/** Docker's COPY: a file into a folder keeps its name; a folder's contents go into the destination. */
function copy(source: string, destination: string, filter?: (source: string) => boolean): void {
  const target =
    destination.endsWith("/") && statSync(source).isFile()
      ? path.join(destination, path.basename(source))
      : destination;
  mkdirSync(path.dirname(target), { recursive: true });
  cpSync(source, target, { recursive: true, dereference: true, filter });
}

function start(dir: string, file: string, args: string[], nodeArgs: string[] = []) {
  // No NODE_PATH and a bare PATH: modules can only come from the folder itself.
  const result = spawnSync(process.execPath, [...nodeArgs, file, ...args], {
    cwd: dir,
    env: { PATH: "/usr/bin:/bin" },
    encoding: "utf8",
    timeout: 30_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe("container image contents", () => {
  const dockerfile = readFileSync(path.join(ROOT, "Dockerfile"), "utf8");
  const [build, runtime] = parseStages(dockerfile) as [Stage, Stage];
  let temp: string;
  let image: string;
  let forget: () => void;
  /** A path of the image (or of the build stage) inside the folder that stands for it. */
  const inImage = (imagePath: string) => path.join(image, imagePath);
  /** A bundle that loads both native addons and uses them once, placed in the image's dist/. */
  let addonsCheck: string;

  before(async () => {
    temp = mkdtempSync(path.join(os.tmpdir(), "local-ccm-image-"));
    forget = onExit(() => rmSync(temp, { recursive: true, force: true }));
    const buildRoot = path.join(temp, "build");
    image = path.join(temp, "image");
    const ignored = dockerignored(readFileSync(path.join(ROOT, ".dockerignore"), "utf8"));
    const inContext = (file: string) => !ignored(path.relative(ROOT, file));
    for (const { sources, to } of build.copies) {
      for (const source of sources) copy(path.join(ROOT, source), path.join(buildRoot, to), inContext);
    }
    for (const output of NPM_CI_OUTPUTS) {
      symlinkSync(path.join(ROOT, output), path.join(buildRoot, build.workdir, output));
    }
    await run(process.execPath, ["scripts/build.ts"], { cwd: path.join(buildRoot, build.workdir) });
    for (const { stage, sources, to } of runtime.copies) {
      assert.equal(stage, "build", `the runtime stage copies only from the build stage: ${sources} ${to}`);
      for (const source of sources) copy(path.join(buildRoot, source), inImage(to));
    }
    addonsCheck = inImage("/app/dist/addons-check.cjs");
    await bundle(path.join(import.meta.dirname, "addons-fixture.ts"), addonsCheck);
  });

  after(() => {
    rmSync(temp, { recursive: true, force: true });
    forget?.();
  });

  test("build on the official Node 24 image; run on distroless Node 24 as 65532", () => {
    assert.equal(build.from, "node:24-bookworm AS build");
    assert.ok(build.lines.includes("RUN npm ci"));
    assert.ok(build.lines.includes("RUN npm run build"));
    assert.equal(runtime.from, "gcr.io/distroless/nodejs24-debian12:nonroot");
    assert.ok(runtime.lines.includes("USER 65532:65532"));
  });

  test("the image holds the bundles and the native addons only", () => {
    for (const { to } of runtime.copies) {
      assert.match(to, /^\/app\/(dist\/|node_modules\/(netlink|node-gyp-build|local-ccm-icmp)\/)/);
    }
  });

  for (const [program, bin] of PROGRAMS) {
    test(`${program}: --help prints usage and exits 0`, () => {
      const { code, stdout, stderr } = start(inImage(runtime.workdir), bin, ["--help"]);
      assert.equal(stderr, "");
      assert.equal(code, 0);
      assert.match(stdout, new RegExp(`^Usage: ${program} \\[flags\\]\\n`));
      assert.match(stdout, /--kubeconfig/);
    });

    test(`${program}: a bad flag is a one-line error and exit 2`, () => {
      const { code, stdout, stderr } = start(inImage(runtime.workdir), bin, ["--no-such-flag"]);
      assert.equal(code, 2);
      assert.equal(stdout, "");
      assert.equal(stderr, `${program}: unknown flag: --no-such-flag\n`);
    });
  }

  test("bundled code loads both native addons from the image's node_modules", () => {
    const { code, stdout, stderr } = start(inImage(runtime.workdir), addonsCheck, []);
    assert.equal(code, 0, stderr);
    const result = JSON.parse(stdout) as { icmp: { kind: string; reason?: string }; routeSource: string };
    assert.equal(result.routeSource, "127.0.0.1");
    assert.deepEqual(result.icmp, { kind: "answered" });
  });

  for (const [program] of PROGRAMS) {
    test(`${program}: the shipped command, Node's flags included, starts in the image`, () => {
      const { nodeArgs, script } = shippedCommand(program);
      assert.ok(existsSync(inImage(script)), `${script} is not in the image`);
      // The native addons too: --jitless, say, must not keep them from loading.
      for (const [file, args] of [[inImage(script), ["--help"]], [addonsCheck, []]] as const) {
        const { code, stderr } = start(inImage(runtime.workdir), file, [...args], nodeArgs);
        assert.equal(code, 0, `node ${nodeArgs.join(" ")} ${file}: ${stderr}`);
      }
    });
  }
});
