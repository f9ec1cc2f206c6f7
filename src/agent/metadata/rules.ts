// Bare-metal metadata: a providerID template over the Node's own facts, and rules that give region,
// zone and instance type from facts (an InternalIP inside a CIDR, the node name, the DMI product
// name). Pure. Rules fill only what the instance metadata service did not say.
import { type Cidr, canonicalIp, cidrContains, parseCidr } from "../../net/ip.ts";
import type { InstanceMetadata } from "./providers.ts";

export type LabelField = "region" | "zone" | "instanceType";
export const LABEL_FIELDS: readonly LabelField[] = ["region", "zone", "instanceType"];

/**
 * The world-readable files of /sys/class/dmi/id a rule may match (dmi.<file>:). Serial numbers and UUIDs are
 * root-only there and never read: no rule needs them, and a label would publish them to every cluster reader.
 */
export const DMI_FIELDS = [
  "sys_vendor",
  "product_name",
  "product_family",
  "product_version",
  "board_vendor",
  "board_name",
  "chassis_vendor",
  "bios_vendor",
  "bios_version",
] as const;
export type DmiField = (typeof DMI_FIELDS)[number];

/** What a Node says about itself (status.nodeInfo, its InternalIPs) and the host's DMI system information. */
export interface HostFacts {
  nodeName: string;
  systemUUID: string;
  machineID: string;
  /** /sys/class/dmi/id/product_name (world-readable); "" where the host has none. */
  productName: string;
  /** The DMI_FIELDS files; a file the host lacks is "" (VMs without SMBIOS, non-x86). */
  dmi: Readonly<Record<DmiField, string>>;
  internalIPs: string[];
}

export const TEMPLATE_FACTS = ["nodeName", "systemUUID", "machineID", "productName"] as const;
type TemplateFact = (typeof TEMPLATE_FACTS)[number];

export type RuleSource = "cidr" | "name" | "product" | `dmi.${DmiField}` | "region" | "zone" | "instance-type";

/** The left of a rule: which fact it looks at and how. */
export interface Matcher {
  source: RuleSource;
  /** As written, for reasons. */
  text: string;
  cidr?: Cidr;
  pattern?: RegExp;
}

export interface Rule extends Matcher {
  field: LabelField;
  /** May refer to the pattern's groups as $1…$9. */
  value: string;
}

export interface RulesConfig {
  /** "" = none. Placeholders {nodeName}, {systemUUID}, {machineID}, {productName}. */
  providerIDTemplate: string;
  rules: Rule[];
}

/** Where each resolved field came from, for logs and the metadata source metric. */
export type FieldSource = "instance-metadata" | "template" | "rule";

export interface Resolved {
  metadata: InstanceMetadata;
  sources: Partial<Record<keyof InstanceMetadata, FieldSource>>;
  /** Why a field that rules or the template were meant to give has no value. Deterministic text. */
  notes: string[];
}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

const SOURCE = `(cidr|name|product|dmi\\.(?:${DMI_FIELDS.join("|")}))`;
/** The rule syntax, for messages. */
export const MATCHER_SYNTAX = "<cidr|name|product|dmi.<file>>:<pattern>";

/** `cidr:198.18.1.0/24=rack-1`, `name:^fra-=fra`, `product:^PowerEdge (R\d+)$=$1`: the last "=" splits. */
export function parseRule(field: LabelField, text: string): Rule | string {
  const match = new RegExp(`^${SOURCE}:(.+)=([^=]*)$`).exec(text);
  if (!match) return `"${text}" is not ${MATCHER_SYNTAX}=<value>`;
  const [, source, pattern, value] = match as unknown as [string, RuleSource, string, string];
  if (value === "") return `"${text}" gives an empty value`;
  const matcher = parseMatcher(source, pattern, text);
  return typeof matcher === "string" ? matcher : { ...matcher, field, value };
}

/** A rule's left side; `text` is the whole rule, for messages. */
export function parseMatcher(source: RuleSource, pattern: string, text: string): Matcher | string {
  if (source === "cidr") {
    const cidr = parseCidr(pattern);
    return cidr ? { source, text, cidr } : `"${pattern}" in "${text}" is not a CIDR`;
  }
  try {
    return { source, text, pattern: new RegExp(pattern) };
  } catch (err) {
    return `"${pattern}" in "${text}" is not a regular expression: ${(err as Error).message}`;
  }
}

/**
 * The regular expression that splits a rule: its source, pattern and the rest (`tail`, a regex source);
 * `sources` adds alternatives (the node init rules' metadata sources).
 */
