// deploy/node-scope-policy.yaml on the real control plane: with a token bound to a Pod on node A, the
// agent's ServiceAccount may write A's status.addresses, remove A's uninitialized taint, set A's
// providerID while it is empty and add or change A's region, zone and instance-type labels, and
// nothing else — not on node B, not another field or label of A, not a providerID A already has. The
// policy is rendered with node init rules, whose label and taint keys the agent may add (never change)
// while its Node is uninitialised, and at no other time. Rendered with bgp.enabled (the last test), it may also write
// its own Node's local-ccm.io/bgp-sessions annotation, up to 16384 characters, and still no other annotation; with
// bgp.networkUnavailableCondition too, its own Node's NetworkUnavailable condition, and no other condition.
// Other field managers' ownership (managedFields) may change only as the apiserver changes it for the
// fields written; Events only about its own Node, reported by local-ccm. Requests expected to be denied
// are sent as dry runs, so a policy that wrongly allows one cannot change the state the other tests rely on.
// The apiserver runs NodeRestriction, as production ones do: the policy trusts the token's node-name claim
// because NodeRestriction lets a kubelet mint tokens only for pods on its own node
// (test/localcluster/cluster.test.ts proves that on real kubelets). The tokens here are the admin's, which
// NodeRestriction does not restrict: the policy needs nothing more from it on this plane.
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Event, Node, Taint } from "kubernetes-types/core/v1.js";
import type { ManagedFieldsEntry } from "kubernetes-types/meta/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { denial, refused } from "./refused.ts";
import { NODE_RESOURCE, type PatchType, Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { agentPodKubeconfig } from "../agent/harness.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { helmTemplate } from "../../scripts/render-manifests.ts";
import { SESSIONS_ANNOTATION, sessionReportText } from "../../src/bgppeers/sessions.ts";

const DEPLOY = path.resolve(import.meta.dirname, "../../deploy");
const NODES = { a: "node-a", b: "node-b", c: "node-c" } as const;
const EVENTS = { group: "", version: "v1", plural: "events", namespace: "default" } as const;
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
const LABELS_ONLY =
  `metadata.labels (only adding or changing ${METADATA_LABELS} is allowed, ` +
  "and adding the node init rules' labels while uninitialised)";
const TAINTS_ONLY =
  "spec.taints (only removing node.cloudprovider.kubernetes.io/uninitialized is allowed, " +
  "and adding the node init rules' taints while uninitialised)";
// The node init rules the policy is rendered with (chart values metadata.nodeLabelRules, metadata.nodeTaintRules).
const INIT_RULES = [
  "--set=metadata.nodeLabelRules={cidr:198.18.0.0/24=example.com/rack=r1,name:^node-c$=node-role.kubernetes.io/gpu=}",
  "--set=metadata.nodeTaintRules={name:^node-c$=nvidia.com/gpu=present:NoSchedule}",
];
const GPU_TAINT: Taint = { key: "nvidia.com/gpu", value: "present", effect: "NoSchedule" };

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

/** managedFields' fieldsV1: a tree of "f:<field>", "k:<key>" and "." keys. */
interface Fields {
  [key: string]: Fields;
}

/** The fields the managedFields entry of `manager` (and `subresource`, "" for the main resource) owns. */
function fieldsOf(node: Node, manager: string, subresource = ""): Fields | undefined {
  const entry = node.metadata?.managedFields?.find((e) => e.manager === manager && (e.subresource ?? "") === subresource);
  return entry?.fieldsV1 as Fields | undefined;
}

/**
 * A forgery of `entries`: "ops" owns the hostname label and kubelet no longer does, so that ops's next
 * apply, which does not hold the label, deletes it. Returns the forged list and its two changed entries.
 */
function forgeHostnameOwnership(entries: ManagedFieldsEntry[]): {
  forged: ManagedFieldsEntry[];
  changed: ManagedFieldsEntry[];
} {
  const forged = structuredClone(entries);
  const ops = forged.find((e) => e.manager === "ops") as ManagedFieldsEntry;
  const kubelet = forged.find((e) => e.manager === "kubelet" && !e.subresource) as ManagedFieldsEntry;
  const labels = (entry: ManagedFieldsEntry) => (entry.fieldsV1 as Fields)["f:metadata"]?.["f:labels"] as Fields;
  labels(ops)["f:kubernetes.io/hostname"] = {};
  delete labels(kubelet)["f:kubernetes.io/hostname"];
  return { forged, changed: forged.filter((e) => e === ops || e === kubelet) };
}

describe("node-scope admission policy", () => {
  let plane: ControlPlane;
  let admin: Resource<Node>;
  let agentClient: KubeClient;
  let agent: Resource<Node>;
  /** The agent on node C, which stays uninitialised until the node init rules' test. */
  let agentC: Resource<Node>;
  const clients: KubeClient[] = [];
  const dryRun = true;

  const clientAs = async (kubeconfig: string): Promise<KubeClient> => {
    const config = await loadClientConfig({ kubeconfig });
    const client = new KubeClient(config, { component: "test-agent", maxRetries: 0 });
    clients.push(client);
    return client;
  };
  const nodesAs = async (kubeconfig: string) => new Resource<Node>(await clientAs(kubeconfig), NODE_RESOURCE);

  before(async () => {
    plane = await startControlPlane({ nodeRestriction: true });
    admin = new Resource<Node>(plane.admin, NODE_RESOURCE);
    await plane.kubectl(["apply", "-f", path.join(DEPLOY, "rbac.yaml")]);
    const policy = await helmTemplate(plane.binaries.helm, ["--show-only=templates/node-scope-policy.yaml", ...INIT_RULES]);
    const policyFile = path.join(plane.dir, "node-scope-policy.yaml");
    await writeFile(policyFile, policy);
    await plane.kubectl(["apply", "-f", policyFile]);
    // Written as kubelet writes them, so that kubelet owns the fields the agent later takes.
    const fieldManager = "kubelet";
    for (const name of Object.values(NODES)) {
      const node = await admin.create(kubeletNode(name), { fieldManager });
      const registered = withAddresses(node, "198.18.0.1");
      const capacity = { cpu: "2" }; // a field for the agent to (try to) remove
      const status = { ...registered.status, capacity };
      await admin.update({ ...registered, status }, { subresource: "status", fieldManager });
    }
    agentClient = await clientAs(await agentPodKubeconfig(plane, NODES.a));
    agent = new Resource<Node>(agentClient, NODE_RESOURCE);
    agentC = await nodesAs(await agentPodKubeconfig(plane, NODES.c));
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

  test("the agent writes status.addresses of its own Node (kubelet loses the address it owned)", async () => {
    const node = await agent.get(NODES.a);
    const internalIP = 'k:{"type":"InternalIP"}';
    const addresses = (fields: Fields | undefined) => fields?.["f:status"]?.["f:addresses"]?.[internalIP];
    assert.ok(addresses(fieldsOf(node, "kubelet", "status"))?.["f:address"]);
    const updated = await agent.update(withAddresses(node, "198.18.0.10"), { subresource: "status" });
    assert.deepEqual(updated.status?.addresses, [
      { type: "Hostname", address: NODES.a },
      { type: "InternalIP", address: "198.18.0.10" },
    ]);
    // The apiserver moved the changed field from kubelet's entry to the agent's: the policy lets that through.
    assert.deepEqual(addresses(fieldsOf(updated, "kubelet", "status")), { ".": {}, "f:type": {} });
    assert.ok(addresses(fieldsOf(updated, "local-ccm", "status"))?.["f:address"]);
  });

  test("the agent removes the uninitialized taint of its own Node, and only that taint", async () => {
    const node = await agent.get(NODES.a);
    assert.ok(fieldsOf(node, "kubelet")?.["f:spec"]?.["f:taints"]);
    const updated = await agent.patch(NODES.a, "json", removeTaintPatch(node, UNINITIALIZED.key));
    const others = node.spec?.taints?.filter((taint) => taint.key !== UNINITIALIZED.key);
    assert.ok(others?.some((taint) => taint.key === OTHER_TAINT.key));
    assert.deepEqual(updated.spec?.taints, others);
    // kubelet owned the (atomic) taint list and lost it to the agent, its only spec field: f:spec went with it.
    assert.equal(fieldsOf(updated, "kubelet")?.["f:spec"], undefined);
  });

  test("node init rules: while uninitialised, only the rules' keys may be added, never changed; then in the agent's one write", async () => {
    // ops labelled the rack by hand: the agent keeps it (and may not change it).
    await admin.patch(NODES.c, "merge", { metadata: { labels: { "example.com/rack": "ops" } } });
    const node = await agentC.get(NODES.c);
    const label = (labels: Record<string, string>) => () =>
      agentC.patch(NODES.c, "merge", { metadata: { labels } }, { dryRun });
    const addTaint = (taint: Taint) => () =>
      agentC.patch(NODES.c, "json", [{ op: "add", path: "/spec/taints/-", value: taint }], { dryRun });
    const cases: [string, () => Promise<unknown>][] = [
      [LABELS_ONLY, label({ "example.com/other": "x" })],
      [LABELS_ONLY, label({ "node-role.kubernetes.io/control-plane": "" })],
      [LABELS_ONLY, label({ "node-restriction.kubernetes.io/gpu": "true" })],
      [LABELS_ONLY, label({ "example.com/rack": "r1" })],
      [TAINTS_ONLY, addTaint({ key: "example.com/added", effect: "NoSchedule" })],
      [TAINTS_ONLY, addTaint({ key: "node.kubernetes.io/unreachable", effect: "NoExecute" })],
      [
        TAINTS_ONLY,
        () => {
          const taints = [UNINITIALIZED, GPU_TAINT]; // OTHER_TAINT dropped on the way
          return agentC.patch(NODES.c, "merge", { spec: { taints } }, { dryRun });
        },
      ],
    ];
    for (const [field, request] of cases) {
      const text = await denial(request);
      assert.ok(text.endsWith(`${ONLY_ALLOWED}${field}`), `${field}: ${text}`);
    }
    // The agent's patch (metadataPatch, then the taint removal): labels and taints added, the taint removed.
    const index = node.spec?.taints?.findIndex((taint) => taint.key === UNINITIALIZED.key) ?? -1;
    const updated = await agentC.patch(NODES.c, "json", [
      { op: "replace", path: "/metadata/resourceVersion", value: node.metadata?.resourceVersion },
      { op: "add", path: "/metadata/labels/node-role.kubernetes.io~1gpu", value: "" },
      { op: "add", path: "/spec/taints/-", value: GPU_TAINT },
      { op: "test", path: `/spec/taints/${index}`, value: UNINITIALIZED },
      { op: "remove", path: `/spec/taints/${index}` },
    ]);
    assert.equal(updated.metadata?.labels?.["node-role.kubernetes.io/gpu"], "");
    // (The plane's node lifecycle controller may add node.kubernetes.io/not-ready meanwhile.)
    const ours = updated.spec?.taints?.filter((taint) => !taint.key.startsWith("node.kubernetes.io/"));
    assert.deepEqual(ours, [OTHER_TAINT, GPU_TAINT]);
    // Initialised now: the same keys are closed, an added one and one that is already there alike.
    assert.ok((await denial(addTaint({ ...GPU_TAINT, effect: "NoExecute" }))).endsWith(`${ONLY_ALLOWED}${TAINTS_ONLY}`));
    assert.ok((await denial(label({ "node-role.kubernetes.io/gpu": "x" }))).endsWith(`${ONLY_ALLOWED}${LABELS_ONLY}`));
    const gpu = updated.spec?.taints?.findIndex((taint) => taint.key === GPU_TAINT.key);
    const removal = [{ op: "remove", path: `/spec/taints/${gpu}` }];
    assert.ok((await denial(() => agentC.patch(NODES.c, "json", removal, { dryRun }))).endsWith(`${ONLY_ALLOWED}${TAINTS_ONLY}`));
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
      const change = { spec: { providerID } };
      const text = await refused(() => agent.patch(NODES.a, "merge", change, { dryRun }), "Forbidden", "Invalid");
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
        TAINTS_ONLY,
        () => {
          const added = { key: "example.com/added", effect: "NoSchedule" };
          const patch = [{ op: "add", path: "/spec/taints/-", value: added }];
          return agent.patch(NODES.a, "json", patch, { dryRun });
        },
      ],
      [TAINTS_ONLY, () => agent.patch(NODES.a, "json", removeTaintPatch(node, OTHER_TAINT.key), { dryRun })],
      // Node A is initialised: the node init rules' keys are closed to it.
      [
        LABELS_ONLY,
        () => agent.patch(NODES.a, "merge", { metadata: { labels: { "example.com/rack": "r1" } } }, { dryRun }),
      ],
      [
        TAINTS_ONLY,
        () => agent.patch(NODES.a, "json", [{ op: "add", path: "/spec/taints/-", value: GPU_TAINT }], { dryRun }),
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

  test("other field managers' ownership stays as it was: a forged managedFields entry is denied, by any patch", async () => {
    // ops applies a label, as a GitOps tool does; kubelet registered the node's hostname label.
    const apply = { apiVersion: "v1", kind: "Node", metadata: { name: NODES.a, labels: { "example.com/team": "a" } } };
    await admin.patch(NODES.a, "apply", apply, { fieldManager: "ops" });
    const node = await agent.get(NODES.a);
    const entries = node.metadata?.managedFields ?? [];
    const { forged, changed } = forgeHostnameOwnership(entries);
    const managers = (list: ManagedFieldsEntry[]) =>
      `metadata.managedFields (entries of other field managers: ${list.map((e) => e.manager).join(", ")})`;
    const both = managers(changed);
    const replaceChanged = changed.map((e) => ({
      op: "replace",
      path: `/metadata/managedFields/${forged.indexOf(e)}`,
      value: e,
    }));
    const opsIndex = entries.findIndex((e) => e.manager === "ops");
    const cases: [string, string, () => Promise<unknown>][] = [
      ["merge", both, () => agent.patch(NODES.a, "merge", { metadata: { managedFields: forged } }, { dryRun })],
      ["strategic", both, () => agent.patch(NODES.a, "strategic", { metadata: { managedFields: forged } }, { dryRun })],
      ["json", both, () => agent.patch(NODES.a, "json", replaceChanged, { dryRun })],
      // Dropping an entry, or shrinking it where this write changes nothing, is no server-made change either.
      [
        "json (entry removed)",
        managers([entries[opsIndex] as ManagedFieldsEntry]),
        () => agent.patch(NODES.a, "json", [{ op: "remove", path: `/metadata/managedFields/${opsIndex}` }], { dryRun }),
      ],
      [
        "json (ownership dropped)",
        managers([entries[opsIndex] as ManagedFieldsEntry]),
        () => {
          const path = `/metadata/managedFields/${opsIndex}/fieldsV1/f:metadata/f:labels/f:example.com~1team`;
          return agent.patch(NODES.a, "json", [{ op: "remove", path }], { dryRun });
        },
      ],
      [
        "json (with an allowed change)",
        both,
        () =>
          agent.patch(
            NODES.a,
            "json",
            [{ op: "replace", path: "/metadata/labels/topology.kubernetes.io~1zone", value: "rack-9" }, ...replaceChanged],
            { dryRun },
          ),
      ],
    ];
    for (const [what, field, request] of cases) {
      const text = await denial(request);
      assert.ok(text.endsWith(`${ONLY_ALLOWED}${field}`), `${what}: ${text}`);
    }
    // Server-side apply takes no managedFields at all.
    await assert.rejects(
      agent.patch(NODES.a, "apply", { ...apply, metadata: { ...apply.metadata, managedFields: forged } }, {
        fieldManager: "local-ccm",
        dryRun,
      }),
      (err) => isApiError(err, "BadRequest") && /managedFields must be nil/.test(err.message),
    );
    assert.deepEqual((await admin.get(NODES.a)).metadata?.managedFields, entries);
  });

  test("what that denial prevents: the forgery, by an unrestricted user, makes ops's next apply delete a label", async () => {
    const apply = { apiVersion: "v1", kind: "Node", metadata: { name: NODES.b, labels: { "example.com/team": "b" } } };
    await admin.patch(NODES.b, "apply", apply, { fieldManager: "ops" });
    const { forged } = forgeHostnameOwnership((await admin.get(NODES.b)).metadata?.managedFields ?? []);
    await admin.patch(NODES.b, "merge", { metadata: { managedFields: forged } }, { fieldManager: "admin" });
    const after = await admin.patch(NODES.b, "apply", apply, { fieldManager: "ops" });
    assert.equal(after.metadata?.labels?.["kubernetes.io/hostname"], undefined);
    assert.equal(after.metadata?.labels?.["example.com/team"], "b");
  });

  test("every patch type: an allowed change passes, a refused one is denied, a stale resourceVersion conflicts", async () => {
    const zone = "topology.kubernetes.io/zone";
    const labelsPatch = (type: PatchType, labels: Record<string, string>, resourceVersion?: string) => {
      if (type === "json") {
        const ops = Object.entries(labels).map(([key, value]) => ({
          op: "add",
          path: `/metadata/labels/${key.replaceAll("~", "~0").replaceAll("/", "~1")}`,
          value,
        }));
        return resourceVersion ? [{ op: "replace", path: "/metadata/resourceVersion", value: resourceVersion }, ...ops] : ops;
      }
      const metadata = { labels, ...(resourceVersion && { resourceVersion }) };
      return type === "apply" ? { apiVersion: "v1", kind: "Node", metadata: { name: NODES.a, ...metadata } } : { metadata };
    };
    // The agent's own apply entry (manager local-ccm) takes the zone label from its earlier JSON patch's entry.
    const write = (type: PatchType, patch: unknown, options: { dryRun?: boolean } = {}) =>
      agent.patch(NODES.a, type, patch, type === "apply" ? { ...options, fieldManager: "local-ccm", force: true } : options);
    const stale = (await agent.get(NODES.a)).metadata?.resourceVersion as string;
    for (const type of ["merge", "strategic", "json", "apply"] as const) {
      const updated = await write(type, labelsPatch(type, { [zone]: `rack-${type}` }));
      assert.equal(updated.metadata?.labels?.[zone], `rack-${type}`, type);
      if (type === "apply") {
        // Its own manager's entries may change: the apply added one (operation Apply) that owns the zone.
        const own = updated.metadata?.managedFields?.find((e) => e.manager === "local-ccm" && e.operation === "Apply");
        assert.ok((own?.fieldsV1 as Fields | undefined)?.["f:metadata"]?.["f:labels"]?.[`f:${zone}`]);
      }
      const text = await denial(() => write(type, labelsPatch(type, { "example.com/forged": "x" }), { dryRun }));
      assert.ok(text.endsWith(`${ONLY_ALLOWED}${LABELS_ONLY}`), `${type}: ${text}`);
      // A stale resourceVersion is refused before admission, for an allowed change and a refused one alike.
      const changes: Record<string, string>[] = [{ [zone]: "rack-stale" }, { "example.com/forged": "x" }];
      for (const labels of changes) {
        const text = await refused(() => write(type, labelsPatch(type, labels, stale)), "Conflict");
        assert.match(text, /the object has been modified/, `${type}: ${text}`);
      }
      const now = (await admin.get(NODES.a)).metadata?.labels ?? {};
      assert.equal(now[zone], `rack-${type}`, type);
      assert.equal(now["example.com/forged"], undefined, type);
    }
  });

  describe("Events", () => {
    let events: Resource<Event>;
    let byAdmin: Resource<Event>;
    let sequence = 0;
    /** An Event about node-a as the agent's recorder writes it, with `change` on top. */
    const event = (change: Partial<Event> = {}): Event => {
      const now = new Date().toISOString();
      return {
        apiVersion: "v1",
        kind: "Event",
        metadata: { name: `node-a.test-${++sequence}`, namespace: "default" },
        involvedObject: { apiVersion: "v1", kind: "Node", name: NODES.a },
        type: "Normal",
        reason: "AddressesUpdated",
        message: "Node addresses set to InternalIP=198.18.0.10",
        source: { component: "local-ccm", host: NODES.a },
        reportingComponent: "local-ccm",
        reportingInstance: NODES.a,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
        ...change,
      };
    };
    const OWN =
      `local-ccm on node ${NODES.a} may write only Events about Node ${NODES.a} reported by local-ccm from it, ` +
      "but this Event has ";

    before(async () => {
      events = new Resource<Event>(agentClient, EVENTS);
      byAdmin = new Resource<Event>(plane.admin, EVENTS);
      // The Events policy is a policy of its own, and reaches the admission plugin in its own time.
      const aboutNodeB = event({ involvedObject: { apiVersion: "v1", kind: "Node", name: NODES.b } });
      await waitFor(
        "the Events policy to deny an Event about node B",
        async () => (await denial(() => events.create(aboutNodeB, { dryRun }))).includes("ValidatingAdmissionPolicy"),
        30_000,
        200,
      );
    });

    test("the agent records and counts Events about its own Node", async () => {
      const created = await events.create(event());
      const recount = { count: 2, lastTimestamp: new Date().toISOString() };
      const patched = await events.patch(created.metadata?.name as string, "merge", recount);
      assert.equal(patched.count, 2);
    });

    test("an Event about another object, or reported by another component or node, is denied, naming the field", async () => {
      const involved = { apiVersion: "v1", kind: "Node", name: NODES.a };
      const cases: [string, Partial<Event>][] = [
        ['involvedObject.name "node-b"', { involvedObject: { ...involved, name: NODES.b } }],
        [
          'involvedObject.kind "Pod", involvedObject.namespace "default"',
          { involvedObject: { ...involved, kind: "Pod", namespace: "default" } },
        ],
        ['reportingComponent "kubelet"', { reportingComponent: "kubelet" }],
        ['reportingInstance "node-b"', { reportingInstance: NODES.b }],
        ['source.component "kubelet"', { source: { component: "kubelet", host: NODES.a } }],
        ['source.host "node-b"', { source: { component: "local-ccm", host: NODES.b } }],
        ['related.kind "Node", related.name "node-b"', { related: { kind: "Node", name: NODES.b } }],
        [
          'involvedObject.name "node-b", reportingComponent "kubelet", source.component "kubelet"',
          { involvedObject: { ...involved, name: NODES.b }, reportingComponent: "kubelet", source: { component: "kubelet" } },
        ],
      ];
      for (const [problems, change] of cases) {
        const text = await denial(() => events.create(event(change), { dryRun }));
        assert.ok(text.endsWith(`${OWN}${problems}`), `${problems}: ${text}`);
      }
      // Kubernetes itself refuses an involvedObject namespace that is not the Event's; the policy would too.
      const other = { involvedObject: { ...involved, namespace: "kube-system" } };
      assert.match(await refused(() => events.create(event(other), { dryRun }), "Forbidden", "Invalid"), /namespace/);
    });

    test("another component's Event about its Node cannot be changed, nor its own made about another Node", async () => {
      const kubeletEvent = event({ reportingComponent: "kubelet", source: { component: "kubelet", host: NODES.a } });
      const kubelets = await byAdmin.create(kubeletEvent);
      const name = kubelets.metadata?.name as string;
      const text = await denial(() => events.patch(name, "merge", { count: 5 }, { dryRun }));
      assert.ok(
        text.endsWith(
          `local-ccm on node ${NODES.a} may change only its own Events, but the stored Event has ` +
            'reportingComponent "kubelet", source.component "kubelet"',
        ),
        text,
      );
      const own = await events.create(event());
      const moved = { involvedObject: { apiVersion: "v1", kind: "Node", name: NODES.b } };
      const movedText = await denial(() => events.patch(own.metadata?.name as string, "merge", moved, { dryRun }));
      assert.ok(movedText.endsWith(`${OWN}involvedObject.name "node-b"`), movedText);
      assert.equal((await byAdmin.get(name)).count, 1);
    });

    test("events.k8s.io/v1 Events are held to the same rules (regarding, reportingController)", async () => {
      // RBAC grants only core Events; grant these too, to reach the policy.
      const role = "extra-events-k8s-io";
      const rules = ["create", "clusterrole", role, "--verb=create,patch", "--resource=events.events.k8s.io"];
      await plane.kubectl(rules);
      const binding = ["create", "clusterrolebinding", role, `--clusterrole=${role}`];
      await plane.kubectl([...binding, "--serviceaccount=kube-system:local-ccm"]);
      const v1 = new Resource<{ metadata?: { name?: string }; series?: { count?: number } }>(agentClient, {
        ...EVENTS,
        group: "events.k8s.io",
      });
      const newEvent = (change: Record<string, unknown> = {}) => ({
        apiVersion: "events.k8s.io/v1",
        kind: "Event",
        metadata: { name: `node-a.test-${++sequence}`, namespace: "default" },
        eventTime: new Date().toISOString().replace("Z", "000Z"),
        regarding: { apiVersion: "v1", kind: "Node", name: NODES.a },
        reportingController: "local-ccm",
        reportingInstance: NODES.a,
        action: "Reconcile",
        reason: "AddressesUpdated",
        note: "Node addresses set to InternalIP=198.18.0.10",
        type: "Normal",
        ...change,
      });
      const refused = await waitFor("the events.k8s.io create to reach admission", async () => {
        const text = await denial(() => v1.create(newEvent({ regarding: { kind: "Node", name: NODES.b } }), { dryRun }));
        return text.includes("ValidatingAdmissionPolicy") && text;
      });
      assert.ok(refused.endsWith(`${OWN}regarding.name "node-b"`), refused);
      const cases: [string, Record<string, unknown>][] = [
        ['reportingController "kubelet"', { reportingController: "kubelet" }],
        ['reportingInstance "node-b"', { reportingInstance: NODES.b }],
      ];
      for (const [problems, change] of cases) {
        const text = await denial(() => v1.create(newEvent(change), { dryRun }));
        assert.ok(text.endsWith(`${OWN}${problems}`), `${problems}: ${text}`);
      }
      // Only series changes once an events.k8s.io Event is written (the API refuses any other change).
      const series = () => ({ series: { count: 2, lastObservedTime: new Date().toISOString().replace("Z", "000Z") } });
      const created = await v1.create(newEvent());
      const counted = await v1.patch(created.metadata?.name as string, "merge", series());
      assert.equal(counted.series?.count, 2);
      const byAdminV1 = new Resource<{ metadata?: { name?: string } }>(plane.admin, { ...EVENTS, group: "events.k8s.io" });
      const kubelets = await byAdminV1.create(newEvent({ reportingController: "kubelet" }));
      const text = await denial(() => v1.patch(kubelets.metadata?.name as string, "merge", series(), { dryRun }));
      const stored = 'the stored Event has reportingController "kubelet"';
      assert.ok(text.endsWith(`local-ccm on node ${NODES.a} may change only its own Events, but ${stored}`), text);
    });

    test("a token not bound to a Pod on a Node writes no Event", async () => {
      const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "local-ccm" });
      const unbound = new Resource<Event>(await clientAs(kubeconfig), EVENTS);
      assert.match(await denial(() => unbound.create(event(), { dryRun })), /its token names none/);
    });
  });

  test("past 10 Update managers the apiserver merges the oldest into ancient-changes: the agent still writes", async () => {
    // Ten managers annotate node-a, as kubectl, network plugins and operators do on a busy node.
    for (let i = 0; i < 10; i++) {
      const annotations = { [`example.com/by-m${i}`]: "x" };
      await admin.patch(NODES.a, "merge", { metadata: { annotations } }, { fieldManager: `m${i}` });
    }
    const node = await admin.get(NODES.a);
    const updateEntries = (n: Node) => (n.metadata?.managedFields ?? []).filter((e) => e.operation === "Update");
    assert.equal(updateEntries(node).length, 10);
    assert.ok(updateEntries(node).some((e) => e.manager === "ancient-changes"));
    // Its write adds none of its entries (it has them), so another manager's write first: m10 goes past the cap.
    await admin.patch(NODES.a, "merge", { metadata: { annotations: { "example.com/by-m10": "x" } } }, { fieldManager: "m10" });
    const capped = await admin.get(NODES.a);
    const ownEntry = (n: Node) => n.metadata?.managedFields?.find((e) => e.manager === "local-ccm" && !e.subresource);
    // Drop the agent's main entry (as admin), so that its next write adds one and the apiserver merges again.
    const without = (capped.metadata?.managedFields ?? []).filter((e) => e !== ownEntry(capped));
    await admin.patch(NODES.a, "merge", { metadata: { managedFields: without } }, { fieldManager: "m10" });
    const before = await admin.get(NODES.a);
    assert.equal(updateEntries(before).length, 10);
    assert.equal(ownEntry(before), undefined);
    // Its write adds an Update entry, the eleventh: the apiserver merges one (entries of the same second
    // sort in no fixed order, so which one is its choice) into ancient-changes, and the policy lets it.
    const labels = { "topology.kubernetes.io/zone": "rack-cap" };
    const written = await agent.patch(NODES.a, "merge", { metadata: { labels } });
    assert.equal(written.metadata?.labels?.["topology.kubernetes.io/zone"], "rack-cap");
    assert.equal(updateEntries(written).length, 10);
    assert.ok(updateEntries(written).some((e) => e.manager === "ancient-changes"));
    // Dropping an Update entry without its fields going into ancient-changes is still denied. The victim is one
    // the merge left (it may have taken any of the same second, m10's included).
    const entries = written.metadata?.managedFields ?? [];
    const victim = entries.findIndex((e) => e.operation === "Update" && /^m\d+$/.test(e.manager ?? ""));
    assert.ok(victim >= 0, "an Update entry of m0..m10 is left");
    const text = await denial(() =>
      agent.patch(NODES.a, "json", [{ op: "remove", path: `/metadata/managedFields/${victim}` }], { dryRun }),
    );
    const manager = entries[victim]?.manager;
    assert.ok(text.endsWith(`${ONLY_ALLOWED}metadata.managedFields (entries of other field managers: ${manager})`), text);
  });

  test("other users are not restricted", async () => {
    const labels = { "example.com/admin": "yes" };
    const updated = await admin.patch(NODES.b, "merge", { metadata: { labels } });
    assert.equal(updated.metadata?.labels?.["example.com/admin"], "yes");
  });

  // Last: it replaces the policy with the one bgp.enabled renders.
  test("the BGP session report: refused by default; with bgp.enabled that one annotation of its own Node, ≤ 16384 characters", async () => {
    const report = (annotations: Record<string, string | null>, name: string = NODES.a) => () =>
      agent.patch(name, "merge", { metadata: { annotations } }, { dryRun });
    const established = sessionReportText({ "tor-a": "Established" });
    assert.ok((await denial(report({ [SESSIONS_ANNOTATION]: established }))).endsWith(`${ONLY_ALLOWED}metadata.annotations`));

    const policy = await helmTemplate(plane.binaries.helm, [
      "--show-only=templates/node-scope-policy.yaml",
      ...INIT_RULES,
      "--set=bgp.enabled=true",
    ]);
    const policyFile = path.join(plane.dir, "node-scope-policy-bgp.yaml");
    await writeFile(policyFile, policy);
    await plane.kubectl(["apply", "-f", policyFile]);
    await waitFor(
      "the policy to allow the report",
      () => report({ [SESSIONS_ANNOTATION]: established })().then(() => true, () => false),
      30_000,
      200,
    );
    const write = (text: string | null) =>
      agent.patch(NODES.a, "merge", { metadata: { annotations: { [SESSIONS_ANNOTATION]: text } } });
    assert.equal((await write(established)).metadata?.annotations?.[SESSIONS_ANNOTATION], established);
    const active = sessionReportText({ "tor-a": "Active" });
    assert.equal((await write(active)).metadata?.annotations?.[SESSIONS_ANNOTATION], active);

    const onlyAllowed = ONLY_ALLOWED.replace(" labels and remove", ` labels, the ${SESSIONS_ANNOTATION} annotation and remove`);
    const tooLong = `metadata.annotations[${SESSIONS_ANNOTATION}] (at most 16384 characters)`;
    const cases: [string, () => Promise<unknown>][] = [
      ["metadata.annotations", report({ "example.com/x": "y" })],
      ["metadata.annotations", report({ [SESSIONS_ANNOTATION]: established, "example.com/x": "y" })],
      [tooLong, report({ [SESSIONS_ANNOTATION]: `{"tor-a":"Idle"${" ".repeat(16_384)}}` })],
    ];
    for (const [field, request] of cases) {
      const text = await denial(request);
      assert.ok(text.endsWith(`${onlyAllowed}${field}`), `${field}: ${text}`);
    }
    assert.match(
      await denial(report({ [SESSIONS_ANNOTATION]: established }, NODES.b)),
      /local-ccm on node node-a may not change node node-b: only its own Node$/,
    );
    // Removed, as by an agent that no longer peers.
    assert.equal((await write(null)).metadata?.annotations?.[SESSIONS_ANNOTATION], undefined);
  });

  // After the BGP report's test: it replaces the policy (and the RBAC) with what bgp.networkUnavailableCondition renders.
  test("the NetworkUnavailable condition: refused with bgp.enabled alone; with the value that one condition, no other", async () => {
    // kubelet's Ready condition, for the agent to leave alone
    const ready = { type: "Ready", status: "True", reason: "KubeletReady", message: "kubelet is posting ready status" };
    for (const name of [NODES.a, NODES.b])
      await admin.patch(name, "strategic", { status: { conditions: [ready] } }, { subresource: "status" });
    const condition = (status: string, reason: string) => ({
      type: "NetworkUnavailable",
      status,
      reason,
      message: "local-ccm announces 10.244.1.0/24 over BGP to BGPPeer tor",
      lastHeartbeatTime: "2026-01-01T00:00:00Z",
      lastTransitionTime: "2026-01-01T00:00:00Z",
    });
    // As the agent writes it with the value: a strategic merge of the one condition into nodes/status.
    const patch = (conditions: object[], name: string = NODES.a, options = { dryRun }) => () =>
      agent.patch(name, "strategic", { status: { conditions } }, { subresource: "status", ...options });
    // bgp.enabled alone: the agent's PUT of nodes/status may not carry the condition (and RBAC grants no patch).
    const current = await agent.get(NODES.a);
    const put = { ...current, status: { ...current.status, conditions: [...(current.status?.conditions ?? []), condition("False", "RouteCreated")] } };
    const onlyBgp = ONLY_ALLOWED.replace(" labels and remove", ` labels, the ${SESSIONS_ANNOTATION} annotation and remove`);
    assert.ok((await denial(() => agent.update(put, { subresource: "status", dryRun }))).endsWith(`${onlyBgp}status.conditions`));
    assert.ok(isApiError(await patch([condition("False", "RouteCreated")])().catch((err: unknown) => err), "Forbidden"));

    const values = ["--set=bgp.enabled=true", "--set=bgp.advertisePodCIDRs=true", "--set=bgp.networkUnavailableCondition=true"];
    const rendered = await helmTemplate(plane.binaries.helm, [
      "--show-only=templates/node-scope-policy.yaml",
      "--show-only=templates/rbac.yaml",
      ...INIT_RULES,
      ...values,
    ]);
    const file = path.join(plane.dir, "node-scope-policy-condition.yaml");
    await writeFile(file, rendered);
    await plane.kubectl(["apply", "-f", file]);
    await waitFor(
      "the policy and RBAC to allow the condition",
      () => patch([condition("False", "RouteCreated")])().then(() => true, () => false),
      30_000,
      200,
    );
    const written = await patch([condition("False", "RouteCreated")], NODES.a, { dryRun: false })();
    const conditions = written.status?.conditions ?? [];
    // a new entry goes first, kubelet's stays as it was
    assert.deepEqual(conditions.map((c) => `${c.type}=${c.status}`).sort(), ["NetworkUnavailable=False", "Ready=True"]);
    assert.deepEqual(conditions.find((c) => c.type === "Ready"), { ...ready, lastHeartbeatTime: null, lastTransitionTime: null });
    await patch([{ ...condition("True", "NoRouteCreated"), message: "local-ccm has no BGP peer holding 10.244.1.0/24" }], NODES.a, { dryRun: false })();

    const onlyAllowed = onlyBgp.replace(" annotation and remove", " annotation, the NetworkUnavailable condition and remove");
    const cases: [string, () => Promise<unknown>][] = [
      ["kubelet's Ready changed beside it", patch([condition("False", "RouteCreated"), { ...ready, status: "False" }])],
      ["Ready alone", patch([{ ...ready, status: "Unknown" }])],
      ["another condition added", patch([{ type: "MemoryPressure", status: "True" }])],
    ];
    for (const [name, request] of cases) {
      const text = await denial(request);
      assert.ok(text.endsWith(`${onlyAllowed}status.conditions`), `${name}: ${text}`);
    }
    assert.match(
      await denial(patch([condition("False", "RouteCreated")], NODES.b)),
      /local-ccm on node node-a may not change node node-b: only its own Node$/,
    );
  });
});
