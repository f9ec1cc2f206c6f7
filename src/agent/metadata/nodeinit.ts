// Node init rules: labels and taints a Node gets once, while it still has the uninitialized taint,
// from rules over the host's facts in the metadata rules' language (rules.ts). NodeRestriction keeps
// kubelet from setting most of these on its own Node, and kubelet's --register-with-taints cannot
// choose by facts. Never changed after initialisation: a label or taint someone removes stays removed.
// Pure; the JSON patch operations are built in plan.ts with the metadata's.
import type { Node, Taint } from "kubernetes-types/core/v1.js";
import { keyProblem, labelValueProblem } from "../../kube/labelselector.ts";
import { isUninitialized } from "../../kube/nodes.ts";
import type { InstanceMetadata } from "./providers.ts";
import { type HostFacts, type Matcher, matchFacts, parseMatcher, type RuleSource, ruleSyntax, substitute } from "./rules.ts";

/**
 * Besides the host's facts, init rules may match the Node's resolved metadata (instance metadata, then the
 * --*-rules): `zone:^eu-central-1a$`. The metadata rules may not, as they make it.
 */
const METADATA_SOURCES: Readonly<Record<string, keyof InstanceMetadata>> = {
  region: "region",
  zone: "zone",
  "instance-type": "instanceType",
};
const INIT_MATCHER_SYNTAX = "<cidr|name|product|dmi.<file>|region|zone|instance-type>:<pattern>";

/** The host's facts and the Node's resolved metadata. */
export interface InitFacts extends HostFacts {
  metadata: InstanceMetadata;
}

export type InitKind = "label" | "taint";
export const TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"] as const;
type Effect = (typeof TAINT_EFFECTS)[number];

export interface InitRule extends Matcher {
  kind: InitKind;
  /** Literal (no groups): the node-scope policy allows exactly the keys the rules name. */
  key: string;
  /** May refer to the pattern's groups as $1…$9; may be empty. */
  value: string;
  effect?: Effect;
}

// The label value syntax once groups are substituted: $1-$9 stand for any text until then.
const hasGroups = (value: string) => /\$\d/.test(value);

/**
 * Why a key is never set by rules. Keys of the kubernetes.io and k8s.io namespaces belong to Kubernetes
 * (topology and instance type come from --*-rules, taints like not-ready from the node lifecycle), except
 * node-role.kubernetes.io/<role> labels, which kubelet may not set and operators ask for; of those, control-plane
 * and master are refused (control-plane workloads tolerate and select them), and node-restriction.kubernetes.io/
 * exists so that nodes can never label themselves for workload isolation.
 */
export function reservedKeyProblem(kind: InitKind, key: string): string | undefined {
  const prefix = key.includes("/") ? key.slice(0, key.indexOf("/")) : "";
  const role = key.slice(prefix.length + 1);
  if (prefix === "node-restriction.kubernetes.io")
    return `${key} is in node-restriction.kubernetes.io/, which nodes may never set on themselves`;
  if (kind === "label" && prefix === "node-role.kubernetes.io") {
    return role === "control-plane" || role === "master" ? `${key} would make the node a control-plane node` : undefined;
  }
  const kubernetes = ["kubernetes.io", "k8s.io"].find((domain) => prefix === domain || prefix.endsWith(`.${domain}`));
  if (kubernetes)
    return `${key} is in the ${kubernetes} namespace, Kubernetes' own` + (kind === "label" ? " (except node-role.kubernetes.io/<role>)" : "");
  return undefined;
}

/**
 * `name:^gpu-=example.com/gpu=true` (a label), `dmi.product_name:^DGX=nvidia.com/gpu=present:NoSchedule` (a taint):
 * the matcher, then `=<key>=<value>` (a taint adds `:<effect>`). Neither key nor value has an "=", so the
 * second-last "=" splits, and a pattern may contain "=".
 */
