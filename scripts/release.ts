// Publishes a release: what .github/workflows/release.yml runs on a tag (to ghcr.io, both platforms' image from
// Docker Buildx) and test/deploy/release.test.ts runs against a registry on this machine (`npm run image`'s image),
// so the test exercises the workflow's own commands.
//
//   node scripts/release.ts --tag v0.1.0 --image-archive image.tar [--repository registry/owner/local-ccm]
//
// 1. The tag, the chart's version and its appVersion agree; else one line, exit 1, nothing pushed.
// 2. The image archive (an OCI image layout as a tarball) goes to <repository>:<version> with skopeo, every
//    platform it holds. The repository is values.yaml's image.repository unless given, so the chart published
//    with it names this image unchanged.
// 3. The chart, packaged by helm, goes to oci://<the repository's registry and owner>/charts/local-ccm.
// helm and skopeo come from PATH, and so do their logins (helm registry login; skopeo reads Docker's config, which
// docker/login-action writes) and their trust (the system's CAs, or SSL_CERT_FILE).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { parse } from "yaml";
import { CHART_DIR } from "../localcluster/chart.ts";
import { run } from "../localcluster/exec.ts";

export interface ReleaseReferences {
  version: string;
  /** Where the image goes: <repository>:<version>. */
  image: string;
  /** Where `helm push` sends the chart: oci://<registry>/<owner>/charts. */
  charts: string;
  /** What users install: <charts>/local-ccm, with --version <version>. */
  chart: string;
}

/** The chart's name, version, appVersion and values.yaml's image.repository, as committed. */
export function chartRelease(): { name: string; version: string; appVersion: string; repository: string } {
  const chart = parse(readFileSync(path.join(CHART_DIR, "Chart.yaml"), "utf8")) as {
    name: string;
    version: string;
    appVersion: string;
  };
  const values = parse(readFileSync(path.join(CHART_DIR, "values.yaml"), "utf8")) as {
    image: { repository: string };
  };
  return { name: chart.name, version: chart.version, appVersion: chart.appVersion, repository: values.image.repository };
}

/**
 * The references a release tag publishes, or a one-line error when the tag is not v<chart version> or the
 * chart's appVersion differs (the image is tagged with the version, and the chart pulls its appVersion).
 */
export function releaseReferences(tag: string, repository = chartRelease().repository): ReleaseReferences {
  const { name, version, appVersion } = chartRelease();
  if (tag !== `v${version}` || appVersion !== version)
    throw new Error(`tag ${tag}: Chart.yaml has version ${version}, appVersion ${appVersion}; the tag must be v<both>`);
  if (!/^[^/]+\/.+\/[^/]+$/.test(repository))
    throw new Error(`repository ${repository}: want <registry>/<owner>/<name>`);
  const charts = `oci://${repository.replace(/\/[^/]+$/, "")}/charts`;
  return { version, image: `${repository}:${version}`, charts, chart: `${charts}/${name}` };
}

export interface Published extends ReleaseReferences {
  /** The digest of what the image reference now names (a manifest, or an index of several). */
  imageDigest: string;
  /** The digest of the chart's OCI manifest, as `helm push` reports it. */
  chartDigest: string;
}

/** Steps 2 and 3 of the header (releaseReferences() first checked step 1). */
export async function publish(references: ReleaseReferences, imageArchive: string): Promise<Published> {
  const work = mkdtempSync(path.join(os.tmpdir(), "local-ccm-release-"));
  try {
    const digestFile = path.join(work, "image.digest");
    await run("skopeo", [
      "copy",
      "--all",
      "--digestfile",
      digestFile,
      `oci-archive:${path.resolve(imageArchive)}`,
      `docker://${references.image}`,
    ]);
    const imageDigest = readFileSync(digestFile, "utf8").trim();
    await run("helm", ["package", CHART_DIR, "--destination", work]);
    const packaged = path.join(work, `${chartRelease().name}-${references.version}.tgz`);
    // helm prints "Pushed: …" and "Digest: sha256:…" on stderr; its stdout stays empty.
    const pushed = await runBoth("helm", ["push", packaged, references.charts]);
    const chartDigest = /^Digest: (sha256:[0-9a-f]{64})$/m.exec(pushed)?.[1];
    if (!chartDigest) throw new Error(`helm push reported no digest: ${pushed.trim()}`);
    return { ...references, imageDigest, chartDigest };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** A command's stdout and stderr together (run() keeps only stdout). */
function runBoth(command: string, args: string[]): Promise<string> {
  return run("sh", ["-c", '"$@" 2>&1', "sh", command, ...args]);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      tag: { type: "string" },
      "image-archive": { type: "string" },
      repository: { type: "string" },
    },
  });
  if (!values.tag || !values["image-archive"])
    throw new Error("usage: node scripts/release.ts --tag vX.Y.Z --image-archive FILE [--repository R/OWNER/NAME]");
  const published = await publish(releaseReferences(values.tag, values.repository), values["image-archive"]);
  console.log(`image ${published.image}@${published.imageDigest}`);
  console.log(`chart ${published.chart} --version ${published.version} (${published.chartDigest})`);
}

if (import.meta.main) {
  await main().catch((err: unknown) => {
    console.error(`release: ${(err as Error).message}`);
    process.exitCode = 1;
  });
}
