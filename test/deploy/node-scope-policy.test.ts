// deploy/node-scope-policy.yaml on the real control plane: with a token bound to a Pod on node A, the
// agent's ServiceAccount may write A's status.addresses, remove A's uninitialized taint, set A's
// providerID while it is empty and add or change A's region, zone and instance-type labels, and
// nothing else — not on node B, not another field or label of A, not a providerID A already has.
// Requests expected to be denied are sent as dry runs, so a policy that wrongly allows one cannot
// change the state the other tests rely on. The apiserver runs NodeRestriction, as production ones do: the
// policy trusts the token's node-name claim because NodeRestriction lets a kubelet mint tokens only for pods
// on its own node (test/localcluster/cluster.test.ts proves that on real kubelets). The tokens here are the
// admin's, which NodeRestriction does not restrict: the policy needs nothing more from it on this plane.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Node, Taint } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { agentPodKubeconfig } from "../agent/harness.ts";
import { waitFor } from "../../localcluster/wait.ts";

const DEPLOY = path.resolve(import.meta.dirname, "../../deploy");
const NODES = { a: "node-a", b: "node-b" } as const;
const NODE_RESOURCE = { group: "", version: "v1", plural: "nodes" } as const;
const UNINITIALIZED: Taint = {
  key: "node.cloudprovider.kubernetes.io/uninitialized",
  value: "true",
  effect: "NoSchedule",
};
const OTHER_TAINT: Taint = { key: "example.com/maintenance", value: "true", effect: "NoSchedule" };
const METADATA_LABELS = [
  "topology.kubernetes.io/region",
  "topology.kubernetes.io/zone",
  "node.kubernetes.io/instance-type",
].join(", ");
const ONLY_ALLOWED =
  `local-ccm may change only status.addresses, spec.providerID while empty, the ${METADATA_LABELS} labels ` +
  "and remove the node.cloudprovider.kubernetes.io/uninitialized taint, but this request changes ";
const LABELS_ONLY = `metadata.labels (only adding or changing ${METADATA_LABELS} is allowed)`;

/** A Node as kubelet --cloud-provider=external registers it (plus a taint that is not ours). */
function kubeletNode(name: string): Node {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, labels: { "kubernetes.io/hostname": name } },
    spec: { taints: [UNINITIALIZED, OTHER_TAINT] },
  };
}

/** What the agent sends: the Node as read, with new status.addresses, PUT to nodes/status. */
function withAddresses(node: Node, ip: string): Node {
  const addresses = [
    { type: "Hostname", address: node.metadata?.name ?? "" },
    { type: "InternalIP", address: ip },
  ];
  return { ...node, status: { ...node.status, addresses } };
}

/** The agent's taint removal: a JSON patch with `test` ops on the resourceVersion and the taint. */
function removeTaintPatch(node: Node, key: string): unknown[] {
  const taints = node.spec?.taints ?? [];
  const index = taints.findIndex((taint) => taint.key === key);
  assert.ok(index >= 0, `${node.metadata?.name} has no taint ${key}`);
  return [
    { op: "test", path: "/metadata/resourceVersion", value: node.metadata?.resourceVersion },
    { op: "test", path: `/spec/taints/${index}`, value: taints[index] },
    { op: "remove", path: `/spec/taints/${index}` },
  ];
}

/** Runs `request` and returns why it was refused (denied or invalid); fails if it was allowed. */
async function refusal(request: () => Promise<unknown>): Promise<string> {
  try {
    await request();
  } catch (err) {
    if (isApiError(err, "Forbidden") || isApiError(err, "Invalid")) return err.message;
    throw err;
  }
  assert.fail("the request was allowed");
}

/** Runs `request` and returns the denial message; fails if it was allowed or failed otherwise. */
async function denial(request: () => Promise<unknown>): Promise<string> {
  try {
    await request();
  } catch (err) {
    if (isApiError(err, "Forbidden")) return err.message;
    throw err;
  }
  assert.fail("the request was allowed");
}

