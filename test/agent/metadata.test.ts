// Node metadata end to end: the agent in a node's network namespace, the instance metadata services
// in that same namespace at 169.254.169.254 (metadata-server.ts; nothing is routed there from
// elsewhere), the real control plane under the RBAC and admission policy we ship.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Event, Node } from "kubernetes-types/core/v1.js";
import { Resource } from "../../src/kube/resource.ts";
import { waitFor } from "../wait.ts";
import {
  hasUninitializedTaint,
  metadataStatus,
  type NodeHost,
  type Registration,
  registerNode,
  startAgent,
  startMetadataServer,
  startWorld,
  type World,
} from "./harness.ts";
import { INSTANCES } from "./metadata-server.ts";

/** No ExternalIP to look for: the node has no route but to the apiserver and its own metadata service. */
const AIR_GAPPED = ["--external-ip-target="];
const POLICY = path.resolve(import.meta.dirname, "../../deploy/node-scope-policy.yaml");
const LABEL_KEYS = {
  region: "topology.kubernetes.io/region",
  zone: "topology.kubernetes.io/zone",
  instanceType: "node.kubernetes.io/instance-type",
} as const;

/** The Node's metadata as "providerID" and "label=value" lines, the metadata labels only. */
function metadataOf(node: Node): { providerID?: string; labels: Record<string, string> } {
  const labels = Object.fromEntries(
    Object.entries(LABEL_KEYS).flatMap(([field, key]) => {
      const value = node.metadata?.labels?.[key];
      return value === undefined ? [] : [[field, value]];
    }),
  );
  return { ...(node.spec?.providerID ? { providerID: node.spec.providerID } : {}), labels };
}

