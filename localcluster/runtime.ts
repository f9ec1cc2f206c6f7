// The container runtime the cluster's nodes run on: Debian's containerd, runc and CNI plugins.
// `ensureRuntime()` installs what is missing when it can (root on Debian/Ubuntu: apt-get, printing
// what it installs) and otherwise fails with one line naming what is needed; `npm test`'s pretest
// and `npm start` call it, so both work on a fresh machine.
import { existsSync } from "node:fs";
import { run } from "./exec.ts";

/** A Debian package and the files of it the cluster uses (its presence means the package is there). */
interface RuntimePackage {
  name: string;
  files: string[];
}

/** Where Debian's containernetworking-plugins puts the CNI plugins. */
export const CNI_BIN_DIR = "/usr/lib/cni";

const PACKAGES: RuntimePackage[] = [
  { name: "containerd", files: ["/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2"] },
  { name: "runc", files: ["/usr/sbin/runc"] },
  {
    name: "containernetworking-plugins",
    files: ["bridge", "host-local", "loopback"].map((plugin) => `${CNI_BIN_DIR}/${plugin}`),
  },
  // kube-proxy's two modes: iptables (Debian's is the nf_tables backend) and nftables, which runs `nft`.
  { name: "iptables", files: ["/usr/sbin/iptables", "/usr/sbin/xtables-nft-multi"] },
  { name: "nftables", files: ["/usr/sbin/nft"] },
  // The pause image is compiled here from upstream's pause.c, statically.
  { name: "gcc", files: ["/usr/bin/gcc"] },
  { name: "libc6-dev", files: ["/usr/include/stdio.h"] },
  // The tools upstream's e2e tests exec in agnhost pods, copied into that image (agnhost.ts).
  { name: "dash", files: ["/bin/dash"] },
  { name: "netcat-openbsd", files: ["/bin/nc.openbsd"] },
  { name: "curl", files: ["/usr/bin/curl"] },
  { name: "wget", files: ["/usr/bin/wget"] },
  // Not the cluster's: the real BGP routers test/bgp/ peers our speaker with, in network namespaces.
  { name: "gobgpd", files: ["/usr/bin/gobgpd", "/usr/bin/gobgp"] },
  { name: "frr", files: ["/usr/lib/frr/bgpd", "/usr/bin/vtysh"] },
  // Not the cluster's: bench:bgp makes MetalLB's FRR image from them and frr (frr-image.ts).
  { name: "frr-pythontools", files: ["/usr/lib/frr/frr-reload.py"] },
  { name: "tini", files: ["/usr/bin/tini"] },
  // Not the cluster's: test/docs/router-examples.test.ts has BIRD parse the router configuration docs/bgp.md gives.
  { name: "bird2", files: ["/usr/sbin/bird"] },
  // Not the cluster's: test/ci/workflows.test.ts has actionlint check the workflows' run: scripts with it, and
  // npm test must work on a fresh machine.
  { name: "shellcheck", files: ["/usr/bin/shellcheck"] },
  // Not the cluster's either: the release script pushes the image archive with it, here as on GitHub's runners
  // (test/deploy/release.test.ts); its dependencies bring the trust policy it reads, /etc/containers/policy.json.
  { name: "skopeo", files: ["/usr/bin/skopeo", "/etc/containers/policy.json"] },
];

/** The packages of which a file is missing. */
export function missingRuntimePackages(exists: (file: string) => boolean = existsSync): string[] {
  return PACKAGES.filter((pkg) => !pkg.files.every(exists)).map((pkg) => pkg.name);
}

/** The one line that says what to install, or undefined when nothing is missing. */
export function runtimeMissing(): string | undefined {
  const missing = missingRuntimePackages();
  if (missing.length === 0) return undefined;
  const packages = missing.join(" ");
  return `the local cluster needs ${packages}: run as root on Debian/Ubuntu, or apt-get install -y ${packages}`;
}

function canInstall(): boolean {
  return process.getuid?.() === 0 && existsSync("/usr/bin/apt-get") && existsSync("/usr/bin/dpkg");
}

/** Installs the missing packages with apt-get where it can; else throws the one line of runtimeMissing(). */
export async function ensureRuntime(): Promise<void> {
  const missing = missingRuntimePackages();
  if (missing.length === 0) return;
  if (!canInstall()) throw new Error(runtimeMissing());
  console.error(`localcluster: installing ${missing.join(", ")} (apt-get)`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  await run("apt-get", ["update", "-qq"], { env });
  await run("apt-get", ["install", "-y", "-qq", "--no-install-recommends", ...missing], { env });
  const still = missingRuntimePackages();
  if (still.length > 0)
    throw new Error(`apt-get installed ${missing.join(", ")} but ${still.join(", ")} is still missing`);
}
