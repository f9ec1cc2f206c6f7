// IPs and CIDRs read by src/net/ip.ts and by Go: net/netip (ParseAddr, ParsePrefix, Addr.String, Prefix.Contains),
// k8s.io/utils/net ParseIPSloppy with net.IP.String (how Kubernetes reads Node addresses and kubelet's --node-ip),
// and kube-apiserver's strict IP and CIDR validation (what our IP and CIDR flags refuse), on generated text and bytes.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import {
  canonicalIp,
  cidrContains,
  cidrProblem,
  ipFamily,
  ipFromBytes,
  ipProblem,
  parseAddr,
  parseCidr,
} from "../../src/net/ip.ts";
import { type Oracle, startOracle } from "./oracle.ts";

// Fixed so CI runs the same cases every time; fast-check prints the seed and path of a failure.
const seed = Number(process.env.ORACLE_SEED ?? 20261124);
const numRuns = 4000;

interface GoAnswer {
  addr?: { error?: string; string?: string; is4in6?: boolean; zone?: string };
  sloppy?: string;
  invalid?: string;
  prefix?: { error?: string; string?: string; masked?: string; contains?: (boolean | null)[] };
  addrString?: string;
  netIPString?: string;
}

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

// ---- generators: the edges of both grammars ----

const decimal = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 255 }).map(String) },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.constantFrom("0", "00", "000000"), fc.integer({ min: 0, max: 255 })).map(([z, n]) => z + n),
  },
  { weight: 1, arbitrary: fc.constantFrom("256", "999", "", "1a", "16777216", "-1", "+1", " 1") },
);
const ipv4 = fc.oneof(
  { weight: 8, arbitrary: fc.array(decimal, { minLength: 4, maxLength: 4 }).map((o) => o.join(".")) },
  { weight: 1, arbitrary: fc.array(decimal, { minLength: 2, maxLength: 5 }).map((o) => o.join(".")) },
);
const hex = fc.integer({ min: 0, max: 0xffff }).map((n) => n.toString(16));
const hexGroup = fc.oneof(
  { weight: 6, arbitrary: hex },
  { weight: 1, arbitrary: hex.map((group) => group.toUpperCase().padStart(4, "0")) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom("0", "00000", "0000000"), hex).map(([zeros, h]) => zeros + h) },
  { weight: 1, arbitrary: fc.constantFrom("", "10000", "fffff", "g", "ffffff", "1000000") },
);
const ipv6 = fc
  .tuple(
    fc.array(hexGroup, { maxLength: 9 }),
    fc.option(fc.nat(9), { nil: undefined }), // where "::" goes, if anywhere
    fc.oneof({ weight: 4, arbitrary: fc.constant("") }, ipv4.map((v4) => `:${v4}`), fc.constant(":ffff:198.18.0.1")),
    fc.oneof({ weight: 4, arbitrary: fc.constant("") }, fc.constantFrom("%eth0", "%", "%1", "%a%b", "%/8")),
  )
  .map(([groups, at, tail, zone]) => {
    const text =
      at === undefined
        ? groups.join(":")
        : `${groups.slice(0, at).join(":")}::${groups.slice(at).join(":")}`;
    return (tail && text === "" ? tail.slice(1) : text + tail) + zone;
  });
const randomText = fc.string({
  unit: fc.oneof(fc.constantFrom(..."0123456789abcdefF.:%/ "), fc.string({ minLength: 1, maxLength: 1 })),
  maxLength: 20,
});
const ipText = fc.oneof(
  { weight: 3, arbitrary: ipv4 },
  { weight: 4, arbitrary: ipv6 },
  { weight: 1, arbitrary: fc.constantFrom("", "::", ":::", "::ffff:1.2.3.4", "1::2::3", "::1.2.3.4", "1.2.3.4::") },
  { weight: 1, arbitrary: randomText },
);

// ---- addresses ----

const seen = { accepted: 0, refused: 0, sloppyOnly: 0, mapped: 0, zoned: 0 };

