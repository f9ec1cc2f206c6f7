// The upstream e2e test image registry.k8s.io/e2e-test-images/agnhost, built here (there is no registry to
// pull it from) and imported on every node under that exact reference, so manifests written for upstream's
// e2e tests run unchanged: `agnhost netexec` answers /hostname, /clientip, /dial… on 8080.
// The binary is test/images/agnhost of the pinned k8s.io/kubernetes module (build.ts, static: CGO off); the
// image holds it as upstream's Dockerfile lays it out (/agnhost, the /agnhost-2 link, /uploads for netexec)
// without upstream's alpine base, but with the tools upstream's e2e tests exec in agnhost pods (TOOLS).
import { existsSync, realpathSync } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import { run } from "./exec.ts";
import { type ImageFile, writeImageTarball } from "./oci-image.ts";
import { CACHE_DIR, ensureBinaries, kubernetesModule } from "./build.ts";
import { AGNHOST_VERSION, KUBERNETES_VERSION } from "./versions.ts";

export const AGNHOST_IMAGE = `registry.k8s.io/e2e-test-images/agnhost:${AGNHOST_VERSION}`;

/**
 * What upstream's e2e tests run in agnhost pods (`/bin/sh -x -c`, `nc -v -t|-u -w 2`, `curl -q -s`, `wget -T 5
 * -qO-`), which upstream's image takes from its alpine base: here this machine's binaries (runtime.ts installs
 * them), image path → host path. The PATH is alpine's.
 */
const TOOLS: Record<string, string> = {
  "/bin/sh": "/bin/dash",
  "/usr/bin/nc": "/bin/nc.openbsd",
  "/usr/bin/curl": "/usr/bin/curl",
  "/usr/bin/wget": "/usr/bin/wget",
};
const PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** The tools and every shared library `ldd` names for them (the loader included), each at its host path. */
async function toolFiles(): Promise<ImageFile[]> {
  const libraries = new Set<string>();
  for (const host of Object.values(TOOLS)) {
    for (const match of (await run("ldd", [host])).matchAll(/(\/\S+) \(0x/g)) libraries.add(match[1] as string);
  }
  return [
    ...Object.entries(TOOLS).map(([image, host]) => ({ path: image, source: realpathSync(host), mode: 0o755 })),
    ...[...libraries].sort().map((library) => ({ path: library, source: realpathSync(library), mode: 0o755 })),
  ];
}

/** The image tarball for `ctr images import`, built once per agnhost and Kubernetes version. */
export async function ensureAgnhostImage(): Promise<string> {
  // "-tools": images cached before TOOLS lack them.
  const dir = path.join(CACHE_DIR, `agnhost-${AGNHOST_VERSION}-${KUBERNETES_VERSION}-tools`);
  const tarball = path.join(dir, "agnhost.tar");
  if (existsSync(tarball)) return tarball;
  // The tag must say which agnhost it is: a version bump of either pin without the other fails here.
  const module = await kubernetesModule();
  const version = (await readFile(path.join(module.Dir, "test/images/agnhost/VERSION"), "utf8")).trim();
  if (version !== AGNHOST_VERSION)
    throw new Error(
      `k8s.io/kubernetes ${KUBERNETES_VERSION} has agnhost ${version}; versions.ts pins ${AGNHOST_VERSION}`,
    );
  const { agnhost } = await ensureBinaries();
  await mkdir(dir, { recursive: true });
  console.error(`localcluster: building the image ${AGNHOST_IMAGE}`);
  await writeImageTarball(
    {
      reference: AGNHOST_IMAGE,
      files: [
        { path: "/agnhost", source: agnhost, mode: 0o755 },
        { path: "/agnhost-2", symlink: "agnhost" },
        { path: "/uploads", directory: true },
        { path: "/tmp", directory: true, mode: 0o1777 },
        ...(await toolFiles()),
        // Alpine's wget (busybox's) tries once; GNU wget retries 20 times, past the bounds of the tests' own retries.
        { path: "/etc/wgetrc", content: "tries = 1\n" },
      ],
      config: { Entrypoint: ["/agnhost"], Cmd: ["pause"], Env: [PATH_ENV] },
    },
    tarball,
  );
  return tarball;
}

/** The port `netexecBackends` serve on, as upstream's e2e tests run netexec. */
export const NETEXEC_PORT = 8080;

/**
 * The backend of the local cluster's Service tests, as upstream's e2e tests run one: a Deployment "netexec" in
 * "default" (pods labelled app=netexec) of agnhost netexec on NETEXEC_PORT, at most one replica per node; only on
 * the nodes `nodeSelector` selects, if given.
 */
export function netexecBackends(replicas: number, nodeSelector?: Record<string, string>) {
  const labels = { app: "netexec" };
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "netexec", namespace: "default" },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          topologySpreadConstraints: [
            {
              maxSkew: 1,
              topologyKey: "kubernetes.io/hostname",
              whenUnsatisfiable: "DoNotSchedule",
              labelSelector: { matchLabels: labels },
            },
          ],
          ...(nodeSelector ? { nodeSelector } : {}),
          // The image's entrypoint is /agnhost.
          containers: [{ name: "netexec", image: AGNHOST_IMAGE, args: ["netexec", `--http-port=${NETEXEC_PORT}`] }],
        },
      },
    },
  };
}
