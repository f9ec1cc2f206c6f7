// The controllers node-lifecycle-controller hosts: one line each. Their order is the order of their flags in
// --help and docs/reference.md, of their metrics, and of their start.
import { bgpPeerStatus } from "../bgppeers/definition.ts";
import { markdownTable } from "../cli/markdown.ts";
import { kubeletServingCsr } from "../csr/definition.ts";
import { nodeLifecycle } from "../lifecycle/definition.ts";
import { servicePools } from "../pools/definition.ts";
import { serviceLoadBalancer } from "../service/definition.ts";
import type { AnyController, PolicyRule } from "../controller/definition.ts";

export const CONTROLLERS: readonly AnyController[] = [
  nodeLifecycle,
  kubeletServingCsr,
  serviceLoadBalancer,
  servicePools,
  bgpPeerStatus,
];

/**
 * The docs' table of controllers: name, whether --controllers=* runs it (and the chart's switch, if any), what it
 * does, where its flags are.
 */
export function controllersMarkdown(): string {
  const code = (text: string) => `\`${text}\``;
  return markdownTable(
    ["controller", "on by default", "what it does", "its flags"],
    CONTROLLERS.map(({ name, enabledByDefault, helmEnabled, summary, flags }) => [
      code(name),
      `${enabledByDefault ? "yes" : "no"}${helmEnabled ? ` (Helm ${helmEnabled.map(code).join(" or ")})` : ""}`,
      summary,
      flags.map((spec) => code(`--${spec.name}`)).join(", "),
    ]),
  );
}

/** Whether `grants` allow every request `rule` allows: each group, resource and verb, and each name it names. */
export function rulesGrant(grants: readonly PolicyRule[], rule: PolicyRule): boolean {
  const names = rule.resourceNames?.length ? rule.resourceNames : [undefined];
  return rule.apiGroups.every((group) =>
    rule.resources.every((resource) =>
      rule.verbs.every((verb) =>
        names.every((name) =>
          grants.some(
            (grant) =>
              grant.apiGroups.includes(group) &&
              grant.resources.includes(resource) &&
              grant.verbs.includes(verb) &&
              (!grant.resourceNames?.length || (name !== undefined && grant.resourceNames.includes(name))),
          ),
        ),
      ),
    ),
  );
}

/**
 * Per namespace of a controller's Roles, the other controllers whose cluster-wide rules alone grant all of that
 * Role's rules: while one of them runs, the Role adds nothing to what the program may do (and goes unused when
 * the shared informers widen its watch to the cluster), so the chart leaves it out.
 */
export function rolesCoveredBy(controller: AnyController): Record<string, string[]> {
  return Object.fromEntries(
    Object.entries(controller.rbac.namespaced ?? {}).map(([namespace, rules]) => [
      namespace,
      CONTROLLERS.filter(
        (other) => other !== controller && rules.every((rule) => rulesGrant(other.rbac.cluster, rule)),
      ).map((other) => other.name),
    ]),
  );
}
