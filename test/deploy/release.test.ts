// The release path as users meet it. scripts/release.ts, the commands .github/workflows/release.yml runs on a tag,
// publishes the chart and the image to a real OCI registry on this machine (localcluster/registry.ts: distribution,
// TLS from a CA of its own that helm, skopeo and the nodes' containerd are told to trust; nothing "insecure"). The
// chart is then installed from its oci:// reference with --version on a local cluster whose nodes do not have the
// project image (projectImage: false): each node's containerd must pull it from the registry, which its content
// store and the registry's log both show, and the agents come up and initialise the nodes. One node is not told to
// trust the registry's CA: its pull is refused and its Node stays uninitialised. A tag that is not the chart's version
// is refused before anything is pushed.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { ContainerStatus, Event, Pod } from "kubernetes-types/core/v1.js";
import { ensureBinaries } from "../../localcluster/build.ts";
import { type Cluster, type ClusterNode, startCluster } from "../../localcluster/cluster.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import { run } from "../../localcluster/exec.ts";
import { buildImage, type BuiltImage } from "../../localcluster/image.ts";
import { AGENT_APP, initialised, listNodes, listPods, NAMESPACE, podReady, RELEASE } from "../../localcluster/project.ts";
import { type Registry, startRegistry } from "../../localcluster/registry.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { chartRelease } from "../../scripts/release.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
/** What the registry's clients are, in its log. */
const CONTAINERD_AGENT = /^containerd\//;