test("IPs as text: netip.ParseAddr, ParseIPSloppy and the apiserver's validation read them as ours do", async () => {
  await fc.assert(
    fc.asyncProperty(ipText, async (text) => {
      const go = await oracle.ask<GoAnswer>("netip", { op: "addr", text });
      const context = `${JSON.stringify(text)}: Go ${JSON.stringify(go)}`;
      const addr = parseAddr(text);
      if (go.addr?.error !== undefined) {
        seen.refused++;
        assert.equal(addr, undefined, context);
        assert.equal(ipFamily(text), undefined, context);
      } else {
        seen.accepted++;
        if (go.addr?.is4in6) seen.mapped++;
        if (go.addr?.zone) seen.zoned++;
        assert.ok(addr, context);
        const printed = ipFromBytes(addr.bytes) + (addr.zone ? `%${addr.zone}` : "");
        assert.equal(printed, go.addr?.string, context);
        assert.equal(addr.zone, go.addr?.zone ?? "", context);
        assert.equal(ipFamily(text), addr.bytes.length === 4 ? 4 : 6, context);
      }
      if (go.sloppy !== undefined && go.addr?.error !== undefined) seen.sloppyOnly++;
      assert.equal(canonicalIp(text), go.sloppy, context);
      assert.equal(ipProblem(text) === undefined, go.invalid === undefined, `${context}; ours ${ipProblem(text)}`);
    }),
    { seed, numRuns },
  );
  console.log("address cases:", seen);
  const enough = seen.accepted > numRuns / 6 && seen.refused > numRuns / 4 && seen.sloppyOnly > 50;
  assert.ok(enough && seen.mapped > 10 && seen.zoned > 50, JSON.stringify(seen));
});

test("IPs as bytes: printed as netip.AddrFromSlice(...).String() and net.IP.String() print them", async () => {
  const four = fc.uint8Array({ minLength: 4, maxLength: 4 });
  const v4mapped = four.map((b) => Uint8Array.from([...Array(10).fill(0), 255, 255, ...b]));
  const compatible = four.map((b) => Uint8Array.from([...Array(12).fill(0), ...b]));
  // Sparse bytes give zero runs of every length and place, where "::" goes.
  const sparse = fc.array(fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, fc.integer({ min: 0, max: 255 })), {
    minLength: 16,
    maxLength: 16,
  });
  const bytes = fc.oneof(
    fc.uint8Array({ minLength: 16, maxLength: 16 }),
    fc.uint8Array({ minLength: 4, maxLength: 4 }),
    v4mapped,
    compatible,
    sparse.map((b) => Uint8Array.from(b)),
    fc.uint8Array({ maxLength: 17 }),
  );
  await fc.assert(
    fc.asyncProperty(bytes, async (value) => {
      const go = await oracle.ask<GoAnswer>("netip", { op: "bytes", bytes: [...value] });
      const context = `[${value.join(",")}]: Go ${JSON.stringify(go)}`;
      const sized = value.length === 4 || value.length === 16;
      if (sized) assert.equal(ipFromBytes(value), go.addrString, context);
      assert.equal(canonicalIp(value), sized ? go.netIPString : undefined, context);
    }),
    { seed, numRuns },
  );
});

// ---- prefixes ----

const bits = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0, max: 32 }).map(String) },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 128 }).map(String) },
  {
    weight: 1,
    arbitrary: fc.constantFrom("", "00", "08", "032", "+8", "-1", " 8", "8 ", "129", "33", "99999999999999999999"),
  },
);
const prefixText = fc.oneof(
  { weight: 8, arbitrary: fc.tuple(ipText, bits).map(([ip, b]) => `${ip}/${b}`) },
  { weight: 1, arbitrary: fc.tuple(ipText, bits, bits).map(([ip, a, b]) => `${ip}/${a}/${b}`) },
  { weight: 1, arbitrary: ipText },
);

