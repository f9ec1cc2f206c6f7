// The release path as users meet it. scripts/release.ts, the commands .github/workflows/release.yml runs on a tag,
// publishes the chart and the image to a real OCI registry on this machine (localcluster/registry.ts: distribution,
// TLS from a CA of its own that helm, skopeo and the nodes' containerd are told to trust; nothing "insecure"). The
// chart is then installed from its oci:// reference with --version on a local cluster whose nodes do not have the
// project image (projectImage: false): each node's containerd must pull it from the registry, which its content
// store and the registry's log both show, and the agents come up and initialise every node.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { ContainerStatus } from "kubernetes-types/core/v1.js";
import { ensureBinaries } from "../../localcluster/build.ts";
import { type Cluster, clusterLayout, startCluster } from "../../localcluster/cluster.ts";
import { run } from "../../localcluster/exec.ts";
import { buildImage } from "../../localcluster/image.ts";
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
  const { version } = chartRelease();

  before(async () => {
    ({ helm } = await ensureBinaries());
    cluster = await startCluster({ nodes: 2, projectImage: false });
    // On the cluster's bridge gateway: the host pushes there and the nodes' containerd, in their namespaces, pull
    // from there (registry.ts says why not 127.0.0.1); its folder goes with the cluster's.
    registry = await startRegistry({
      dir: path.join(cluster.dir, "registry"),
      binary: (await ensureBinaries()).registry,
      address: clusterLayout(cluster.slot).gateway,
    });
    for (const node of cluster.nodes) await node.trustRegistry(registry.host, registry.caCert);
    env = { ...process.env, SSL_CERT_FILE: registry.caCert, PATH: `${path.dirname(helm)}:${process.env.PATH}` };
  });
  after(async () => {
    await registry?.stop();
    await cluster?.stop();
  });

  test("published by the release script, installed from oci://, pulled by every node, agents initialise the nodes", async (t) => {
    const repository = `${registry.host}/local-ccm/local-ccm`;
    const built = await buildImage();
    const output = await run(
      process.execPath,
      ["scripts/release.ts", `--tag=v${version}`, `--image-archive=${built.tarball}`, `--repository=${repository}`],
      { cwd: ROOT, env },
    );
    const image = `${repository}:${version}`;
    const chart = `oci://${registry.host}/local-ccm/charts/local-ccm`;
    const lines = output.trim().split("\n");
    // skopeo gzips the layer on its way (`npm run image` stores it uncompressed): a manifest of its own.
    const pushedDigest = lines.find((line) => line.startsWith(`image ${image}@`))?.slice(`image ${image}@`.length);
    assert.match(pushedDigest ?? "", /^sha256:[0-9a-f]{64}$/, `the script names the image it pushed: ${output}`);
    assert.ok(lines.some((line) => line.startsWith(`chart ${chart} --version ${version} (sha256:`)), output);

    // Trust is real: without the registry's CA, helm refuses the registry's certificate.
    const untrusted = await run(helm, ["show", "chart", chart, `--version=${version}`]).then(
      () => "",
      (err: Error) => err.message,
    );
    assert.match(untrusted, /certificate signed by unknown authority/);

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
    await waitFor(
      "every node initialised by a Ready agent pod",
      async () => {
        const agents = (await listPods(cluster, AGENT_APP)).filter(podReady);
        const nodes = await listNodes(cluster);
        return (
          cluster.nodes.every((node) => agents.some((pod) => pod.spec?.nodeName === node.name)) &&
          nodes.length === cluster.nodes.length &&
          nodes.every(initialised)
        );
      },
      300_000,
      500,
    );

    // Every agent pod runs the image pulled from the registry, by the digest the release pushed.
    for (const pod of await listPods(cluster, AGENT_APP)) {
      const status = pod.status?.containerStatuses?.[0] as ContainerStatus;
      assert.equal(status.image, image);
      assert.equal(status.imageID, `${repository}@${pushedDigest}`);
    }
    // The pull happened, node by node: containerd's content store records where each blob came from, and the
    // registry's log has each node's containerd fetching the manifest from the node's own address.
    const fetched = registry.requests().slice(since);
    for (const node of cluster.nodes) {
      const content = await node.ctr(["content", "ls"]);
      // The label names the registry's host without its port (a label key has no colon).
      const source = `containerd.io/distribution.source.${registry.host.replace(/:\d+$/, "")}=local-ccm/local-ccm`;
      const pulled = content.split("\n").filter((line) => line.includes(source));
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
  });
});
