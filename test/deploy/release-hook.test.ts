// The chart's post-delete hook (templates/release-hook.yaml) as helm renders it: a Job running
// `node-lifecycle-controller release-all` with the controllers' own flags, its ServiceAccount and RBAC made before it,
// all deleted once it succeeds; its Lease grant follows the Lease; never in deploy/ (kubectl would run it at once).
import assert from "node:assert/strict";
import { before, test } from "node:test";
import type { Container } from "kubernetes-types/core/v1.js";
import type { PolicyRule } from "kubernetes-types/rbac/v1.js";
import { parseAllDocuments } from "yaml";
import { ensureBinaries } from "../../localcluster/build.ts";
import { helmTemplate, renderDeployFiles } from "../../scripts/render-manifests.ts";
import { parseManagerFlags } from "../../src/manager/flags.ts";
import { CHART_CERTIFICATE_ARGS } from "./shipped.ts";

interface KubeObject {
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string> };
  rules?: PolicyRule[];
  spec?: { template?: { spec?: { containers: Container[]; serviceAccountName?: string } } };
}

const NAME = "node-lifecycle-controller-release";
let helm: string;
const render = async (args: string[] = []): Promise<KubeObject[]> =>
  parseAllDocuments(await helmTemplate(helm, args, { hooks: true }))
    .map((doc) => doc.toJS() as KubeObject | null)
    .filter((obj): obj is KubeObject => obj !== null);
const hooks = (objects: KubeObject[]) => objects.filter((obj) => obj.metadata.annotations?.["helm.sh/hook"]);
const containerOf = (objects: KubeObject[], kind: string, name: string) => {
  const found = objects.find((obj) => obj.kind === kind && obj.metadata.name === name);
  assert.ok(found, `${kind} ${name} is rendered`);
  return found.spec?.template?.spec?.containers[0] as Container;
};

before(async () => {
  ({ helm } = await ensureBinaries());
});

test("a post-delete Job runs release-all with the controllers' flags; its RBAC first, all gone once it succeeds", async () => {
  const values = [
    "--namespace=ops",
    "--set=loadBalancer.l2.enabled=true",
    "--set=nodeLifecycleController.controller.leaderElection.resourceName=nlc-leader",
    "--set=nodeLifecycleController.controller.leaderElection.resourceNamespace=leases",
  ];
  const objects = await render(values);
  const rendered = hooks(objects);
  assert.deepEqual(rendered.map(({ kind }) => kind).sort(),
    ["ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"]);
  for (const { kind, metadata } of rendered) {
    assert.equal(metadata.name, NAME);
    assert.equal(metadata.annotations?.["helm.sh/hook"], "post-delete", kind);
    assert.equal(metadata.annotations?.["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded", kind);
    // Helm makes hooks of a lower weight first: the Job's grants exist before it runs.
    assert.equal(metadata.annotations?.["helm.sh/hook-weight"], kind === "Job" ? undefined : "-5", kind);
  }
  const job = containerOf(objects, "Job", NAME);
  const controller = containerOf(objects, "Deployment", "node-lifecycle-controller");
  assert.deepEqual(job.command, controller.command);
  // The values' flags, as the controllers get them (not the chart's own: metrics certificate, --controllers, …).
  assert.equal(job.args?.[0], "release-all");
  const controllerArgs = (controller.args ?? []).filter((arg) => !CHART_CERTIFICATE_ARGS.includes(arg));
  assert.deepEqual(job.args?.slice(1), controllerArgs.filter((arg) => arg.startsWith("--leader-elect")));
  const flags = parseManagerFlags((job.args ?? []).slice(1), { POD_NAMESPACE: "ops" });
  assert.deepEqual([flags.leaderElection.resourceNamespace, flags.leaderElection.resourceName], ["leases", "nlc-leader"]);
  const role = rendered.find(({ kind }) => kind === "Role");
  assert.equal(role?.metadata.namespace, "leases");
  assert.deepEqual(role?.rules, [
    { apiGroups: ["coordination.k8s.io"], resources: ["leases"], resourceNames: ["nlc-leader"], verbs: ["get", "update"] },
  ]);
  // Reads, and patches only Services and pools (to remove a finalizer): no delete, no status, no create.
  const verbs = rendered.find(({ kind }) => kind === "ClusterRole")?.rules?.flatMap((rule) => rule.verbs);
  assert.deepEqual([...new Set(verbs)].sort(), ["list", "patch"]);
});

test("no hook without the central program, and none in deploy/", async () => {
  assert.deepEqual(hooks(await render(["--set=nodeLifecycleController.enabled=false"])), []);
  const deploy = [...(await renderDeployFiles(helm)).values()].join("\n");
  assert.ok(!deploy.includes("helm.sh/hook"), "deploy/ holds a Helm hook");
});
