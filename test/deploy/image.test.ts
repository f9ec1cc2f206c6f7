// What the container image runs, without a Docker engine: the Dockerfile's two stages replayed in
// folders. The build stage gets only the files its COPY lines take (minus .dockerignore), with this
// machine's `npm ci` results (node_modules, the built sockets addon) standing in for its own, and runs
// the build; the runtime folder then holds exactly what the runtime stage copies from it, and the
// bundles must start there — no dev dependency, no source, nothing from the repository.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  lstatSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { bundle } from "../../localcluster/bundle.ts";
import { buildImage, NODE_DIR, type BuiltImage } from "../../localcluster/image.ts";
import { readImageTarball, type ImageContents, type LayerEntry } from "../../localcluster/oci-image.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { startContainerd } from "../../localcluster/containerd.ts";
import { runtimeMissing } from "../../localcluster/runtime.ts";
import { run } from "../../localcluster/exec.ts";
import { BUILD } from "../../src/cli/version.ts";
import { DEPLOY_DIR } from "../../scripts/render-manifests.ts";
import { shippedCommand } from "./shipped.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
const PROGRAMS = Object.entries(
  (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { bin: Record<string, string> }).bin,
);
/** The first line of a program's --help: node-lifecycle-controller also has a command (release-all). */
const usageLine = (program: string) =>
  new RegExp(`^Usage: ${program} ${program === "node-lifecycle-controller" ? "\\[command\\] " : ""}\\[flags\\]\\n`);
/** What `npm ci` makes in the build stage; here, this machine's own `npm ci` made them. */
const NPM_CI_OUTPUTS = ["node_modules", "native/sockets/build", "native/memory/build"];
const PINNED_NODE = (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
  devDependencies: { node: string };
}).devDependencies.node;

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

/** A folder's entries as image paths under `imagePath`, in the shape of a layer's listing. */
function listFolder(folder: string, imagePath: string): LayerEntry[] {
  return readdirSync(folder, { recursive: true, encoding: "utf8" }).map((relative) => {
    const stats = lstatSync(path.join(folder, relative));
    const type = stats.isDirectory() ? "directory" : stats.isSymbolicLink() ? "symlink" : "file";
    const size = type === "file" ? stats.size : 0;
    return { path: path.posix.join(imagePath, relative), type, mode: stats.mode & 0o7777, uid: 0, gid: 0, size };
  });
}

/** The runtime stage's ENV, USER, WORKDIR, ENTRYPOINT and CMD, as an image config. */
function dockerfileConfig(stage: Stage): ImageContents["config"]["config"] {
  const args = (instruction: string) =>
    stage.lines.filter((line) => line.startsWith(`${instruction} `)).map((line) => line.slice(instruction.length + 1));
  return {
    User: args("USER").at(-1),
    Env: args("ENV").flatMap((line) => line.trim().split(/\s+/)),
    WorkingDir: stage.workdir,
    Entrypoint: JSON.parse(args("ENTRYPOINT").at(-1) ?? "null") as string[],
    Cmd: JSON.parse(args("CMD").at(-1) ?? "null") as string[],
  };
}