export function ruleSyntax(tail: string, sources: readonly string[] = []): RegExp {
  return new RegExp(`^${[SOURCE.slice(0, -1), ...sources].join("|")}):(.+)${tail}$`);
}

/**
 * Whether the matcher matches the facts: for a pattern, its match (groups for $1…$9); for a CIDR, a
 * match without groups; undefined when it does not match.
 */
export function matchFacts(matcher: Matcher, facts: HostFacts): readonly string[] | undefined {
  if (matcher.cidr) {
    // A Node's addresses are read as Kubernetes reads them ("010.0.0.1" is 10.0.0.1), then contained as netip does.
    const inside = (ip: string) => cidrContains(matcher.cidr as Cidr, canonicalIp(ip) ?? ip);
    return facts.internalIPs.some(inside) ? [] : undefined;
  }
  const subject =
    matcher.source === "name"
      ? facts.nodeName
      : matcher.source === "product"
        ? facts.productName
        : facts.dmi[matcher.source.slice("dmi.".length) as DmiField];
  return matcher.pattern?.exec(subject) ?? undefined;
}

/** `value` with $1…$9 replaced by the match's groups (an unmatched group is ""). */
export function substitute(value: string, match: readonly string[]): string {
  return value.replace(/\$(\d)/g, (_, n: string) => match[Number(n)] ?? "");
}

/** The template's problem (an unknown placeholder), or undefined. */
export function templateProblem(template: string): string | undefined {
  const unknown = [...template.matchAll(/\{([^}]*)\}/g)].find(
    ([, name]) => !TEMPLATE_FACTS.includes(name as TemplateFact),
  );
  if (!unknown) return undefined;
  return `unknown placeholder {${unknown[1]}}: use ${TEMPLATE_FACTS.map((fact) => `{${fact}}`).join(", ")}`;
}

/** The template filled in, or why not (a fact it needs is empty). */
export function fillTemplate(template: string, facts: HostFacts): { value: string } | { problem: string } {
  const missing = [...template.matchAll(/\{([^}]*)\}/g)].find(([, name]) => !facts[name as TemplateFact]);
  if (missing)
    return { problem: `providerID template ${template} needs {${missing[1]}}, which this node does not report` };
  return { value: template.replace(/\{([^}]*)\}/g, (_, name: string) => facts[name as TemplateFact]) };
}

/** The first rule for `field` that matches, with its value (groups substituted), or undefined. */
function firstMatch(rules: Rule[], field: LabelField, facts: HostFacts): { rule: Rule; value: string } | undefined {
  for (const rule of rules.filter((r) => r.field === field)) {
    const match = matchFacts(rule, facts);
    if (match) return { rule, value: substitute(rule.value, match) };
  }
  return undefined;
}

const FIELD_NAMES: Record<LabelField, string> = { region: "region", zone: "zone", instanceType: "instance type" };

/**
 * The instance metadata service's answer, completed by the template and the rules: the service wins
 * where it said something (the cloud is the authority on its own instance), rules fill the rest.
 */
export function resolveMetadata(service: InstanceMetadata, facts: HostFacts, config: RulesConfig): Resolved {
  const metadata: InstanceMetadata = { ...service };
  const sources: Resolved["sources"] = {};
  for (const key of Object.keys(service) as (keyof InstanceMetadata)[]) sources[key] = "instance-metadata";
  const notes: string[] = [];
  if (!metadata.providerID && config.providerIDTemplate) {
    const filled = fillTemplate(config.providerIDTemplate, facts);
    if ("value" in filled) {
      metadata.providerID = filled.value;
      sources.providerID = "template";
    } else notes.push(filled.problem);
  }
  for (const field of LABEL_FIELDS) {
    if (metadata[field] || !config.rules.some((rule) => rule.field === field)) continue;
    const found = firstMatch(config.rules, field, facts);
    if (!found) {
      notes.push(`no ${FIELD_NAMES[field]} rule matches node ${facts.nodeName}: ${describeFacts(facts)}`);
      continue;
    }
    if (!LABEL_VALUE.test(found.value) || found.value.length > 63) {
      notes.push(`${FIELD_NAMES[field]} rule ${found.rule.text} gives "${found.value}", which is not a label value`);
      continue;
    }
    metadata[field] = found.value;
    sources[field] = "rule";
  }
  return { metadata, sources, notes };
}

export function describeFacts(facts: HostFacts): string {
  const ips = facts.internalIPs.join(", ") || "none";
  return `InternalIPs ${ips}, product name "${facts.productName}", vendor "${facts.dmi.sys_vendor}"`;
}
