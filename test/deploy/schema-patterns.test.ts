// The chart's IP and CIDR checks against the programs' own (ipProblem, cidrProblem, parseRule: the reference,
// proven against Go elsewhere), on generated text: a value the program refuses fails at render time, and a value
// it accepts renders. The schema's ip and cidr patterns check the form; the templates' local-ccm.ipv4MappedIPv6
// refuses the IPv4-mapped IPv6 addresses those patterns let through (too many spellings for one pattern).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { CHART_DIR, PROGRAM_FLAGS } from "../../scripts/render-manifests.ts";
import { parseRule } from "../../src/agent/metadata/rules.ts";
import { type FlagSpec, parseFlags } from "../../src/cli/flags.ts";
import { cidrProblem, ipFromBytes, ipProblem } from "../../src/net/ip.ts";

type Values = Record<string, unknown>;
const at = (values: unknown, dotted: string): Values | undefined =>
  dotted.split(".").reduce<unknown>((node, key) => (node as Values | undefined)?.[key], values) as Values | undefined;

interface Definition {
  pattern: string;
  items?: { pattern: string };
}
const schema = JSON.parse(readFileSync(path.join(CHART_DIR, "values.schema.json"), "utf8")) as {
  definitions: Record<string, Definition>;
};
// The patterns use no construct where Go's RE2 (Helm's schema validator) and JavaScript differ in what matches.
const matcher = (name: string) => new RegExp(schema.definitions[name]?.pattern as string, "u");
const IP = matcher("ip");
const CIDR = matcher("cidr");
const RULE = new RegExp(schema.definitions.metadataRules?.items?.pattern as string, "u");
const helpers = readFileSync(path.join(CHART_DIR, "templates/_helpers.tpl"), "utf8");
const MAPPED = new RegExp(
  /\{\{- define "local-ccm\.ipv4MappedIPv6" -\}\}\n(.*)\n\{\{- end \}\}/.exec(helpers)?.[1] as string,
  "u",
);
/** Whether the chart renders with this IP or CIDR: the schema's pattern, then the template's refusal. */
const chartAccepts = (pattern: RegExp, text: string) => pattern.test(text) && !MAPPED.test(text);

const hexGroup = fc.integer({ min: 0, max: 0xffff }).map((n) => n.toString(16));
const octet = fc.oneof(fc.integer({ min: 0, max: 255 }).map(String), fc.constantFrom("256", "01", "00", "999"));
const ipv4 = fc.array(octet, { minLength: 3, maxLength: 5 }).map((parts) => parts.join("."));
// IPv6 text: 1-9 groups, maybe one or two "::", maybe an IPv4 tail, maybe a zone.
const ipv6 = fc
  .tuple(
    fc.array(hexGroup, { minLength: 1, maxLength: 9 }),
    fc.array(fc.nat(9), { maxLength: 2 }),
    fc.option(ipv4),
    fc.option(fc.constantFrom("%eth0", "%1")),
    fc.boolean(),
  )
  .map(([groups, gaps, tail, zone, upper]) => {
    const parts: string[] = [...groups];
    for (const gap of gaps) parts.splice(Math.min(gap, parts.length), 0, "");
    let text = parts.join(":");
    if (tail) text += `:${tail}`;
    if (text.startsWith(":") && !text.startsWith("::")) text = `:${text}`;
    return (upper ? text.toUpperCase() : text) + (zone ?? "");
  });
// Valid addresses in the spellings people write: canonical, every group written out (with leading zeros or
// upper case), and an IPv4 tail. Bytes lean to zero, so "::" compressions are frequent.
const byte = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 255 }));
const validV4 = fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 4, maxLength: 4 }).map((b) => b.join("."));
const validV6 = fc
  .tuple(fc.uint8Array({ minLength: 16, maxLength: 16 }), fc.array(byte, { minLength: 16, maxLength: 16 }), fc.nat(3))
  .map(([random, sparse, form]) => {
    const bytes = form % 2 === 0 ? Uint8Array.from(sparse) : random;
    const groups = Array.from({ length: 8 }, (_, i) => (((bytes[2 * i] ?? 0) << 8) | (bytes[2 * i + 1] ?? 0)).toString(16));
    switch (form) {
      case 0:
        return ipFromBytes(bytes);
      case 1:
        return groups.map((group) => group.padStart(4, "0")).join(":").toUpperCase();
      case 2:
        return `${groups.slice(0, 6).join(":")}:${[...bytes.subarray(12)].join(".")}`;
      default:
        return groups.join(":");
    }
  });
// IPv4-mapped addresses (and their neighbours ::fffe:…, 1::ffff:…) in the spellings IPv6 allows: five zero
// groups written or partly compressed, zero groups padded, the IPv4 part dotted or as two hex groups.
const mapped = fc
  .tuple(
    fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 4, maxLength: 4 }),
    fc.nat(5),
    fc.nat(5),
    fc.constantFrom("ffff", "FFFF", "fffe", "0ffff"),
    fc.constantFrom("0", "00", "0000", "1"),
    fc.boolean(),
  )
  .map(([v4, from, length, marker, zero, dotted]) => {
    const groups: string[] = [zero, "0", "0", "0", "0", marker];
    const tail = dotted ? v4.join(".") : `${((v4[0] ?? 0) * 256 + (v4[1] ?? 0)).toString(16)}:${((v4[2] ?? 0) * 256 + (v4[3] ?? 0)).toString(16)}`;
    const end = Math.min(5, from + length);
    if (length === 0 || from >= 5) return `${groups.join(":")}:${tail}`;
    const before = groups.slice(0, from).join(":");
    return `${before}::${groups.slice(end).join(":")}:${tail}`.replace(/::+:/, "::");
  });
