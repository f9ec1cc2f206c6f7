// The API server accepts what we ship: the static deploy/ files and the chart with non-default
// values, applied with a server-side dry run (full validation and admission, nothing stored).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { parse } from "yaml";
import { CHART_DIR, DEPLOY_DIR, helmTemplate, templateNames } from "../../scripts/render-manifests.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { run } from "../../localcluster/exec.ts";

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
      "customresourcedefinition.apiextensions.k8s.io/bgppeers.local-ccm.io",
      "customresourcedefinition.apiextensions.k8s.io/loadbalancerippools.local-ccm.io",
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
      "validatingadmissionpolicy.admissionregistration.k8s.io/local-ccm-events",
      "validatingadmissionpolicy.admissionregistration.k8s.io/local-ccm-node-scope",
      "validatingadmissionpolicy.admissionregistration.k8s.io/node-lifecycle-controller-announcer",
      "validatingadmissionpolicy.admissionregistration.k8s.io/node-lifecycle-controller-deletions",
      "validatingadmissionpolicy.admissionregistration.k8s.io/node-lifecycle-controller-lease",
      "validatingadmissionpolicybinding.admissionregistration.k8s.io/local-ccm-events",
      "validatingadmissionpolicybinding.admissionregistration.k8s.io/local-ccm-node-scope",
      "validatingadmissionpolicybinding.admissionregistration.k8s.io/node-lifecycle-controller-announcer",
      "validatingadmissionpolicybinding.admissionregistration.k8s.io/node-lifecycle-controller-deletions",
      "validatingadmissionpolicybinding.admissionregistration.k8s.io/node-lifecycle-controller-lease",
    ]);
  });

  test("the chart with non-default values", async () => {
    const manifests = await helmTemplate(plane.binaries.helm, [
      "--set-string=ipDetection.internalIPCIDR=198.18.0.0/15",
      "--set-string=ipDetection.externalIPInterface=eth1",
      "--set=agent.healthBindAddress=",
      "--set=agent.logFormat=json",
      "--set=nodeLifecycleController.replicas=3",
      "--set=nodeLifecycleController.placement=any",
      "--set=nodeLifecycleController.controller.probes=tcp",
      "--set=nodeLifecycleController.controller.leaderElection.resourceNamespace=kube-public",
      "--set=nodeLifecycleController.controller.leaderElection.resourceName=nlc-leader",
      "--set-string=nodeLifecycleController.controller.protectedLabels=example.com/keep=yes\\,example.com/pin",
      "--set-string=nodeLifecycleController.controller.protectedAnnotations=example.com/hold=until friday",
      "--set=nodeLifecycleController.controller.healthBindAddress=[::]:9100",
      "--set=podSecurity.runAsUser=1000",
      "--set=podSecurity.runAsGroup=1000",
      "--set=image.tag=dev",
      "--set=metrics.tlsSecretName=metrics-tls", // the Secret's volume and mounts, as the server validates them
      "--set=loadBalancer.l2.enabled=true",
      "--set=loadBalancer.l2.pools.claimClassless=true",
      "--set=loadBalancer.nodeAddress.enabled=false",
    ]);
    const objects = created(await plane.kubectl(["apply", "--dry-run=server", "-f", "-"], manifests));
    // The 26 of deploy/ with the pools' grants, and layer-2 announcement's Roles, bindings and policy (the metrics
    // certificate is the operator's Secret).
    assert.equal(objects.length, 32);
    assert.ok(objects.includes("role.rbac.authorization.k8s.io/local-ccm-announcer"));
    assert.ok(objects.includes("validatingadmissionpolicy.admissionregistration.k8s.io/local-ccm-announcer-lease"));
    assert.ok(objects.includes("daemonset.apps/local-ccm"));
    assert.ok(objects.includes("deployment.apps/node-lifecycle-controller"));
  });

  test("the chart with lists, --set numbers and every pod knob", async () => {
    const affinity = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchExpressions: [{ key: "topology.kubernetes.io/zone", operator: "In", values: ["a"] }] }],
        },
      },
    };
    const manifests = await helmTemplate(plane.binaries.helm, [
      "--set=ipDetection.internalIPCIDR={198.18.0.0/15,fd00:198:18::/48}",
      "--set=metadata.zoneRules={cidr:198.18.0.0/24=rack-1,cidr:198.18.1.0/24=rack-2}",
      "--set=nodeLifecycleController.controller.protectedLabels={example.com/keep=yes,example.com/pin}",
      "--set=nodeLifecycleController.controller.unhealthyThreshold=0.5",
      "--set-string=nodeLifecycleController.controller.kubeletPort=10251",
      "--set=csrApproval.enabled=true",
      "--set=csrApproval.rules.ipAllowlist={198.18.0.0/15}",
      "--set=loadBalancer.reservedPorts={22,10250-10266}",
      "--set-string=loadBalancer.maxNodes=8",
      "--set=imagePullSecrets[0].name=regcred",
      "--set=podLabels.team=net",
      "--set=podAnnotations.example\\.com/owner=net",
      "--set=nodeLifecycleController.podLabels.team=ops",
      "--set=nodeLifecycleController.podAnnotations.example\\.com/owner=ops",
      `--set-json=affinity=${JSON.stringify(affinity)}`,
      `--set-json=nodeLifecycleController.affinity=${JSON.stringify(affinity)}`,
    ]);
    const objects = created(await plane.kubectl(["apply", "--dry-run=server", "-f", "-"], manifests));
    // The 26 of deploy/ and the chart's metrics certificate (a Secret): the approver's cluster-wide rules join the
    // program's ClusterRole, and its Role in "default" is left out while the service controller runs (its
    // cluster-wide grant covers it).
    assert.equal(objects.length, 27);
    for (const kind of ["role", "rolebinding"])
      assert.ok(!objects.includes(`${kind}.rbac.authorization.k8s.io/node-lifecycle-controller-kubelet-serving-csr`), kind);
  });

  test("helm install's notes say what to check next", async () => {
    const helmInstall = (...values: string[]) =>
      run(plane.binaries.helm, [
        "install",
        "local-ccm",
        CHART_DIR,
        "--dry-run=server",
        "--namespace=kube-system",
        `--kubeconfig=${plane.kubeconfigPath}`,
        ...values,
      ]);
    const notes = (await helmInstall()).replace(/^[\s\S]*?\nNOTES:\n/, "");
    for (const line of [
      "kubectl -n kube-system rollout status daemonset/local-ccm",
      "node.cloudprovider.kubernetes.io/uninitialized",
      "kubectl get events -n default --field-selector involvedObject.kind=Node,source=local-ccm",
      "kubectl -n kube-system rollout status deployment/node-lifecycle-controller",
      "kubectl -n kube-system get lease node-lifecycle-controller",
      "docs/troubleshooting.md",
      "docs/install.md",
    ])
      assert.ok(notes.includes(line), `notes hold ${line}: ${notes}`);
    for (const page of notes.match(/docs\/[\w-]+\.md/g) ?? [])
      assert.ok(existsSync(path.join(CHART_DIR, "../..", page)), `the notes name ${page}, which exists`);
    const agentOnly = await helmInstall("--set=nodeLifecycleController.enabled=false");
    assert.doesNotMatch(agentOnly.replace(/^[\s\S]*?\nNOTES:\n/, ""), /lease|node-lifecycle-controller/);
    // A value set under its old name (renamed.yaml): one warning line each, naming the new name.
    assert.doesNotMatch(notes, /WARNING/);
    const { renamed } = parse(readFileSync(path.join(CHART_DIR, "renamed.yaml"), "utf8")) as {
      renamed: Record<string, string>;
    };
    const oldValues = Object.keys(renamed).map((old) =>
      old === "controller" ? "--set=controller.verbosity=2" : `--set=${old}=example.com/pool=a`,
    );
    const warned = (await helmInstall(...oldValues)).replace(/^[\s\S]*?\nNOTES:\n/, "");
    const warnings = warned.split("\n").filter((line) => line.startsWith("WARNING:"));
    assert.deepEqual(
      warnings.sort(),
      Object.entries(renamed)
        .map(
          ([old, name]) =>
            `WARNING: the value ${old} is renamed ${name}: set ${name} instead (the old name works for this release only).`,
        )
        .sort(),
    );
  });

  test("helm install refuses conflicting options with one line and creates nothing", async () => {
    const install = spawnSync(
      plane.binaries.helm,
      [
        "install",
        "local-ccm",
        CHART_DIR,
        "--namespace=kube-system",
        `--kubeconfig=${plane.kubeconfigPath}`,
        "--set=ipDetection.externalIPTarget=1.1.1.1",
        "--set=ipDetection.externalIPInterface=eth0",
      ],
      { encoding: "utf8" },
    );
    assert.notEqual(install.status, 0, install.stdout);
    assert.match(
      install.stderr,
      /^Error: INSTALLATION FAILED: execution error at \(local-ccm\/templates\/daemonset\.yaml:\d+:\d+\): ipDetection\.externalIPTarget and ipDetection\.externalIPInterface both choose how ExternalIPs are found: set one$/m,
    );
    const left = await plane.kubectl(["get", "daemonsets,secrets", "-n", "kube-system", "-o", "name"]);
    assert.doesNotMatch(left, /local-ccm/, "no workload and no release record");
  });
});