test("CIDRs as text: read as netip.ParsePrefix reads them, refused as the apiserver refuses them", async () => {
  const counts = { accepted: 0, refused: 0, hostBits: 0 };
  await fc.assert(
    fc.asyncProperty(prefixText, fc.array(ipText, { maxLength: 3 }), async (text, ips) => {
      const go = await oracle.ask<GoAnswer>("netip", { op: "prefix", text, ips });
      const context = `${JSON.stringify(text)}: Go ${JSON.stringify(go)}`;
      const cidr = parseCidr(text);
      if (!text.includes("/")) {
        // Ours also reads a bare IP, as its host prefix: where ParseAddr reads it without a zone.
        const addr = (await oracle.ask<GoAnswer>("netip", { op: "addr", text })).addr;
        assert.equal(cidr !== undefined, addr?.error === undefined && !addr?.zone, context);
        assert.match(cidrProblem(text) ?? "", /is not a CIDR/, context);
        return;
      }
      const prefix = go.prefix ?? assert.fail(context);
      if (prefix.error !== undefined) {
        counts.refused++;
        assert.equal(cidr, undefined, context);
        assert.notEqual(cidrProblem(text), undefined, context);
        return;
      }
      counts.accepted++;
      assert.ok(cidr, context);
      assert.equal(`${cidr.address}/${cidr.prefixLength}`, prefix.string, context);
      const contains = ips.map((ip) => cidrContains(cidr, ip));
      assert.deepEqual(contains, (prefix.contains ?? []).map((value) => value ?? false), context);
      // The apiserver (IsValidCIDRForLegacyField, strict) refuses what cidrProblem refuses, and host bits, which our
      // flags allow.
      const hostBits = prefix.masked !== prefix.string;
      if (hostBits) counts.hostBits++;
      assert.equal(go.invalid === undefined, cidrProblem(text) === undefined && !hostBits, context);
    }),
    { seed, numRuns },
  );
  console.log("prefix cases:", counts);
  const enough = counts.accepted > numRuns / 10 && counts.refused > numRuns / 4 && counts.hostBits > 50;
  assert.ok(enough, JSON.stringify(counts));
});

test("containment at the prefix's edge: Prefix.Contains and ours agree bit for bit", async () => {
  const counts = { inside: 0, outside: 0 };
  const family = fc.constantFrom(4, 16);
  const input = family.chain((size) =>
    fc.record({
      network: fc.uint8Array({ minLength: size, maxLength: size }),
      length: fc.integer({ min: 0, max: size * 8 }),
      // The address: the network's own bytes with one bit flipped near the prefix's edge, or no bit flipped.
      flip: fc.option(fc.integer({ min: 0, max: size * 8 - 1 }), { nil: undefined }),
      mapped: fc.boolean(),
    }),
  );
  await fc.assert(
    fc.asyncProperty(input, async ({ network, length, flip, mapped }) => {
      const address = Uint8Array.from(network);
      if (flip !== undefined) address[flip >> 3] = (address[flip >> 3] ?? 0) ^ (0x80 >> (flip & 7));
      // An IPv4 address in its IPv4-mapped IPv6 form belongs to no IPv4 prefix.
      const asMapped = () => Uint8Array.from([...Array(10).fill(0), 255, 255, ...address]);
      const ip = ipFromBytes(mapped && address.length === 4 ? asMapped() : address);
      const text = `${ipFromBytes(network)}/${length}`;
      const go = await oracle.ask<GoAnswer>("netip", { op: "prefix", text, ips: [ip] });
      const expected = go.prefix?.contains?.[0] ?? assert.fail(`${text}: Go ${JSON.stringify(go)}`);
      counts[expected ? "inside" : "outside"]++;
      assert.equal(cidrContains(parseCidr(text) ?? assert.fail(text), ip), expected, `${ip} in ${text}`);
    }),
    { seed, numRuns },
  );
  console.log("containment cases:", counts);
  assert.ok(counts.inside > numRuns / 5 && counts.outside > numRuns / 5, JSON.stringify(counts));
});
