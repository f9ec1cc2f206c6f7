// The FRR image MetalLB's FRR mode runs beside its speaker (metallb.ts), made from this machine's Debian packages:
// no registry is reachable for quay.io/frrouting/frr, the image its chart names. Laid out as FRR's own image
// (docker/alpine in FRR's repository): tini as /sbin/tini, /usr/lib/frr/docker-start starting watchfrr over the
// daemons /etc/frr/daemons enables, the user frr as 100:101 (the chart's cp-frr-files init container runs as those).
// The chart runs it as one init container and three containers; the image holds what they run, and no more:
// - cp-frr-files: /bin/sh and cp;
// - frr: docker-start, frrcommon.sh and watchfrr.sh (bash, with the tools they call), watchfrr and the daemons MetalLB's
//   liveness check wants running (zebra, bgpd, bfdd, staticd), vtysh (the daemons' `vtysh -b`);
// - reloader: MetalLB's frr-reloader.sh (bash, flock, sed, date, sleep, rm, touch) and frr-reload.py under Debian's
//   python3 with only the standard modules it loads, compiled;
// - frr-metrics: vtysh (its program comes from the speaker's image, copied out by an init container).
// As image.ts does, each file goes where it is called (a shebang, PATH) with its real file's content, and with the
// shared libraries and the loader at the paths ldd names. Built once per Debian frr version, the image's tag.
import { execFileSync } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { CACHE_DIR } from "./build.ts";
import { run } from "./exec.ts";
import { sharedLibraries } from "./image.ts";
import { type ImageFile, writeImageTarball } from "./oci-image.ts";

/** Debian's packages the image is made from, each by a file of it. */
const PACKAGES = {
  frr: "/usr/lib/frr/bgpd",
  "frr-pythontools": "/usr/lib/frr/frr-reload.py",
  tini: "/usr/bin/tini",
};

const FRR = "/usr/lib/frr";

/** Host files the image holds at the same path. */
const FILES = [
  ...["watchfrr", "zebra", "bgpd", "bfdd", "staticd"].map((daemon) => `${FRR}/${daemon}`),
  ...["frrcommon.sh", "watchfrr.sh", "frr-reload.py"].map((script) => `${FRR}/${script}`),
  "/usr/bin/vtysh",
  "/usr/bin/python3",
  ...["cat", "cp", "date", "dirname", "flock", "grep", "rm", "sed", "sleep", "touch"].map((tool) => `/usr/bin/${tool}`),
];

/** Path in the image → the host file it copies, where they differ. */
const MOVED = {
  "/sbin/tini": "/usr/bin/tini",
  // One shell for /bin/sh and the scripts' bash.
  "/bin/bash": "/usr/bin/bash",
  "/bin/sh": "/usr/bin/bash",
};

/** FRR's docker/alpine/docker-start: watchfrr in the foreground starts the daemons /etc/frr/daemons enables. */
const DOCKER_START = `#!/bin/bash
log_success_msg() { echo "$@"; }
log_warning_msg() { echo "$@" >&2; }
log_failure_msg() { echo "$@" >&2; }
source ${FRR}/frrcommon.sh
${FRR}/watchfrr $(daemon_list)
`;

/**
 * Given a folder, prints the files of the modules Debian's python3 loads to start and to run frr-reload.py (`--help`:
 * the script imports all it uses at its top) as [path in the image, host file] pairs, each source with its bytecode
 * compiled into the folder. Unchecked-hash bytecode: the layer's mtimes are 0, so the sources' usual timestamped
 * bytecode would be stale, and each reload would compile every module again (a quarter of a CPU second).
 */
