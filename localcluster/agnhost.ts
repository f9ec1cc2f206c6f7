// The upstream e2e test image registry.k8s.io/e2e-test-images/agnhost, built here (there is no registry to
// pull it from) and imported on every node under that exact reference, so manifests written for upstream's
// e2e tests run unchanged: `agnhost netexec` answers /hostname, /clientip, /dial… on 8080.
// The binary is test/images/agnhost of the pinned k8s.io/kubernetes module (build.ts, static: CGO off); the
// image holds it as upstream's Dockerfile lays it out (/agnhost, the /agnhost-2 link, /uploads for netexec)
// without upstream's alpine base and its tools (curl, dig, iperf), which only other subcommands call.
import { existsSync } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import { writeImageTarball } from "./oci-image.ts";
import { CACHE_DIR, ensureBinaries, kubernetesModule } from "./build.ts";
import { AGNHOST_VERSION, KUBERNETES_VERSION } from "./versions.ts";

export const AGNHOST_IMAGE = `registry.k8s.io/e2e-test-images/agnhost:${AGNHOST_VERSION}`;

/** The image tarball for `ctr images import`, built once per agnhost and Kubernetes version. */
export async function ensureAgnhostImage(): Promise<string> {
  const dir = path.join(CACHE_DIR, `agnhost-${AGNHOST_VERSION}-${KUBERNETES_VERSION}`);
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
      ],
      config: { Entrypoint: ["/agnhost"], Cmd: ["pause"] },
    },
    tarball,
  );
  return tarball;
}
