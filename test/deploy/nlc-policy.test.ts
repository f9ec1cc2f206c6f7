// The node-lifecycle-controller's admission policies (charts/local-ccm/templates/nlc-policy.yaml) and Lease
// grants (nlc-rbac.yaml) on the real control plane, with the controller's own ServiceAccount token: it may
// not delete a control-plane, protected or Ready Node, with dryRun or for real, and may delete a NotReady,
// unprotected worker; it may read and write its own leader-election Lease and no other, and create no
// other. Other users are not restricted.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { helmTemplate } from "../../scripts/render-manifests.ts";
import { nodeObject, SERVICE_ACCOUNT } from "../lifecycle/world.ts";
import { denial } from "./refused.ts";

const LEASES = { group: "coordination.k8s.io", version: "v1", plural: "leases", namespace: "kube-system" } as const;
const LEASE = "node-lifecycle-controller";
const VALUES = {
  "nodeLifecycleController.controller.protectedLabels": "example.com/keep=yes, example.com/pin",
  "nodeLifecycleController.controller.protectedAnnotations": "example.com/hold=until friday",
};
const PREFIX = "node-lifecycle-controller may not delete node";

/** A NotReady (Unknown) worker as kubelet registered it, with `labels`, `annotations` and Ready as given. */
function node(
  name: string,
  extra: { labels?: Record<string, string>; annotations?: Record<string, string>; ready?: "True" },
): Node {
  const object = nodeObject(name, { address: "198.18.0.1", labels: extra.labels, ready: extra.ready, tainted: false });
  return { ...object, metadata: { ...object.metadata, annotations: extra.annotations } };
}

