// The product image as a tarball, without Docker, for `ctr images import` and `docker load` (`npm run image`,
// scripts/image.ts, and every local cluster's nodes).
// It holds what the Dockerfile's runtime image holds, in the same places:
// - from the base (gcr.io/distroless/nodejs24-debian12:nonroot): the official Node 24 binary at /nodejs/bin/node
//   (here: the pinned `node` devDependency's binary), the shared libraries it and the addons link (this Debian
//   machine's, at the paths `ldd` finds them, with the dynamic loader), /etc/passwd and /etc/group with nonroot
//   (65532), its home and /tmp;
// - what the runtime stage COPYs: the bundles and the native addons (APP_FILES, below).
// test/deploy/image.test.ts proves both layouts hold the same files, and that the image runs as 65532.
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, realpathSync, rmSync } from "node:fs";
import path from "node:path";
import { bundleProgram } from "./bundle.ts";
import { chartImageReference } from "./chart.ts";
import { alive } from "./exec.ts";
import { type ImageConfig, type ImageFile, writeImageTarball } from "./oci-image.ts";

const ROOT = path.resolve(import.meta.dirname, "..");
const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
  bin: Record<string, string>;
  devDependencies: Record<string, string>;
};

/** Where the distroless base keeps node; the Dockerfile's PATH names this folder too. */
export const NODE_DIR = "/nodejs/bin";

/** native/memory's preload library as built here, and where the image keeps it: the image's LD_PRELOAD names it. */
export const READAHEAD_PRELOAD = {
  from: "native/memory/build/Release/random_readahead.so",
  to: "/app/node_modules/local-ccm-memory/build/Release/random_readahead.so",
} as const;