const noise = fc.string({ unit: fc.constantFrom(..."0123456789abcdefABCDEFgx:./% "), maxLength: 20 });
const address = fc.oneof(validV4, validV6, ipv4, ipv6, mapped, mapped, noise);
const prefix = fc.oneof(fc.integer({ min: 0, max: 140 }).map(String), fc.constantFrom("", "08", "-1", "1a"));

/**
 * On 20,000 generated texts, the chart accepts a text exactly when the program does (its problem: undefined);
 * both sides must be exercised at least `least` times each, not only refusals of noise.
 */
function agree(texts: fc.Arbitrary<string>, chart: (text: string) => boolean, problem: (text: string) => unknown, least: number) {
  let [accepted, refused] = [0, 0];
  fc.assert(
    fc.property(texts, (text) => {
      const why = problem(text);
      assert.equal(chart(text), why === undefined, `${JSON.stringify(text)}: ${String(why ?? "accepted")}`);
      if (why === undefined) accepted++;
      else refused++;
    }),
    { numRuns: 20_000 },
  );
  assert.ok(accepted > least && refused > least, `${accepted} accepted, ${refused} refused`);
}

test("the chart accepts exactly the IPs ipProblem accepts", () => {
  agree(address, (text) => chartAccepts(IP, text), ipProblem, 2_000);
});

test("the chart accepts exactly the CIDRs cidrProblem accepts", () => {
  const cidrs = fc.tuple(address, prefix).map(([ip, length]) => `${ip}/${length}`);
  agree(cidrs, (text) => chartAccepts(CIDR, text), cidrProblem, 1_000);
});

test("a cidr rule's pattern: the chart accepts exactly what parseRule accepts (an IP or a CIDR)", () => {
  const rules = fc
    .tuple(address, fc.option(prefix))
    .map(([ip, length]) => `cidr:${ip}${length === null ? "" : `/${length}`}=rack-1`);
  const ruleProblem = (text: string) => {
    const rule = parseRule("zone", text);
    return typeof rule === "string" ? rule : undefined;
  };
  agree(rules, (text) => RULE.test(text), ruleProblem, 1_000);
});

test("list items: a comma list of valid items, or a YAML list of them, and nothing else", () => {
  const list = (name: string) => new RegExp(schema.definitions[name]?.pattern as string, "u");
  const item = (name: string) => new RegExp(schema.definitions[name]?.items?.pattern as string, "u");
  assert.ok(list("cidrList").test("10.0.0.0/8, fd00::/8"));
  assert.ok(list("cidrList").test(""));
  assert.ok(!list("cidrList").test("10.0.0.0/8,10.0.0.0/33"));
  assert.ok(list("ipList").test("8.8.8.8,2001:4860:4860::8888"));
  assert.ok(!list("ipList").test("8.8.8.8,dns.google"));
  assert.ok(item("cidrList").test("fd00::/8"));
  assert.ok(!item("cidrList").test("10.0.0.0/8,fd00::/8"), "a list item holds one CIDR");
  assert.ok(!item("ipList").test("8.8.8.8,1.1.1.1"), "a list item holds one IP");
  assert.ok(item("metadataRules").test("cidr:10.1.0.0/24=rack-1"));
  assert.ok(!item("metadataRules").test("cidr:10.1.0.0/24=rack-1,cidr:10.2.0.0/24=rack-2"));
});

test("every other text value: what the schema's pattern accepts, the program's flag accepts", () => {
  // Checked elsewhere: durations' ranges, the unspecified target and a port range's order in the templates
  // (chart.test.ts, refusals). Not mirrored: the node selectors' grammar (the schema checks their characters only;
  // the program refuses the rest at startup with a one-line error).
  const backwards = (text: string) =>
    text.split(",").some((item) => {
      const [from, to] = item.trim().split("-").map(Number);
      return to !== undefined && (from as number) > to;
    });
  const elsewhere = (spec: FlagSpec, text: string) =>
    spec.type === "duration" ||
    (spec.name.endsWith("-ip-target") && /^[0:.,\s]+$/.test(text)) ||
    (["lb-reserved-ports", "lb-node-port-range"].includes(spec.name) && backwards(text));
  const unmirrored = new Set(["node-selector", "lb-node-selector", "lb-l2-node-selector"]);
  const unit = fc.constantFrom(..."abcxyzAZ019-_./=,:!() {}[]^$\\*+?|%@#\t".split(""));
  const resolve = (node: Values | undefined): Values | undefined =>
    node?.$ref ? resolve(at(schema, (node.$ref as string).slice(2).replaceAll("/", "."))) : node;
  let compared = 0;
  for (const table of Object.values(PROGRAM_FLAGS) as (readonly FlagSpec[])[]) {
    for (const spec of table) {
      if (!spec.helm || unmirrored.has(spec.name)) continue;
      const node = spec.helm.split(".").reduce<Values | undefined>(
        (parent, key) => resolve((parent?.properties as Record<string, Values> | undefined)?.[key]),
        schema as unknown as Values,
      );
      if (typeof node?.pattern !== "string") continue;
      const pattern = new RegExp(node.pattern, "u");
      compared++;
      fc.assert(
        fc.property(fc.string({ unit, maxLength: 14 }), (text) => {
          if (!pattern.test(text) || elsewhere(spec, text)) return;
          assert.doesNotThrow(() => parseFlags([spec], [`--${spec.name}=${text}`], {}), `${spec.helm}=${JSON.stringify(text)}`);
        }),
        { numRuns: 5_000 },
      );
    }
  }
  assert.ok(compared >= 15, `${compared} flags compared`);
});
