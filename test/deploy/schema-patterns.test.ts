// The chart schema's IP and CIDR patterns against the programs' own checks (ipProblem, cidrProblem: the
// reference, proven against Go elsewhere), on generated text: a value the program refuses fails at render
// time, and a value it accepts renders. The one exception is named: an IPv4-mapped IPv6 address (refused by
// the program, as by the apiserver) written in IPv6 form has too many spellings for a regular expression;
// the program still refuses it at startup with a one-line error.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { CHART_DIR } from "../../scripts/render-manifests.ts";
import { cidrProblem, ipFromBytes, ipProblem, parseAddr } from "../../src/net/ip.ts";

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

const isV4Mapped = (text: string) => {
  const bytes = parseAddr(text.replace(/\/.*$/, ""))?.bytes;
  return bytes?.length === 16 && bytes.slice(0, 12).every((byte, i) => byte === (i < 10 ? 0 : 0xff));
};

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
const mapped = ipv4.map((v4) => `::ffff:${v4}`);
const noise = fc.string({ unit: fc.constantFrom(..."0123456789abcdefABCDEFgx:./% "), maxLength: 20 });
const address = fc.oneof(validV4, validV6, ipv4, ipv6, mapped, noise);
const prefix = fc.oneof(fc.integer({ min: 0, max: 140 }).map(String), fc.constantFrom("", "08", "-1", "1a"));

test("the schema's IP pattern accepts exactly what ipProblem accepts, IPv4-mapped IPv6 aside", () => {
  let [accepted, refused] = [0, 0];
  fc.assert(
    fc.property(address, (text) => {
      const program = ipProblem(text) === undefined;
      if (isV4Mapped(text) && !program) return; // the named exception
      assert.equal(IP.test(text), program, `${JSON.stringify(text)}: ${ipProblem(text) ?? "accepted"}`);
      if (program) accepted++;
      else refused++;
    }),
    { numRuns: 20_000 },
  );
  // Both sides of the comparison were exercised, not only refusals of noise.
  assert.ok(accepted > 2_000 && refused > 2_000, `${accepted} accepted, ${refused} refused`);
});

test("the schema's CIDR pattern accepts exactly what cidrProblem accepts, IPv4-mapped IPv6 aside", () => {
  let [accepted, refused] = [0, 0];
  fc.assert(
    fc.property(address, prefix, (ip, length) => {
      const text = `${ip}/${length}`;
      const program = cidrProblem(text) === undefined;
      if (isV4Mapped(text) && !program) return;
      assert.equal(CIDR.test(text), program, `${JSON.stringify(text)}: ${cidrProblem(text) ?? "accepted"}`);
      if (program) accepted++;
      else refused++;
    }),
    { numRuns: 20_000 },
  );
  assert.ok(accepted > 1_000 && refused > 2_000, `${accepted} accepted, ${refused} refused`);
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