describe("the release, published to an OCI registry and installed from it", () => {
  let cluster: Cluster;
  let registry: Registry;
  let helm: string;
  /** helm and skopeo as the release script and a user run them, trusting the registry's CA. */
  let env: NodeJS.ProcessEnv;
  /** `npm run image`'s archive, what the release script publishes here. */
  let built: BuiltImage;
  const { version } = chartRelease();
  /** The nodes told to trust the registry's CA; the last one is not, and must not pull. */
  const trusted = () => cluster.nodes.slice(0, -1);
  const untrusted = () => cluster.nodes.at(-1) as ClusterNode;
  /** containerd's label on a blob it pulled from the registry (the host without its port: a label key has no colon). */
  const sourceLabel = () =>
    `containerd.io/distribution.source.${registry.host.replace(/:\d+$/, "")}=local-ccm/local-ccm`;

  before(async () => {
    const { helm: helmBinary, registry: registryBinary } = await ensureBinaries();
    helm = helmBinary;
    built = await buildImage();
    cluster = await startCluster({ nodes: 3, projectImage: false });
    // On the cluster's bridge gateway: the host pushes there and the nodes' containerd, in their namespaces, pull
    // from there (registry.ts says why not 127.0.0.1); its folder goes with the cluster's.
    registry = await startRegistry({
      dir: path.join(cluster.dir, "registry"),
      binary: registryBinary,
      address: clusterLayout(cluster.slot).gateway,
    });
    for (const node of trusted()) await node.trustRegistry(registry.host, registry.caCert);
    env = { ...process.env, SSL_CERT_FILE: registry.caCert, PATH: `${path.dirname(helm)}:${process.env.PATH}` };
  });
  after(async () => {
    await registry?.stop();
    await cluster?.stop();
  });

  /** `node scripts/release.ts args…` as the workflow runs it: its stdout, or a rejection with its exit and stderr. */
  const release = (args: string[]) => run(process.execPath, ["scripts/release.ts", ...args], { cwd: ROOT, env });

  test("a tag that is not the chart's version: one line, exit 1, nothing pushed", async () => {
    const refusal = await release([
      `--tag=v${version}-rc.1`,
      `--image-archive=${built.tarball}`,
      `--repository=${registry.host}/local-ccm/local-ccm`,
    ]).then(
      () => "",
      (err: Error) => err.message,
    );
    const line =
      `release: tag v${version}-rc.1: Chart.yaml has version ${version}, appVersion ${version}; the tag must be v<both>`;
    assert.ok(refusal.endsWith(`failed (exit 1): ${line}`), refusal);
    assert.deepEqual(registry.requests().filter((request) => request.method !== "GET"), []);
  });

  test("published, installed from oci://, pulled and initialised on trusting nodes; no pull elsewhere", async (t) => {
    const repository = `${registry.host}/local-ccm/local-ccm`;
    const output = await release([`--tag=v${version}`, `--image-archive=${built.tarball}`, `--repository=${repository}`]);
    const image = `${repository}:${version}`;
    const chart = `oci://${registry.host}/local-ccm/charts/local-ccm`;
    const lines = output.trim().split("\n");
    // skopeo gzips the layer on its way (`npm run image` stores it uncompressed): a manifest of its own.
    const pushedDigest = lines.find((line) => line.startsWith(`image ${image}@`))?.slice(`image ${image}@`.length);
    assert.match(pushedDigest ?? "", /^sha256:[0-9a-f]{64}$/, `the script names the image it pushed: ${output}`);
    assert.ok(lines.some((line) => line.startsWith(`chart ${chart} --version ${version} (sha256:`)), output);

    // Trust is real: without the registry's CA, helm refuses the registry's certificate.
    const helmRefusal = await run(helm, ["show", "chart", chart, `--version=${version}`]).then(
      () => "",
      (err: Error) => err.message,
    );
    assert.match(helmRefusal, /certificate signed by unknown authority/);

    const since = registry.requests().length;
    await run(
      helm,
      [
        `--kubeconfig=${cluster.kubeconfigPath}`,
        "install",
        RELEASE,
        chart,
        `--version=${version}`,
        `--namespace=${NAMESPACE}`,
        `--set=image.repository=${repository}`,
      ],
      { env },
    );
    const onTrusted = (pod: Pod) => trusted().some((node) => node.name === pod.spec?.nodeName);
    await waitFor(
      "every trusting node initialised by a Ready agent pod",
      async () => {
        const agents = (await listPods(cluster, AGENT_APP)).filter(podReady);
        const nodes = (await listNodes(cluster)).filter((node) => trusted().some((n) => n.name === node.metadata?.name));
        return (
          trusted().every((node) => agents.some((pod) => pod.spec?.nodeName === node.name)) &&
          nodes.length === trusted().length &&
          nodes.every(initialised)
        );
      },
      300_000,
      500,
    );

    // Every agent pod runs the image pulled from the registry, by the digest the release pushed.
    for (const pod of (await listPods(cluster, AGENT_APP)).filter(onTrusted)) {
      const status = pod.status?.containerStatuses?.[0] as ContainerStatus;
      assert.equal(status.image, image);
      assert.equal(status.imageID, `${repository}@${pushedDigest}`);
    }
    // The pull happened, node by node: containerd's content store records where each blob came from, and the
    // registry's log has each node's containerd fetching the manifest from the node's own address.
    const fetched = registry.requests().slice(since);
    for (const node of trusted()) {
      const content = await node.ctr(["content", "ls"]);
      const pulled = content.split("\n").filter((line) => line.includes(sourceLabel()));
      // The manifest, the config and the one layer.
      assert.ok(pulled.length >= 3, `${node.name}: blobs from the registry in containerd's content store:\n${content}`);
      assert.ok((await node.ctr(["images", "ls", "-q"])).split("\n").includes(image), `${node.name}: has ${image}`);
      const manifests = fetched.filter(
        (request) =>
          request.remoteAddr.startsWith(`${node.ip}:`) &&
          CONTAINERD_AGENT.test(request.userAgent) &&
          request.uri.startsWith("/v2/local-ccm/local-ccm/manifests/"),
      );
      assert.ok(manifests.length > 0, `${node.name}: its containerd fetched the manifest from the registry`);
      t.diagnostic(`${node.name}: ${manifests.length} manifest and ${pulled.length} blob records from ${registry.host}`);
    }

    // The node never told to trust the CA refuses the registry's certificate (no insecure fallback): its agent
    // pod reports the failed pull, no blob of the registry is in its content store, and its Node stays uninitialised.
    const node = untrusted();
    const failure = await waitFor(
      `${node.name}: its agent pod's pull refused`,
      async () => {
        const pod = (await listPods(cluster, AGENT_APP)).find((p) => p.spec?.nodeName === node.name);
        const events = await cluster.admin.request<{ items: Event[] }>({
          method: "GET",
          path: `/api/v1/namespaces/${NAMESPACE}/events?fieldSelector=involvedObject.name%3D${pod?.metadata?.name}`,
        });
        const failed = (event: Event) => event.reason === "Failed" && /Failed to pull/.test(event.message ?? "");
        return pod && events.items.find(failed);
      },
      120_000,
      500,
    );
    assert.match(failure.message ?? "", /certificate signed by unknown authority/);
    assert.ok(!(await node.ctr(["content", "ls"])).includes(sourceLabel()), `${node.name}: pulled nothing`);
    const stillTainted = (await listNodes(cluster)).find((n) => n.metadata?.name === node.name);
    assert.equal(stillTainted && initialised(stillTainted), false, `${node.name}: uninitialised`);
  });
});