describe("container image contents", () => {
  const dockerfile = readFileSync(path.join(ROOT, "Dockerfile"), "utf8");
  const [build, runtime] = parseStages(dockerfile) as [Stage, Stage];
  let temp: string;
  let image: string;
  let forget: () => void;
  /** A path of the image (or of the build stage) inside the folder that stands for it. */
  const inImage = (imagePath: string) => path.join(image, imagePath);
  /** A bundle that loads the sockets addon and uses netlink and ICMP once, placed in the image's dist/. */
  let addonsCheck: string;
  /** The runtime folder's /app before the test adds anything to it. */
  let replayed: LayerEntry[];

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
    replayed = listFolder(inImage("/app"), "/app");
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
      assert.match(to, /^\/app\/(dist\/|node_modules\/local-ccm-(sockets|memory)\/)/);
    }
  });

  for (const [program, bin] of PROGRAMS) {
    test(`${program}: --help prints usage and exits 0`, () => {
      const { code, stdout, stderr } = start(inImage(runtime.workdir), bin, ["--help"]);
      assert.equal(stderr, "");
      assert.equal(code, 0);
      assert.match(stdout, usageLine(program));
      assert.match(stdout, /--kubeconfig/);
    });

    test(`${program}: a bad flag is a one-line error and exit 2`, () => {
      const { code, stdout, stderr } = start(inImage(runtime.workdir), bin, ["--no-such-flag"]);
      assert.equal(code, 2);
      assert.equal(stdout, "");
      assert.equal(stderr, `${program}: unknown flag: --no-such-flag\n`);
    });
  }

  test("bundled code loads the addons from the image's node_modules: netlink and ICMP answer, pages released", () => {
    const { code, stdout, stderr } = start(inImage(runtime.workdir), addonsCheck, []);
    assert.equal(code, 0, stderr);
    const result = JSON.parse(stdout) as { icmp: { kind: string }; routeSource: string; pagesReleased: boolean };
    assert.equal(result.routeSource, "127.0.0.1");
    assert.deepEqual(result.icmp, { kind: "answered" });
    assert.equal(result.pagesReleased, true);
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

  describe("the image `npm run image` writes, without Docker", () => {
    let built: BuiltImage;
    let again: BuiltImage;
    let contents: ImageContents;
    let rootfs: string;
    const inLayer = (entries: LayerEntry[], app: boolean) =>
      entries.filter((entry) => (entry.path === "/app" || entry.path.startsWith("/app/")) === app);

    /**
     * `Entrypoint args…` in the extracted layer, chrooted, with the image's Env only, as `user` (default: its User),
     * with /proc mounted as a container has it (in a mount namespace of its own, gone when it ends).
     */
    function inImageRoot(args: string[], user = contents.config.config.User as string) {
      const { Env = [], Entrypoint = [] } = contents.config.config;
      const script = 'mount -t proc proc "$0/proc" && exec "$@"';
      const chroot = ["env", "-i", ...Env, "/usr/sbin/chroot", `--userspec=${user}`, rootfs, ...Entrypoint, ...args];
      const result = spawnSync("unshare", ["--mount", "--fork", "--", "sh", "-c", script, rootfs, ...chroot], {
        encoding: "utf8",
        timeout: 30_000,
      });
      // The host's chroot runs with the image's Env, and its ld.so cannot find the image's LD_PRELOAD library (it
      // exists inside only); node's own loads it (the addons test reads node's mappings).
      const stderr = result.stderr.replace(/^ERROR: ld\.so: object '[^']+' from LD_PRELOAD cannot be preloaded.*\n/gm, "");
      return { code: result.status, stdout: result.stdout, stderr };
    }

    before(async () => {
      built = await buildImage(path.join(temp, "image.tar"));
      again = await buildImage(path.join(temp, "again.tar"));
      const read = path.join(temp, "read");
      rootfs = path.join(temp, "rootfs");
      mkdirSync(read);
      mkdirSync(rootfs);
      contents = await readImageTarball(built.tarball, read);
      await run("tar", ["-xf", contents.layer, "-C", rootfs]);
      mkdirSync(path.join(rootfs, "proc"));
      await bundle(path.join(import.meta.dirname, "addons-fixture.ts"), path.join(rootfs, "app/dist/addons-check.cjs"));
    });

    test("same inputs, same image: two builds give the same digest and the same bytes", () => {
      assert.match(built.digest, /^sha256:[0-9a-f]{64}$/);
      assert.equal(again.digest, built.digest);
      assert.equal(contents.digest, built.digest);
      const hash = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");
      assert.equal(hash(again.tarball), hash(built.tarball));
    });

    test("named as the chart and deploy/ name the image, for containerd and for Docker", () => {
      const deployImages = new Set(
        readdirSync(DEPLOY_DIR)
          .filter((file) => file.endsWith(".yaml"))
          .map((file) => readFileSync(path.join(DEPLOY_DIR, file), "utf8"))
          .flatMap((manifest) => [...manifest.matchAll(/^\s+image: "?([^"\s]+)"?$/gm)])
          .map((match) => match[1]),
      );
      assert.deepEqual([...deployImages], [built.reference]);
      assert.deepEqual(contents.names, {
        containerd: built.reference,
        ociRefName: built.reference.split(":").at(-1),
        docker: [built.reference],
      });
    });

    test("its config is the Dockerfile runtime stage's: user, Env (node's folder on PATH), workdir, command", () => {
      assert.deepEqual(contents.config.config, dockerfileConfig(runtime));
      const searchPath = contents.config.config.Env?.find((pair) => pair.startsWith("PATH="));
      assert.equal(searchPath?.split(/[=:]/)[1], NODE_DIR);
      assert.equal(contents.config.architecture, "amd64");
    });

    test("/app holds exactly what the runtime stage COPYs, with the same modes", () => {
      // The replayed bundles name node_modules through the replay's symlink in their file comments: sizes differ.
      const shape = ({ path: file, type, mode, size }: LayerEntry) =>
        ({ path: file, type, mode, size: file.startsWith("/app/dist/") ? "bundle" : size });
      const byPath = (a: LayerEntry, b: LayerEntry) => (a.path < b.path ? -1 : 1);
      const replayedApp = [{ path: "/app", type: "directory", mode: 0o755, uid: 0, gid: 0, size: 0 }, ...replayed];
      assert.deepEqual(
        inLayer(contents.entries, true).sort(byPath).map(shape),
        (replayedApp as LayerEntry[]).sort(byPath).map(shape),
      );
      assert.ok(inLayer(contents.entries, true).every((entry) => entry.uid === 0 && entry.gid === 0));
    });

    test("outside /app, only what the distroless base gives: node, the libraries it loads, the users", () => {
      const outside = inLayer(contents.entries, false);
      const files = outside.filter((entry) => entry.type === "file").map((entry) => entry.path);
      const libraries = files.filter((file) => /^\/(usr\/)?lib(64|32)?\/([\w-]+\/)?[^/]+\.so(\.\d+)*$/.test(file));
      assert.deepEqual(files.filter((file) => !libraries.includes(file)).sort(), [
        "/etc/group",
        "/etc/passwd",
        `${NODE_DIR}/node`,
      ]);
      assert.ok(libraries.some((file) => /\/ld-linux[\w.-]*\.so\.\d$/.test(file)), `no dynamic loader: ${libraries}`);
      assert.ok(libraries.some((file) => file.endsWith("/libstdc++.so.6")), `no libstdc++: ${libraries}`);
      const folders = outside.filter((entry) => entry.type === "directory");
      const special = folders.filter((entry) => entry.mode !== 0o755 || entry.uid !== 0);
      assert.deepEqual(special, [
        { path: "/home/nonroot", type: "directory", mode: 0o700, uid: 65532, gid: 65532, size: 0 },
        { path: "/tmp", type: "directory", mode: 0o1777, uid: 0, gid: 0, size: 0 },
      ]);
      assert.equal(outside.filter((entry) => entry.type === "symlink").length, 0);
      const passwd = readFileSync(path.join(rootfs, "etc/passwd"), "utf8");
      assert.match(passwd, /^nonroot:x:65532:65532:nonroot:\/home\/nonroot:/m);
      assert.match(readFileSync(path.join(rootfs, "etc/group"), "utf8"), /^nonroot:x:65532:$/m);
    });

    test("node is the pinned official binary and runs from the image's own libraries as nonroot (65532)", () => {
      const { code, stdout, stderr } = inImageRoot([
        "-p",
        "[process.version, process.getuid(), process.getgid(), require('node:os').userInfo().username].join(' ')",
      ]);
      assert.equal(code, 0, stderr);
      assert.equal(stdout, `v${PINNED_NODE} 65532 65532 nonroot\n`);
    });

    for (const [program, bin] of PROGRAMS) {
      test(`${program}: the shipped command starts in the image; --help exits 0, a bad flag exits 2`, () => {
        const { nodeArgs, script } = shippedCommand(program);
        const help = inImageRoot([...nodeArgs, path.posix.join("/app", bin), "--help"]);
        assert.equal(help.code, 0, help.stderr);
        assert.match(help.stdout, usageLine(program));
        assert.equal(script, path.posix.join("/app", bin));
        const bad = inImageRoot([...nodeArgs, script, "--no-such-flag"]);
        assert.deepEqual(bad, { code: 2, stdout: "", stderr: `${program}: unknown flag: --no-such-flag\n` });
        // The bundle names the commit it was built from, which is this checkout's.
        const head = execFileSync("git", ["rev-parse", "HEAD"], { encoding: "utf8" }).trim();
        const version = inImageRoot([...nodeArgs, script, "--version"]);
        assert.deepEqual(version, {
          code: 0,
          stdout: `${program} ${BUILD.version} (revision ${head}, node ${PINNED_NODE})\n`,
          stderr: "",
        });
      });
    }

    test("the addons load in the image, node preloads its library: netlink answers; ICMP with CAP_NET_RAW (root)", () => {
      const asRoot = inImageRoot(["/app/dist/addons-check.cjs"], "0:0");
      assert.equal(asRoot.code, 0, asRoot.stderr);
      assert.deepEqual(JSON.parse(asRoot.stdout), {
        icmp: { kind: "answered" },
        routeSource: "127.0.0.1",
        pagesReleased: true,
        preloaded: true,
      });
      // Without capabilities the addon still loads; whether the kernel grants a ping socket is its own business.
      const asNonroot = inImageRoot(["--jitless", "/app/dist/addons-check.cjs"]);
      assert.equal(asNonroot.code, 0, asNonroot.stderr);
      const { icmp, routeSource } = JSON.parse(asNonroot.stdout) as { icmp: { reason?: string }; routeSource: string };
      assert.equal(routeSource, "127.0.0.1");
      assert.doesNotMatch(icmp.reason ?? "", /addon not built/);
    });

    test("containerd imports and unpacks it under the chart's reference, with the same digest", async () => {
      const missing = runtimeMissing();
      assert.equal(missing, undefined, missing);
      const containerd = await startContainerd({ dir: path.join(temp, "containerd") });
      try {
        await containerd.ctr(["-n", "k8s.io", "images", "import", built.tarball]);
        const images = await containerd.ctr(["-n", "k8s.io", "images", "check"]);
        const line = images.split("\n").find((row) => row.startsWith(`${built.reference} `));
        assert.ok(line, images);
        assert.match(line, new RegExp(` ${built.digest} +complete \\(2/2\\) .* true *$`));
      } finally {
        await containerd.stop();
      }
    });
  });
});