const LOADED_MODULES = `
import contextlib, io, json, runpy, sys
into = sys.argv[1]
sys.argv = ["${FRR}/frr-reload.py", "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit:
        pass
sources = sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})
import importlib.util, py_compile  # the build's, after the count
files = []
for source in sources:
    files.append([source, source])
    if source.endswith(".py"):
        cached = importlib.util.cache_from_source(source)
        mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
        py_compile.compile(source, cfile=into + cached, doraise=True, invalidation_mode=mode)
        files.append([cached, into + cached])
print(json.dumps(files))
`;

export interface FrrImage {
  tarball: string;
  repository: string;
  tag: string;
}

/** The image's tarball for `ctr images import`, built once per Debian frr version. */
export async function ensureFrrImage(): Promise<FrrImage> {
  const missing = Object.entries(PACKAGES).filter(([, file]) => !existsSync(file));
  if (missing.length) {
    const names = missing.map(([name]) => name).join(" ");
    throw new Error(`MetalLB's FRR image is made from Debian's packages: apt-get install -y ${names}`);
  }
  const version = (await run("dpkg-query", ["--showformat=${Version}", "--show", "frr"])).trim();
  const image = { repository: "localhost/frr", tag: version.replace(/[^\w.-]/g, "_") };
  const tarball = path.join(CACHE_DIR, `frr-image-${image.tag}`, "frr.tar");
  if (!existsSync(tarball)) {
    await mkdir(path.dirname(tarball), { recursive: true });
    const config = { Entrypoint: ["/sbin/tini", "--"], Cmd: [`${FRR}/docker-start`], Env: ["PATH=/usr/bin:/bin"] };
    const files = await imageFiles(path.join(path.dirname(tarball), "python"));
    await writeImageTarball({ reference: `${image.repository}:${image.tag}`, files, config }, tarball);
  }
  return { tarball, ...image };
}

/** The host's files with the libraries they link, and the image's own; python's bytecode compiled into `python`. */
async function imageFiles(python: string): Promise<ImageFile[]> {
  const listed = await run("/usr/bin/python3", ["-c", LOADED_MODULES, python], { env: {} });
  const modules = JSON.parse(listed) as [string, string][];
  const pamPermit = (await run("dpkg", ["-L", "libpam-modules"])).split("\n").find((f) => f.endsWith("/pam_permit.so"));
  if (!pamPermit) throw new Error("libpam-modules has no pam_permit.so");
  const copies = new Map([...FILES, pamPermit].map((file) => [file, file]));
  for (const [where, host] of [...Object.entries(MOVED), ...modules]) copies.set(where, host);
  for (const library of sharedLibraries([...copies.values()].filter(isElf))) copies.set(library, library);
  return [...[...copies].map(([where, host]) => ({ path: where, source: realpathSync(host) })), ...ownFiles()];
}

/** What is the image's own, not a copy of a host file. */
function ownFiles(): ImageFile[] {
  return [
    { path: `${FRR}/docker-start`, content: DOCKER_START, mode: 0o755 },
    { path: "/etc/passwd", content: "root:x:0:0:root:/root:/bin/bash\nfrr:x:100:101:frr:/var/run/frr:/bin/false\n" },
    { path: "/etc/group", content: "root:x:0:\nfrr:x:101:frr\nfrrvty:x:102:frr\n" },
    // Debian's vtysh asks PAM (FRR's image's is built without): anyone may run it, as Debian's /etc/pam.d/frr says;
    // the vty sockets' owners decide who reaches the daemons.
    { path: "/etc/pam.d/frr", content: "auth sufficient pam_permit.so\naccount sufficient pam_permit.so\n" },
    // The chart mounts its volumes here; cp-frr-files finds the startup files in /tmp.
    ...["/etc/frr", "/var/run/frr", "/var/tmp/frr", "/var/lib/frr", "/var/log/frr"].map((dir) => ({
      path: dir,
      directory: true as const,
    })),
    { path: "/tmp", directory: true, mode: 0o1777 },
  ];
}

function isElf(file: string): boolean {
  return execFileSync("head", ["-c", "4", file], { encoding: "latin1" }) === "\x7fELF";
}