describe("node metadata from instance metadata services and rules", () => {
  let world: World;
  let events: Resource<Event>;
  let slot = 10;
  const eventsFor = async (name: string) =>
    (await events.list({ fieldSelector: `involvedObject.name=${name}` })).items.map((e) => `${e.reason}: ${e.message}`);
  // Air-gapped: no default route, so no request of the agent can leave the node's namespace.
  const nodeHost = () => world.nodeHost(slot++, { airGapped: true });

  before(async () => {
    world = await startWorld();
    await world.plane.kubectl(["apply", "-f", POLICY]);
    events = new Resource<Event>(world.plane.admin, { group: "", version: "v1", plural: "events", namespace: "default" });
  });
  after(async () => {
    await world?.stop();
  });

  /** Registers `name`, runs the agent once with `args` and returns its exit code and the Node after. */
  async function runOnce(node: NodeHost, name: string, args: string[], registration: Registration = {}, kubeletIP?: string) {
    await registerNode(world.nodes, name, kubeletIP ?? `198.18.100.${slot}`, registration);
    // The agent runs with a Pod-bound token, so the node-scope policy applies to it.
    const kubeconfig = await world.podBoundKubeconfig(node, name);
    const agent = startAgent(node, [`--node-name=${name}`, "--run-once", ...AIR_GAPPED, ...args], { kubeconfig });
    const code = await agent.exited;
    return { code, output: agent.output(), node: await world.nodes.get(name) };
  }

  for (const provider of ["hetzner", "aws", "azure", "gce", "openstack"] as const) {
    test(`${provider}: the providerID and labels its CCM would write, the taint removed in the same write`, async () => {
      const node = await nodeHost();
      const server = await startMetadataServer(node, [provider]);
      try {
        const name = `meta-${provider}`;
        const result = await runOnce(node, name, [`--instance-metadata=${provider}`, "--metadata-timeout=5s"]);
        assert.equal(result.code, 0, result.output);
        const { providerID, labels } = INSTANCES[provider];
        assert.deepEqual(metadataOf(result.node), { providerID, labels });
        assert.equal(hasUninitializedTaint(result.node), false);
        assert.ok((await eventsFor(name)).some((e) => e.startsWith("MetadataSet: ")));
      } finally {
        await server.stop();
      }
    });
  }

  test("the services enforce their rules: without the token or header, or on unknown paths, nothing", async () => {
    const node = await nodeHost();
    const server = await startMetadataServer(node, ["aws", "azure", "gce", "hetzner"]);
    try {
      const asked = {
        "aws without a token": await metadataStatus(node, "GET", "/latest/meta-data/instance-id"),
        "aws token without a ttl": await metadataStatus(node, "PUT", "/latest/api/token"),
        "aws with a wrong token": await metadataStatus(node, "GET", "/latest/meta-data/instance-id", {
          "X-aws-ec2-metadata-token": "forged",
        }),
        "azure without Metadata: true": await metadataStatus(node, "GET", "/metadata/instance/compute?api-version=2021-02-01"),
        "azure without api-version": await metadataStatus(node, "GET", "/metadata/instance/compute", { Metadata: "true" }),
        "gce without Metadata-Flavor": await metadataStatus(node, "GET", "/computeMetadata/v1/instance/name"),
        "gce with the wrong flavor": await metadataStatus(node, "GET", "/computeMetadata/v1/instance/name", {
          "Metadata-Flavor": "Amazon",
        }),
        "an unknown path": await metadataStatus(node, "GET", "/hetzner/v1/metadata/private-networks"),
      };
      assert.deepEqual(asked, {
        "aws without a token": 401,
        "aws token without a ttl": 400,
        "aws with a wrong token": 401,
        "azure without Metadata: true": 400,
        "azure without api-version": 400,
        "gce without Metadata-Flavor": 403,
        "gce with the wrong flavor": 403,
        "an unknown path": 404,
      });
      assert.equal(await metadataStatus(node, "GET", "/computeMetadata/v1/instance/name", { "Metadata-Flavor": "Google" }), 200);
    } finally {
      await server.stop();
    }
  });

  test("auto picks the service that answers in its own format and ignores one answering in another", async () => {
    const node = await nodeHost();
    // The imposter answers Hetzner's paths (tried first) with a web page; GCE answers properly.
    const server = await startMetadataServer(node, ["imposter", "gce"]);
    try {
      const result = await runOnce(node, "meta-auto", ["--instance-metadata=auto", "--metadata-timeout=5s"]);
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(metadataOf(result.node), { providerID: INSTANCES.gce.providerID, labels: INSTANCES.gce.labels });
    } finally {
      await server.stop();
    }
  });

  test("auto with no service answering: metadata skipped with a reason, the node initialised", async () => {
    const node = await nodeHost();
    const result = await runOnce(node, "meta-none", ["--instance-metadata=auto", "--metadata-timeout=1s"]);
    assert.equal(result.code, 0, result.output);
    assert.deepEqual(metadataOf(result.node), { labels: {} });
    assert.equal(hasUninitializedTaint(result.node), false);
    const skipped = (await eventsFor("meta-none")).find((e) => e.startsWith("MetadataSkipped: "));
    assert.match(skipped ?? "", /no instance metadata service answered in its provider's format \(hetzner: /);
  });

  test("a providerID someone else set and a label kubelet set are kept and reported; the rest is added", async () => {
    const node = await nodeHost();
    const server = await startMetadataServer(node, ["aws"]);
    try {
      const registration = { providerID: "kind://docker/kind/meta-kept", labels: { [LABEL_KEYS.zone]: "rack-9" } };
      const result = await runOnce(node, "meta-kept", ["--instance-metadata=aws", "--metadata-timeout=5s"], registration);
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(metadataOf(result.node), {
        providerID: "kind://docker/kind/meta-kept",
        labels: { zone: "rack-9", region: "eu-central-1", instanceType: "m5.large" },
      });
      const reasons = (await eventsFor("meta-kept")).map((e) => e.split(":")[0]).sort();
      assert.deepEqual(reasons, ["MetadataLabelKept", "MetadataSet", "ProviderIDMismatch", "TaintRemoved"]);
    } finally {
      await server.stop();
    }
  });

  test("--update-metadata-labels: the agent owns the labels and replaces a value someone else wrote", async () => {
    const node = await nodeHost();
    const server = await startMetadataServer(node, ["aws"]);
    try {
      const registration = { labels: { [LABEL_KEYS.zone]: "rack-9" } };
      const args = ["--instance-metadata=aws", "--update-metadata-labels"];
      const result = await runOnce(node, "meta-owned", args, registration);
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(metadataOf(result.node), { providerID: INSTANCES.aws.providerID, labels: INSTANCES.aws.labels });
    } finally {
      await server.stop();
    }
  });

  test("metadata down at start: taint kept, Event, --run-once exits 1; retried, and once it answers, initialised", async () => {
    const node = await nodeHost();
    const name = "meta-late";
    const once = await runOnce(node, name, ["--instance-metadata=azure", "--metadata-timeout=1s"]);
    assert.equal(once.code, 1);
    assert.match(once.output, /node metadata not applied: azure instance metadata did not answer within 1000 ms/);
    assert.equal(hasUninitializedTaint(once.node), true);
    assert.ok((await eventsFor(name)).some((e) => e.startsWith("MetadataUnavailable: azure instance metadata")));

    const args = [`--node-name=${name}`, ...AIR_GAPPED, "--instance-metadata=azure", "--metadata-timeout=1s", "--reconcile-interval=500ms"];
    const agent = startAgent(node, args, { kubeconfig: await world.podBoundKubeconfig(node, name) });
    try {
      await new Promise((resolve) => setTimeout(resolve, 2000));
      assert.equal(hasUninitializedTaint(await world.nodes.get(name)), true, "no taint removal without metadata");
      const server = await startMetadataServer(node, ["azure"]);
      try {
        const initialised = await waitFor("the node initialised", async () => {
          const n = await world.nodes.get(name);
          return !hasUninitializedTaint(n) && n;
        }, 30_000, 200);
        assert.deepEqual(metadataOf(initialised), { providerID: INSTANCES.azure.providerID, labels: INSTANCES.azure.labels });
        // At rest (several resyncs) the answer kept is used: no more requests to the service.
        const asked = server.requests();
        assert.deepEqual(asked, ["GET /metadata/instance/compute?api-version=2021-02-01&format=json 200"]);
        await new Promise((resolve) => setTimeout(resolve, 2000));
        assert.deepEqual(server.requests(), asked);
      } finally {
        await server.stop();
      }
    } finally {
      await agent.stop();
    }
  });

  test("bare metal: CIDR → zone, name regex → region, template providerID; a node matching no rule gets a reason", async () => {
    const rules = [
      "--provider-id=local://{systemUUID}",
      "--zone-rules=cidr:198.18.100.0/26=rack-1,cidr:198.18.100.64/26=rack-2",
      "--region-rules=name:^([a-z]+)-=$1",
    ];
    const systemUUID = "4c4c4544-0042-3510-8052-b4c04f384e32";
    const matching = await runOnce(await nodeHost(), "fra-17", rules, { nodeInfo: { systemUUID } });
    assert.equal(matching.code, 0, matching.output);
    assert.deepEqual(metadataOf(matching.node), { providerID: `local://${systemUUID}`, labels: { zone: "rack-1", region: "fra" } });

    // An InternalIP outside both CIDRs and a name without a lowercase prefix match nothing.
    const other = await runOnce(await nodeHost(), "17-unmatched", rules, { nodeInfo: { systemUUID } }, "198.18.100.200");
    assert.equal(other.code, 0, other.output);
    const unmatched = other.node;
    assert.deepEqual(metadataOf(unmatched), { providerID: `local://${systemUUID}`, labels: {} });
    assert.equal(hasUninitializedTaint(unmatched), false);
    const reasons = (await eventsFor("17-unmatched")).filter((e) => e.startsWith("MetadataRuleUnmatched: "));
    const facts = 'InternalIPs 198.18.100.200, product name "';
    assert.deepEqual(
      reasons.sort().map((e) => e.slice(0, e.indexOf(facts) + facts.length)),
      [
        `MetadataRuleUnmatched: no region rule matches node 17-unmatched: ${facts}`,
        `MetadataRuleUnmatched: no zone rule matches node 17-unmatched: ${facts}`,
      ],
    );
  });
});
