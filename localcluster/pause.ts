// The pause image every pod sandbox starts from, built here (there is no registry to pull it from):
// upstream's build/pause/linux/pause.c from the pinned k8s.io/kubernetes module, compiled statically
// as upstream's Makefile does, in a one-file image. Cached by Kubernetes version beside the binaries.
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { writeImageTarball } from "./oci-image.ts";
import { CACHE_DIR, kubernetesModule } from "./build.ts";
import { run } from "./exec.ts";
import { KUBERNETES_VERSION } from "./versions.ts";

/** The name containerd's `sandbox_image` points at; localhost/ says it comes from no registry. */
export const PAUSE_IMAGE = `localhost/pause:${KUBERNETES_VERSION}`;

export async function ensurePauseImage(): Promise<string> {
  const dir = path.join(CACHE_DIR, `pause-${KUBERNETES_VERSION}`);
  const tarball = path.join(dir, "pause.tar");
  if (existsSync(tarball)) return tarball;
  await mkdir(dir, { recursive: true });
  console.error(`localcluster: building the pause image from k8s.io/kubernetes ${KUBERNETES_VERSION}'s pause.c`);
  const module = await kubernetesModule();
  const binary = path.join(dir, "pause");
  const source = path.join(module.Dir, "build/pause/linux/pause.c");
  await run("gcc", ["-Os", "-Wall", "-Werror", "-static", `-DVERSION=${KUBERNETES_VERSION}`, "-o", binary, source]);
  await writeImageTarball(
    {
      reference: PAUSE_IMAGE,
      files: [{ path: "/pause", source: binary, mode: 0o755 }],
      // As upstream's image: nobody's uid, so a sandbox never runs as root.
      config: { Entrypoint: ["/pause"], User: "65535:65535" },
    },
    tarball,
  );
  return tarball;
}
