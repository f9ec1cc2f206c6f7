// The API server accepts what we ship: the static deploy/ files and the chart with non-default
// values, applied with a server-side dry run (full validation and admission, nothing stored).
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { DEPLOY_DIR, helmTemplate, templateNames } from "../../scripts/render-manifests.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";

/** "kind/name" of each object kubectl reports as created in the dry run. */
function created(output: string): string[] {
  return output
    .trim()
    .split("\n")
    .map((line) => {
      const match = /^(\S+) created \(server dry run\)$/.exec(line);
      assert.ok(match, `unexpected kubectl output: ${line}`);
      return match[1] as string;
    })
    .sort();
}

describe("server-side dry-run apply", () => {
  let plane: ControlPlane;
  before(async () => {
    plane = await startControlPlane();
  });
  after(async () => {
    await plane?.stop();
  });

  test("deploy/*.yaml", async () => {
    const files = (await templateNames()).flatMap((name) => ["-f", path.join(DEPLOY_DIR, name)]);
    assert.deepEqual(created(await plane.kubectl(["apply", "--dry-run=server", ...files])), [
      "clusterrole.rbac.authorization.k8s.io/local-ccm",
      "clusterrole.rbac.authorization.k8s.io/local-ccm-metrics-reader",
      "clusterrole.rbac.authorization.k8s.io/node-lifecycle-controller",
      "clusterrolebinding.rbac.authorization.k8s.io/local-ccm",
      "clusterrolebinding.rbac.authorization.k8s.io/node-lifecycle-controller",
      "daemonset.apps/local-ccm",
      "deployment.apps/node-lifecycle-controller",
      "poddisruptionbudget.policy/node-lifecycle-controller",
      "role.rbac.authorization.k8s.io/local-ccm-events",
      "role.rbac.authorization.k8s.io/node-lifecycle-controller",
      "role.rbac.authorization.k8s.io/node-lifecycle-controller-events",
      "rolebinding.rbac.authorization.k8s.io/local-ccm-events",
      "rolebinding.rbac.authorization.k8s.io/node-lifecycle-controller",
      "rolebinding.rbac.authorization.k8s.io/node-lifecycle-controller-events",
      "serviceaccount/local-ccm",
      "serviceaccount/node-lifecycle-controller",
      "validatingadmissionpolicy.admissionregistration.k8s.io/local-ccm-node-scope",
      "validatingadmissionpolicybinding.admissionregistration.k8s.io/local-ccm-node-scope",
    ]);
  });

  test("the chart with non-default values", async () => {
    const manifests = await helmTemplate(plane.binaries.helm, [
      "--set-string=ipDetection.internalIPCIDR=198.18.0.0/15",
      "--set-string=ipDetection.externalIPInterface=eth1",
      "--set=controller.healthBindAddress=",
      "--set=controller.logFormat=json",
      "--set=nodeLifecycleController.replicas=3",
      "--set=nodeLifecycleController.placement=any",
      "--set=nodeLifecycleController.controller.probes=tcp",
      "--set=nodeLifecycleController.controller.leaderElection.resourceNamespace=kube-public",
      "--set=nodeLifecycleController.controller.healthBindAddress=[::]:9100",
      "--set=podSecurity.runAsUser=1000",
      "--set=podSecurity.runAsGroup=1000",
      "--set=image.tag=dev",
      "--set=metrics.tlsSecretName=metrics-tls", // the Secret's volume and mounts, as the server validates them
    ]);
    const objects = created(await plane.kubectl(["apply", "--dry-run=server", "-f", "-"], manifests));
    assert.equal(objects.length, 18);
    assert.ok(objects.includes("daemonset.apps/local-ccm"));
    assert.ok(objects.includes("deployment.apps/node-lifecycle-controller"));
  });
});