export function parseInitRule(kind: InitKind, text: string): InitRule | string {
  const tail = kind === "label" ? "=([^=]*)=([^=]*)" : `=([^=]*)=([^=:]*):(${TAINT_EFFECTS.join("|")})`;
  const match = ruleSyntax(tail, Object.keys(METADATA_SOURCES)).exec(text);
  const form = kind === "label" ? "<key>=<value>" : `<key>=<value>:<${TAINT_EFFECTS.join("|")}>`;
  if (!match) return `"${text}" is not ${INIT_MATCHER_SYNTAX}=${form}`;
  const [, source, pattern, key, value, effect] = match as unknown as [string, RuleSource, string, string, string, Effect?];
  const problem =
    keyProblem(key) ?? reservedKeyProblem(kind, key) ?? (hasGroups(value) ? undefined : labelValueProblem(value));
  if (problem) return `"${text}": ${problem}`;
  const matcher = parseMatcher(source, pattern, text);
  if (typeof matcher === "string") return matcher;
  return { ...matcher, kind, key, value, ...(effect ? { effect } : {}) };
}

/** One label or taint a rule gives, with the rule (its text is the rule id in logs and Events). */
export interface InitItem {
  rule: InitRule;
  key: string;
  value: string;
  effect?: Effect;
}

export interface InitNote {
  reason: "NodeInitLabelKept" | "NodeInitTaintKept" | "NodeInitValueInvalid";
  message: string;
}

export interface InitPlan {
  labels: InitItem[];
  taints: InitItem[];
  notes: InitNote[];
}

export const describeItem = (item: InitItem): string =>
  `${item.key}=${item.value}${item.effect ? `:${item.effect}` : ""}`;

/**
 * What the rules add to a Node that is still uninitialised: for each key (each key and effect, for taints)
 * the first rule that matches, unless the Node has it already. A value someone else set (kubelet's
 * --node-labels, --register-with-taints) is kept and reported. An initialised Node gets nothing.
 */
export function desiredNodeInit(node: Node, facts: InitFacts, rules: readonly InitRule[]): InitPlan {
  const plan: InitPlan = { labels: [], taints: [], notes: [] };
  if (!isUninitialized(node)) return plan;
  const labels = node.metadata?.labels ?? {};
  const taints: Taint[] = node.spec?.taints ?? [];
  const decided = new Set<string>();
  for (const rule of rules) {
    const id = `${rule.kind} ${rule.key}${rule.effect ? `:${rule.effect}` : ""}`;
    if (decided.has(id)) continue;
    const field = METADATA_SOURCES[rule.source];
    const match = field ? rule.pattern?.exec(facts.metadata[field] ?? "") ?? undefined : matchFacts(rule, facts);
    if (!match) continue;
    decided.add(id);
    const item: InitItem = { rule, key: rule.key, value: substitute(rule.value, match), ...(rule.effect ? { effect: rule.effect } : {}) };
    const invalid = labelValueProblem(item.value);
    if (invalid) {
      plan.notes.push({ reason: "NodeInitValueInvalid", message: `rule ${rule.text} gives "${item.value}": ${invalid}` });
      continue;
    }
    if (rule.kind === "label") {
      const existing = labels[item.key];
      if (existing === undefined) plan.labels.push(item);
      else if (existing !== item.value)
        plan.notes.push({
          reason: "NodeInitLabelKept",
          message: `${item.key} is ${existing} (set by kubelet or a person), rule ${rule.text} gives ${item.value}: kept`,
        });
      continue;
    }
    const existing = taints.find((t) => t.key === item.key && t.effect === item.effect);
    if (!existing) plan.taints.push(item);
    else if ((existing.value ?? "") !== item.value)
      plan.notes.push({
        reason: "NodeInitTaintKept",
        message: `taint ${item.key}:${item.effect} is ${existing.value ?? ""}, rule ${rule.text} gives ${item.value}: kept`,
      });
  }
  return plan;
}

export const taintOf = (item: InitItem): Taint => ({
  key: item.key,
  ...(item.value ? { value: item.value } : {}),
  effect: item.effect as Effect,
});