describe("the node-lifecycle-controller's deletions and Lease, limited on the server", () => {
  let plane: ControlPlane;
  let admin: Resource<Node>;
  let nodes: Resource<Node>;
  let leases: Resource<Lease>;
  let client: KubeClient;
  const dryRun = true;

  before(async () => {
    plane = await startControlPlane();
    admin = new Resource<Node>(plane.admin, NODE_RESOURCE);
    const set = Object.entries(VALUES).flatMap(([key, value]) => ["--set-string", `${key}=${value.replaceAll(",", "\\,")}`]);
    const shown = ["templates/nlc-rbac.yaml", "templates/nlc-policy.yaml"].flatMap((file) => ["--show-only", file]);
    await plane.kubectl(["apply", "-f", "-"], await helmTemplate(plane.binaries.helm, [...set, ...shown]));
    const config = await loadClientConfig({ kubeconfig: await plane.serviceAccountKubeconfig(SERVICE_ACCOUNT) });
    client = new KubeClient(config, { component: "test-nlc", maxRetries: 0 });
    nodes = new Resource<Node>(client, NODE_RESOURCE);
    leases = new Resource<Lease>(client, LEASES);
    await admin.create(node("control-plane-0", { labels: { "node-role.kubernetes.io/control-plane": "" } }));
    // A new policy takes a moment to reach the admission plugin: wait until it denies what it must.
    await waitFor(
      "the policy to deny deleting a control-plane node",
      async () => (await denial(() => nodes.delete("control-plane-0", { dryRun }))).includes("ValidatingAdmissionPolicy"),
      30_000,
      200,
    );
  });

  after(async () => {
    client?.close();
    await plane?.stop();
  });

  test("control-plane, protected and Ready nodes are refused, with dryRun and for real, naming rule and value", async () => {
    const cases: [Node, string][] = [
      [node("control-plane-0", {}), "(rule control-plane): it has the label node-role.kubernetes.io/control-plane"],
      [
        node("master-0", { labels: { "node-role.kubernetes.io/master": "" } }),
        "(rule control-plane): it has the label node-role.kubernetes.io/master",
      ],
      [node("kept", { labels: { "example.com/keep": "yes" } }), "(rule protected): protected by label example.com/keep=yes"],
      [node("pinned", { labels: { "example.com/pin": "any" } }), "(rule protected): protected by label example.com/pin"],
      [
        node("held", { annotations: { "example.com/hold": "until friday" } }),
        "(rule protected): protected by annotation example.com/hold=until friday",
      ],
      [node("ready", { ready: "True" }), "(rule ready): its Ready condition is True"],
    ];
    for (const [object, reason] of cases) {
      const name = object.metadata?.name as string;
      if (name !== "control-plane-0") await admin.create(object);
      for (const options of [{ dryRun }, {}]) {
        const message = await denial(() => nodes.delete(name, options));
        const expected = `denied request: ${PREFIX} ${name} ${reason}`;
        assert.ok(message.endsWith(expected), `${name} ${JSON.stringify(options)}: ${message}`);
      }
      assert.ok(await admin.get(name), `${name} is still there`);
    }
    // The first Ready condition False does not hide a later True one.
    const twice = node("ready-twice", {});
    const conditions = [{ type: "Ready", status: "False" }, { type: "Ready", status: "True" }];
    await admin.create({ ...twice, status: { ...twice.status, conditions } });
    assert.match(await denial(() => nodes.delete("ready-twice", { dryRun })), /\(rule ready\)/);
  });

  test("a NotReady worker, unprotected, is deleted (a protected key's other value does not protect)", async () => {
    await admin.create(node("worker", { labels: { "example.com/keep": "no" }, annotations: { "example.com/hold": "x" } }));
    await nodes.delete("worker", { dryRun });
    assert.ok(await admin.get("worker"), "a dry run deletes nothing");
    const { uid, resourceVersion } = (await nodes.get("worker")).metadata ?? {};
    await nodes.delete("worker", { preconditions: { uid, resourceVersion } });
    await waitFor("worker deleted", async () => !(await admin.list()).items.some((n) => n.metadata?.name === "worker"));
  });

  test("another user (admin) deletes control-plane, protected and Ready nodes", async () => {
    for (const name of ["control-plane-0", "kept", "ready"]) await admin.delete(name);
    await waitFor("the nodes deleted", async () => {
      const names = (await admin.list()).items.map((n) => n.metadata?.name);
      return !names.some((name) => ["control-plane-0", "kept", "ready"].includes(name as string));
    });
  });

  test("its token reads and writes its own Lease only, and creates no other", async () => {
    const lease = (name: string): Lease => ({
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name, namespace: LEASES.namespace },
      spec: { holderIdentity: "someone", leaseDurationSeconds: 15 },
    });
    const byAdmin = new Resource<Lease>(plane.admin, LEASES);
    const other = await byAdmin.create(lease("kube-controller-manager"));
    const rbac = `User "system:serviceaccount:kube-system:node-lifecycle-controller" cannot`;
    assert.match(await denial(() => leases.get("kube-controller-manager")), new RegExp(`${rbac} get`));
    const taken = { ...other, spec: { ...other.spec, holderIdentity: "node-lifecycle-controller" } };
    assert.match(await denial(() => leases.update(taken)), new RegExp(`${rbac} update`));
    assert.match(await denial(() => leases.update(taken, { dryRun })), new RegExp(`${rbac} update`));
    assert.equal((await byAdmin.get("kube-controller-manager")).spec?.holderIdentity, "someone");
    // A create names its object only in the body, which RBAC never reads: the policy refuses other names.
    const squat = await waitFor("the create to reach admission", async () => {
      const text = await denial(() => leases.create(lease("kube-scheduler"), { dryRun }));
      return text.includes("ValidatingAdmissionPolicy") && text;
    });
    const refusal =
      "node-lifecycle-controller may create only its leader-election Lease kube-system/node-lifecycle-controller, " +
      "not kube-system/kube-scheduler";
    assert.ok(squat.endsWith(refusal), squat);
    assert.ok((await denial(() => leases.create(lease("kube-scheduler")))).endsWith(refusal));
    // Its own: create, read, update.
    const own = await leases.create(lease(LEASE));
    assert.equal((await leases.get(LEASE)).metadata?.uid, own.metadata?.uid);
    const renewed = await leases.update({ ...own, spec: { ...own.spec, holderIdentity: "replica-a" } });
    assert.equal(renewed.spec?.holderIdentity, "replica-a");
  });
});