/** The image config, as the Dockerfile's runtime stage sets it. */
export const IMAGE_CONFIG: ImageConfig = {
  User: "65532:65532",
  Env: [
    "NODE_ENV=production",
    `PATH=${NODE_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
    `LD_PRELOAD=${READAHEAD_PRELOAD.to}`,
  ],
  WorkingDir: "/app",
  Entrypoint: ["node"],
  Cmd: ["/app/dist/local-ccm.cjs", "--help"],
};

/**
 * The runtime stage's COPY lines: a file or a folder (ending in "/") of the build stage — the repository after
 * `npm ci` and `npm run build` — and where it goes. dist/ is bundled afresh for each image.
 */
export const APP_FILES: readonly { from: string; to: string }[] = [
  { from: "dist/", to: "/app/dist/" },
  { from: "native/sockets/package.json", to: "/app/node_modules/local-ccm-sockets/package.json" },
  {
    from: "native/sockets/build/Release/sockets.node",
    to: "/app/node_modules/local-ccm-sockets/build/Release/sockets.node",
  },
  { from: "native/memory/package.json", to: "/app/node_modules/local-ccm-memory/package.json" },
  {
    from: "native/memory/build/Release/memory.node",
    to: "/app/node_modules/local-ccm-memory/build/Release/memory.node",
  },
  READAHEAD_PRELOAD,
];

const NONROOT = 65532;
const PASSWD = [
  "root:x:0:0:root:/root:/sbin/nologin",
  "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin",
  `nonroot:x:${NONROOT}:${NONROOT}:nonroot:/home/nonroot:/sbin/nologin`,
];
const GROUP = ["root:x:0:", "nobody:x:65534:", `nonroot:x:${NONROOT}:`];

export interface BuiltImage {
  tarball: string;
  reference: string;
  digest: string;
}

/** Bundles the programs and writes the image tarball (default: .cache/image/local-ccm-<tag>.tar). */
export async function buildImage(out?: string): Promise<BuiltImage> {
  const reference = chartImageReference();
  const tarball = out ?? path.join(ROOT, ".cache/image", `local-ccm-${reference.split(":").at(-1)}.tar`);
  mkdirSync(path.dirname(tarball), { recursive: true });
  // Beside the tarball and named after this process: test files that each start a cluster build at the
  // same time (npm test runs two files at once); the last rename wins, with the same bytes (reproducible).
  // What killed builds left never outlives the next build.
  removeDeadBuilds(tarball);
  const staging = `${tarball}.${process.pid}.staging`;
  try {
    for (const program of Object.keys(PACKAGE.bin)) await bundleProgram(program, path.join(staging, "dist"));
    const files = [...baseFiles(), ...appFiles((from) => (from === "dist/" ? path.join(staging, from) : from))];
    const { digest } = await writeImageTarball({ reference, files, config: IMAGE_CONFIG }, tarball);
    return { tarball, reference, digest };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** Removes `<tarball>.<pid>.*` (staging folders, partial files) of builds whose process is gone. */
function removeDeadBuilds(tarball: string): void {
  const prefix = `${path.basename(tarball)}.`;
  for (const name of readdirSync(path.dirname(tarball))) {
    const pid = name.startsWith(prefix) ? Number(name.slice(prefix.length).split(".")[0]) : NaN;
    if (Number.isInteger(pid) && !alive(pid))
      rmSync(path.join(path.dirname(tarball), name), { recursive: true, force: true });
  }
}

/** What the base image provides: node, the libraries it and the addons link, the users. */
export function baseFiles(): ImageFile[] {
  const node = nodeBinary();
  const native = APP_FILES.filter(({ from }) => /\.(node|so)$/.test(from)).map(({ from }) => path.join(ROOT, from));
  return [
    { path: path.posix.join(NODE_DIR, "node"), source: node, mode: 0o755 },
    ...sharedLibraries([node, ...native]).map((library) => ({ path: library, source: realpathSync(library) })),
    { path: "/etc/passwd", content: `${PASSWD.join("\n")}\n` },
    { path: "/etc/group", content: `${GROUP.join("\n")}\n` },
    { path: "/home/nonroot", directory: true, mode: 0o700, uid: NONROOT, gid: NONROOT },
    { path: "/tmp", directory: true, mode: 0o1777 },
  ];
}

/** The runtime stage's COPY lines as image files; `locate` maps a build-stage path to where it is here. */
export function appFiles(locate: (from: string) => string = (from) => from): ImageFile[] {
  return APP_FILES.flatMap(({ from, to }) =>
    from.endsWith("/")
      ? folderFiles(path.resolve(ROOT, locate(from)), to)
      : [{ path: to, source: path.resolve(ROOT, locate(from)) }],
  );
}

/** A folder's files and subfolders under `to`, as Docker's COPY of a folder places them. */
function folderFiles(folder: string, to: string): ImageFile[] {
  return readdirSync(folder, { withFileTypes: true, recursive: true }).map((entry) => {
    const source = path.join(entry.parentPath, entry.name);
    const imagePath = path.posix.join(to, path.relative(folder, source));
    if (entry.isDirectory()) return { path: imagePath, directory: true };
    if (!entry.isFile()) throw new Error(`${source}: only files and folders go into the image`);
    return { path: imagePath, source };
  });
}

/** The pinned `node` devDependency's binary, checked to be that version (npm installs it under node_modules/node). */
function nodeBinary(): string {
  const binary = path.join(ROOT, "node_modules/node/bin/node");
  const version = execFileSync(binary, ["--version"], { encoding: "utf8" }).trim();
  if (version !== `v${PACKAGE.devDependencies.node}`) {
    throw new Error(`${binary} is ${version}, package.json pins node ${PACKAGE.devDependencies.node}: run npm ci`);
  }
  return binary;
}

/** The shared libraries and the dynamic loader the given ELF files need, at the paths the loader finds them. */
export function sharedLibraries(files: string[]): string[] {
  const libraries = new Set<string>();
  for (const file of files) {
    for (const line of execFileSync("ldd", [file], { encoding: "utf8" }).split("\n")) {
      // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
      const match = /^\s*(?:\S+ => )?(\/\S+) \(0x[0-9a-f]+\)$/.exec(line);
      if (match) libraries.add(match[1] as string);
      else if (/not found/.test(line)) throw new Error(`${file}: ${line.trim()}`);
    }
  }
  return [...libraries].sort();
}
