import assert from "node:assert/strict";
import { test } from "node:test";
import { managerFlagTable, parseManagerFlags } from "./flags.ts";
import { kubeletServingCsr } from "../csr/definition.ts";
import { CONTROLLERS, rolesCoveredBy, rulesGrant } from "./registry.ts";

test("controllers, their metrics subsystems and every flag of the program's table are named once", () => {
  const once = (names: string[], what: string) =>
    assert.deepEqual(
      names.filter((name, i) => names.indexOf(name) !== i),
      [],
      `${what} named twice`,
    );
  once(
    CONTROLLERS.map(({ name }) => name),
    "controllers",
  );
  once(
    CONTROLLERS.map(({ metricsSubsystem }) => metricsSubsystem),
    "metrics subsystems",
  );
  once(
    managerFlagTable.map(({ name }) => name),
    "flags",
  );
});

test("each controller's RBAC lets it list and watch every resource it watches, where it watches it", () => {
  const configs = parseManagerFlags([], {}, () => undefined).configs;
  for (const controller of CONTROLLERS) {
    for (const [key, watch] of Object.entries(controller.watches(configs.get(controller.name)))) {
      const { group, plural, namespace } = watch.resource;
      const rules = [
        ...controller.rbac.cluster,
        ...(namespace === undefined ? [] : (controller.rbac.namespaced?.[namespace] ?? [])),
        // The chart installs into the namespace it passes (deploy/: kube-system, the flags' default).
        ...(namespace === "kube-system" ? (controller.rbac.releaseNamespace ?? []) : []),
      ];
      for (const verb of ["list", "watch"]) {
        assert.ok(
          rules.some((rule) => rule.apiGroups.includes(group) && rule.resources.includes(plural) && rule.verbs.includes(verb)),
          `${controller.name}: its watch "${key}" needs ${verb} on ${plural}${namespace ? ` in ${namespace}` : ""}`,
        );
      }
    }
  }
});

test("rulesGrant: every group, resource, verb and name of the rule, by one grant or several", () => {
  const services = { apiGroups: [""], resources: ["services"], verbs: ["list", "watch"] };
  const kubernetesOnly = { ...services, resourceNames: ["kubernetes"] };
  assert.ok(rulesGrant([services], kubernetesOnly), "a grant without names grants every name");
  assert.ok(!rulesGrant([kubernetesOnly], services), "a grant with names grants only those");
  assert.ok(!rulesGrant([kubernetesOnly], { ...services, resourceNames: ["other"] }));
  assert.ok(!rulesGrant([{ ...services, verbs: ["list"] }], services), "a verb missing");
  assert.ok(rulesGrant([{ ...services, verbs: ["list"] }, { ...services, verbs: ["watch", "patch"] }], services));
  assert.ok(!rulesGrant([{ ...services, apiGroups: ["apps"] }], services), "another group");
  assert.ok(!rulesGrant([services], { ...services, resources: ["services", "endpoints"] }), "a resource missing");
});

test("the CSR approver's Role in default is needless while a LoadBalancer controller runs, and only then", () => {
  assert.deepEqual(rolesCoveredBy(kubeletServingCsr), { default: ["service", "service-l2-pools"] });
  for (const controller of CONTROLLERS.filter((each) => each !== kubeletServingCsr))
    assert.deepEqual(rolesCoveredBy(controller), {}, `${controller.name} has no Role`);
});
