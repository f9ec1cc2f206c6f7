// Who announces a Service's pool addresses is the pool controller's to say: the node-lifecycle-controller-announcer
// admission policy (deploy/announcer-policy.yaml) on the real control plane, acted against as a namespace editor
// (RBAC `edit` in its namespace, which lets it write any label and annotation of its own Services) and as the
// controller (the node-lifecycle-controller ServiceAccount under the shipped RBAC, deploy/nlc-rbac.yaml). The editor
// can neither set, change nor remove the announcer label or annotation (src/pools/announcement.ts), by create, update
// or any patch type, and each refusal names its rule and the values; everything else about its Service stays its
// own. The controller's writes, the merge patches pools/controller.ts sends, pass.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { ANNOUNCER_ANNOTATION, ANNOUNCER_LABEL } from "../../src/pools/announcement.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { namespaceEditor } from "../../localcluster/editor.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { denial } from "./refused.ts";

const DEPLOY = path.resolve(import.meta.dirname, "../../deploy");
const TENANT = "tenant-a";
const CONTROLLER = "system:serviceaccount:kube-system:node-lifecycle-controller";
const KEY = ANNOUNCER_LABEL;

/** The end of the policy's refusal of a change of the announcer `what` from `before` to `after` (null: none). */
const rule = (what: "label" | "annotation", before: string | null, after: string | null) => {
  const shown = (value: string | null) => (value === null ? "none" : `"${value}"`);
  return (
    `only the pool controller (${CONTROLLER}) may set, change or remove the ${what} ${KEY} of a Service ` +
    `(rule announcer-${what}): ${shown(before)} -> ${shown(after)}`
  );
};

function service(name: string, metadata: Service["metadata"] = {}): Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { ...metadata, name, namespace: TENANT },
    spec: { type: "LoadBalancer", loadBalancerClass: "local-ccm.io/l2", ports: [{ port: 80, protocol: "TCP" }] },
  };
}

describe("announcer assignment admission policy", () => {
  let plane: ControlPlane;
  const clients: KubeClient[] = [];
  let editor: Resource<Service>;
  let controller: Resource<Service>;
  const dryRun = true;

  const servicesAs = async (kubeconfig: string) => {
    const client = new KubeClient(await loadClientConfig({ kubeconfig }), { component: "test", maxRetries: 0 });
    clients.push(client);
    return new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace: TENANT });
  };
  const assertRefused = async (what: string, request: () => Promise<unknown>, message: string) => {
    const text = await denial(request);
    assert.ok(text.endsWith(`denied request: ${message}`), `${what}: ${text}`);
  };

  before(async () => {
    // kube-controller-manager fills the aggregated `edit` ClusterRole.
    plane = await startControlPlane({ controllerManager: true });
    const files = ["nlc-rbac.yaml", "announcer-policy.yaml"].flatMap((name) => ["-f", path.join(DEPLOY, name)]);
    await plane.kubectl(["apply", ...files]);
    editor = await servicesAs((await namespaceEditor(plane, TENANT)).kubeconfig);
    controller = await servicesAs(
      await plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "node-lifecycle-controller" }),
    );
    // A new policy takes a moment to reach the admission plugin: wait for its first denial.
    await waitFor("the policy in force", async () => {
      const text = await denial(() => editor.create(service("probe", { labels: { [KEY]: "node-a" } }), { dryRun }));
      return text.includes("ValidatingAdmissionPolicy");
    }, 60_000);
  });

  after(async () => {
    for (const client of clients) client.close();
    await plane?.stop();
  });

  test("the editor cannot create a Service carrying the label or the annotation", async () => {
    await assertRefused(
      "label",
      () => editor.create(service("own", { labels: { [KEY]: "node-a" } })),
      rule("label", null, "node-a"),
    );
    await assertRefused(
      "annotation",
      () => editor.create(service("own", { annotations: { [ANNOUNCER_ANNOTATION]: "node-a" } })),
      rule("annotation", null, "node-a"),
    );
  });

  test("the editor cannot set them on its Service, by any patch type or update; other labels stay its own", async () => {
    const created = await editor.create(service("web", { labels: { app: "web" } }));
    const labelled = { metadata: { labels: { [KEY]: "node-a" } } };
    await assertRefused("merge", () => editor.patch("web", "merge", labelled, { dryRun }), rule("label", null, "node-a"));
    await assertRefused("strategic", () => editor.patch("web", "strategic", labelled, { dryRun }), rule("label", null, "node-a"));
    const json = [{ op: "add", path: "/metadata/annotations", value: { [ANNOUNCER_ANNOTATION]: "node-b" } }];
    await assertRefused("json", () => editor.patch("web", "json", json, { dryRun }), rule("annotation", null, "node-b"));
    const applied = { apiVersion: "v1", kind: "Service", metadata: { name: "web", labels: { [KEY]: "node-a" } } };
    await assertRefused(
      "apply",
      () => editor.patch("web", "apply", applied, { dryRun, fieldManager: "tenant" }),
      rule("label", null, "node-a"),
    );
    const withLabel = { ...created, metadata: { ...created.metadata, labels: { app: "web", [KEY]: "node-a" } } };
    await assertRefused("update", () => editor.update(withLabel, { dryRun }), rule("label", null, "node-a"));
    // What the policy does not guard stays the editor's.
    const relabelled = await editor.patch("web", "merge", { metadata: { labels: { tier: "front" } } });
    assert.equal(relabelled.metadata?.labels?.tier, "front");
  });

  test("the controller's writes pass; then the editor can neither change nor remove them, and keeps the rest", async () => {
    await editor.create(service("api"));
    // As pools/controller.ts writes an announcer: a merge patch pinned to the version it read (from its informer;
    // here through the editor, as its RBAC has no get).
    const read = await editor.get("api");
    const assign = (node: string | null, resourceVersion?: string) => ({
      metadata: { resourceVersion, annotations: { [ANNOUNCER_ANNOTATION]: node }, labels: { [KEY]: node } },
    });
    const assigned = await controller.patch("api", "merge", assign("node-a", read.metadata?.resourceVersion));
    assert.equal(assigned.metadata?.annotations?.[ANNOUNCER_ANNOTATION], "node-a");
    assert.equal(assigned.metadata?.labels?.[KEY], "node-a");

    await assertRefused("change", () => editor.patch("api", "merge", assign("node-b"), { dryRun }), rule("annotation", "node-a", "node-b"));
    const removal = [{ op: "remove", path: `/metadata/labels/${KEY.replace("/", "~1")}` }];
    await assertRefused("removal", () => editor.patch("api", "json", removal, { dryRun }), rule("label", "node-a", null));
    // A full update that keeps them (kubectl edit, replace of what was read) and changes something else passes.
    const current = await editor.get("api");
    const edited = await editor.update({
      ...current,
      metadata: { ...current.metadata, annotations: { ...current.metadata?.annotations, note: "mine" } },
    });
    assert.equal(edited.metadata?.annotations?.[ANNOUNCER_ANNOTATION], "node-a");
    assert.equal(edited.metadata?.annotations?.note, "mine");

    // The controller moves and withdraws the assignment.
    assert.equal((await controller.patch("api", "merge", assign("node-b"))).metadata?.labels?.[KEY], "node-b");
    const withdrawn = await controller.patch("api", "merge", assign(null));
    assert.equal(withdrawn.metadata?.labels?.[KEY], undefined);
    assert.equal(withdrawn.metadata?.annotations?.[ANNOUNCER_ANNOTATION], undefined);
    // Deleting its Service is no write of them: the editor may.
    await editor.delete("api");
  });
});