describe("node-scope admission policy", () => {
  let plane: ControlPlane;
  let admin: Resource<Node>;
  let agent: Resource<Node>;
  const clients: KubeClient[] = [];
  const dryRun = true;

  const nodesAs = async (kubeconfig: string): Promise<Resource<Node>> => {
    const config = await loadClientConfig({ kubeconfig });
    const client = new KubeClient(config, { component: "test-agent", maxRetries: 0 });
    clients.push(client);
    return new Resource<Node>(client, NODE_RESOURCE);
  };

  before(async () => {
    plane = await startControlPlane({ nodeRestriction: true });
    admin = new Resource<Node>(plane.admin, NODE_RESOURCE);
    const files = ["rbac.yaml", "node-scope-policy.yaml"].flatMap((name) => ["-f", path.join(DEPLOY, name)]);
    await plane.kubectl(["apply", ...files]);
    for (const name of Object.values(NODES)) {
      const node = await admin.create(kubeletNode(name));
      const registered = withAddresses(node, "198.18.0.1");
      const capacity = { cpu: "2" }; // a field for the agent to (try to) remove
      await admin.update({ ...registered, status: { ...registered.status, capacity } }, { subresource: "status" });
    }
    agent = await nodesAs(await agentPodKubeconfig(plane, NODES.a));
    // A new policy takes a moment to reach the admission plugin: wait until it denies what it must.
    const labelChange = { metadata: { labels: { probe: "x" } } };
    await waitFor(
      "the policy to deny a label change on node A",
      async () =>
        (await denial(() => agent.patch(NODES.a, "merge", labelChange, { dryRun }))).includes(
          "ValidatingAdmissionPolicy",
        ),
      30_000,
      200,
    );
  });

  after(async () => {
    for (const client of clients) client.close();
    await plane?.stop();
  });

  test("the agent writes status.addresses of its own Node", async () => {
    const node = await agent.get(NODES.a);
    const updated = await agent.update(withAddresses(node, "198.18.0.10"), { subresource: "status" });
    assert.deepEqual(updated.status?.addresses, [
      { type: "Hostname", address: NODES.a },
      { type: "InternalIP", address: "198.18.0.10" },
    ]);
  });

  test("the agent removes the uninitialized taint of its own Node, and only that taint", async () => {
    const node = await agent.get(NODES.a);
    const updated = await agent.patch(NODES.a, "json", removeTaintPatch(node, UNINITIALIZED.key));
    const others = node.spec?.taints?.filter((taint) => taint.key !== UNINITIALIZED.key);
    assert.ok(others?.some((taint) => taint.key === OTHER_TAINT.key));
    assert.deepEqual(updated.spec?.taints, others);
  });

  test("the agent sets its own Node's empty providerID and metadata labels, as its JSON patch does", async () => {
    const node = await agent.get(NODES.a);
    assert.equal(node.spec?.providerID, undefined);
    const updated = await agent.patch(NODES.a, "json", [
      { op: "test", path: "/metadata/resourceVersion", value: node.metadata?.resourceVersion },
      { op: "add", path: "/spec/providerID", value: "local://node-a" },
      { op: "add", path: "/metadata/labels/topology.kubernetes.io~1zone", value: "rack-1" },
      { op: "add", path: "/metadata/labels/node.kubernetes.io~1instance-type", value: "r650" },
    ]);
    assert.equal(updated.spec?.providerID, "local://node-a");
    assert.equal(updated.metadata?.labels?.["topology.kubernetes.io/zone"], "rack-1");
    // With --update-metadata-labels it may change them later too.
    const changed = await agent.patch(NODES.a, "merge", { metadata: { labels: { "topology.kubernetes.io/zone": "rack-2" } } });
    assert.equal(changed.metadata?.labels?.["topology.kubernetes.io/zone"], "rack-2");
  });

  test("a providerID the Node has cannot be changed or removed; metadata labels cannot be removed", async () => {
    await waitFor("node A's providerID", async () => Boolean((await admin.get(NODES.a)).spec?.providerID));
    const node = await agent.get(NODES.a);
    for (const providerID of ["local://forged", ""]) {
      const text = await refusal(() => agent.patch(NODES.a, "merge", { spec: { providerID } }, { dryRun }));
      // kube-apiserver's own validation refuses first (422); the policy would deny it too (403).
      assert.match(text, /spec\.providerID|providerID/, text);
    }
    const removal = [{ op: "remove", path: "/metadata/labels/topology.kubernetes.io~1zone" }];
    assert.ok((await denial(() => agent.patch(NODES.a, "json", removal, { dryRun }))).endsWith(`${ONLY_ALLOWED}${LABELS_ONLY}`));
    assert.equal((await admin.get(NODES.a)).spec?.providerID, node.spec?.providerID);
  });

  test("another Node is denied, with a message naming both nodes", async () => {
    const node = await agent.get(NODES.b);
    const writes = {
      "status.addresses": () =>
        agent.update(withAddresses(node, "198.18.0.20"), { subresource: "status", dryRun }),
      "taint removal": () =>
        agent.patch(NODES.b, "json", removeTaintPatch(node, UNINITIALIZED.key), { dryRun }),
      providerID: () => agent.patch(NODES.b, "merge", { spec: { providerID: "local://node-b" } }, { dryRun }),
      "zone label": () =>
        agent.patch(NODES.b, "merge", { metadata: { labels: { "topology.kubernetes.io/zone": "z" } } }, { dryRun }),
    };
    for (const [what, write] of Object.entries(writes)) {
      assert.match(
        await denial(write),
        /denied request: local-ccm on node node-a may not change node node-b: only its own Node$/,
        what,
      );
    }
    assert.deepEqual((await admin.get(NODES.b)).spec?.taints, node.spec?.taints);
  });

  test("any other change to its own Node is denied, naming the field: set, changed or removed", async () => {
    const node = await agent.get(NODES.a);
    const addressUpdate = withAddresses(node, "198.18.0.11");
    const updateStatus = (change: Node) => agent.update(change, { subresource: "status", dryRun });
    const cases: [string, () => Promise<unknown>][] = [
      [
        LABELS_ONLY,
        () => {
          const labels = { "node-role.kubernetes.io/control-plane": "" };
          return agent.patch(NODES.a, "merge", { metadata: { labels } }, { dryRun });
        },
      ],
      [
        LABELS_ONLY,
        () => {
          const labels = { "kubernetes.io/hostname": "forged", "topology.kubernetes.io/zone": "z" };
          return agent.patch(NODES.a, "merge", { metadata: { labels } }, { dryRun });
        },
      ],
      [
        "metadata.annotations",
        () => {
          const annotations = { "example.com/x": "y" };
          return updateStatus({ ...node, metadata: { ...node.metadata, annotations } });
        },
      ],
      [
        "spec.unschedulable",
        () => agent.patch(NODES.a, "merge", { spec: { unschedulable: true } }, { dryRun }),
      ],
        [
        "status.capacity",
        () => {
          const { capacity: _, ...withoutCapacity } = addressUpdate.status ?? {};
          return updateStatus({ ...addressUpdate, status: withoutCapacity });
        },
      ],
      [
        "status.conditions",
        () => {
          const forged = { type: "Ready", status: "True", reason: "Forged" };
          return updateStatus({ ...node, status: { ...node.status, conditions: [forged] } });
        },
      ],
      [
        "status.daemonEndpoints",
        () => {
          const daemonEndpoints = { kubeletEndpoint: { Port: 10251 } };
          return updateStatus({ ...addressUpdate, status: { ...addressUpdate.status, daemonEndpoints } });
        },
      ],
      [
        "spec.taints (only removing node.cloudprovider.kubernetes.io/uninitialized is allowed)",
        () => {
          const added = { key: "example.com/added", effect: "NoSchedule" };
          const patch = [{ op: "add", path: "/spec/taints/-", value: added }];
          return agent.patch(NODES.a, "json", patch, { dryRun });
        },
      ],
      [
        "spec.taints (only removing node.cloudprovider.kubernetes.io/uninitialized is allowed)",
        () => agent.patch(NODES.a, "json", removeTaintPatch(node, OTHER_TAINT.key), { dryRun }),
      ],
    ];
    for (const [field, request] of cases) {
      const text = await denial(request);
      assert.ok(text.endsWith(`${ONLY_ALLOWED}${field}`), `${field}: ${text}`);
    }
  });

  test("deleting or creating Nodes is denied even where RBAC would allow it", async () => {
    const role = "extra-node-writes";
    await plane.kubectl(["create", "clusterrole", role, "--verb=create,delete", "--resource=nodes"]);
    const binding = ["create", "clusterrolebinding", role, `--clusterrole=${role}`];
    await plane.kubectl([...binding, "--serviceaccount=kube-system:local-ccm"]);
    // Until the authorizer sees the new grant, RBAC denies before admission: wait for the policy's denial.
    const deletion = await waitFor("the delete request to reach admission", async () => {
      const text = await denial(() => agent.delete(NODES.a, { dryRun }));
      return text.includes("ValidatingAdmissionPolicy") && text;
    });
    assert.match(deletion, /local-ccm may only update its own Node, not DELETE Nodes$/);
    assert.match(
      await denial(() => agent.create(kubeletNode("node-c"), { dryRun })),
      /local-ccm may only update its own Node, not CREATE Nodes$/,
    );
  });

  test("a token not bound to a Pod on a Node is denied", async () => {
    const unbound = await nodesAs(
      await plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "local-ccm" }),
    );
    const update = withAddresses(await unbound.get(NODES.a), "198.18.0.12");
    assert.match(
      await denial(() => unbound.update(update, { subresource: "status", dryRun })),
      /local-ccm may change only its own Node, but its token names none/,
    );
  });

  test("other users are not restricted", async () => {
    const labels = { "example.com/admin": "yes" };
    const updated = await admin.patch(NODES.b, "merge", { metadata: { labels } });
    assert.equal(updated.metadata?.labels?.["example.com/admin"], "yes");
  });
});
