// Rule 5b's reading of the cluster's addresses (src/csr/cluster.ts) against Go's net package (clusterip.go) on
// generated IPs and CIDRs: containment in each CIDR (and which CIDRs cannot be read), equality with a listed
// ClusterIP or endpoint address whatever its spelling, and the loopback / unspecified / link-local / multicast
// kinds. Inputs carry no leading zeros, which Go's net refuses and Kubernetes (ParseIPSloppy) reads as decimal.
import assert from "node:assert/strict";
import { isIPv4 } from "node:net";
import { after, before, test } from "node:test";
import fc from "fast-check";
import {
  type ClusterAddresses,
  clusterAddresses,
  clusterIpProblem,
  NO_CLUSTER_ADDRESSES,
} from "../../src/csr/cluster.ts";
import { canonicalIp, ipToBytes } from "../../src/net/ip.ts";
import { type Oracle, startOracle } from "./oracle.ts";

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

interface GoAnswer {
  error?: string;
  cidrs: { unreadable: boolean; contains: boolean }[];
  exact: boolean;
  special: "" | "loopback" | "unspecified" | "link-local" | "multicast";
}

/** Near each kind's edges, so that the random IPs meet them often. */
const EDGES = [
  ...["0.0.0.0", "0.0.0.1", "126.255.255.255", "127.0.0.0", "127.255.255.255", "128.0.0.0", "169.253.255.255"],
  ...["169.254.0.0", "169.254.255.255", "169.255.0.0", "223.255.255.255", "224.0.0.0", "239.255.255.255"],
  ...["240.0.0.0", "::", "::1", "::2", "fe7f:ffff::", "fe80::", "febf:ffff::1", "fec0::", "feff::1", "ff00::"],
  ...["::ffff:127.0.0.1", "::ffff:169.254.1.1", "::ffff:224.0.0.1", "::ffff:0.0.0.0", "::7f00:1", "10.96.0.1"],
];
const ipArb = fc.oneof(fc.ipV4(), fc.ipV6(), fc.constantFrom(...EDGES));
/** How an object may spell an address: as is, upper case, or (IPv4) IPv4-mapped. */
const spelled = (ip: string) => fc.constantFrom(ip, ip.toUpperCase(), ...(isIPv4(ip) ? [`::ffff:${ip}`] : []));
const cidrArb = fc.oneof(
  { weight: 8, arbitrary: fc.tuple(ipArb, fc.nat(128)).map(([ip, bits]) => `${ip}/${isIPv4(ip) ? bits % 33 : bits}`) },
  // IPv4-mapped networks, as Go reads them (an IPv4 network of prefix - 96 when the prefix is 96 or more).
  {
    weight: 2,
    arbitrary: fc.tuple(fc.ipV4(), fc.integer({ min: 80, max: 128 })).map(([ip, bits]) => `::ffff:${ip}/${bits}`),
  },
  { weight: 1, arbitrary: fc.constantFrom("10.96.0.0/33", "fd00::/129", "10.96.0.0", "garbage", "10.96.0.0/12/1") },
);

/** An IP SAN as request.ts hands it over (canonical text): one of the CIDRs' own addresses nudged, or any. */
const caseArb = fc
  .record({ cidrs: fc.array(cidrArb, { maxLength: 3 }), exact: fc.array(ipArb.chain(spelled), { maxLength: 3 }) })
  .chain(({ cidrs, exact }) => {
    const near = [...cidrs.map((cidr) => cidr.split("/")[0] ?? ""), ...exact].filter((ip) => canonicalIp(ip));
    const nudged = near.length
      ? fc.tuple(fc.constantFrom(...near), fc.integer({ min: -2, max: 2 })).map(([ip, by]) => nudge(ip, by))
      : ipArb;
    return fc.record({ cidrs: fc.constant(cidrs), exact: fc.constant(exact), ip: fc.oneof(ipArb, nudged) });
  })
  .map(({ ip, ...rest }) => ({ ...rest, ip: canonicalIp(ip) ?? assert.fail(ip) }));

/** `ip` moved by `by` in its last byte (wrapping), to cross the edges of the ranges it bounds. */
function nudge(ip: string, by: number): string {
  const bytes = Buffer.from(ipToBytes(canonicalIp(ip) ?? ip));
  bytes[bytes.length - 1] = ((bytes.at(-1) ?? 0) + by + 256) % 256;
  return canonicalIp(bytes) ?? ip;
}

const one = (cidr: string): ClusterAddresses =>
  clusterAddresses([{ metadata: { name: "sc" }, spec: { cidrs: [cidr] } }], [], []);
const listed = (exact: string[]): ClusterAddresses =>
  clusterAddresses([], [{ metadata: { name: "kubernetes", namespace: "default" }, spec: { clusterIPs: exact } }], []);

const SPECIAL_TEXT: Record<GoAnswer["special"], RegExp | undefined> = {
  "": undefined,
  loopback: /^is loopback /,
  unspecified: /^is the unspecified address$/,
  "link-local": /^is link-local /,
  multicast: /^is multicast /,
};

test("rule 5b's address reading agrees with Go's net package", async () => {
  const cases = fc.sample(caseArb, { numRuns: 4000, seed: 5 });
  const answers = await Promise.all(cases.map((input) => oracle.ask<GoAnswer>("cluster-ip", input)));
  const seen = { contains: 0, outside: 0, unreadable: 0, exact: 0, special: 0 };
  cases.forEach(({ ip, cidrs, exact }, i) => {
    const go = answers[i] as GoAnswer;
    const title = JSON.stringify({ ip, cidrs, exact });
    assert.equal(go.error, undefined, title);
    cidrs.forEach((cidr, c) => {
      const ours = clusterIpProblem(ip, one(cidr)) ?? "";
      const { unreadable, contains } = go.cidrs[c] ?? assert.fail(title);
      assert.equal(ours.startsWith("may be in"), unreadable, `${title}: ${cidr} unreadable`);
      if (unreadable) return void seen.unreadable++;
      const oursContains = ours.startsWith("is in the Service CIDR");
      // Go's net sees no IPv4 address in an IPv6-written prefix shorter than 96; rule 5b counts the IPv4-mapped
      // addresses such a prefix covers too (the apiserver accepts no such ServiceCIDR; denying more is safe).
      const broader = !contains && oursContains && isIPv4(ip) && cidr.includes(":") && Number(cidr.split("/")[1]) < 96;
      if (!broader) assert.equal(oursContains, contains, `${title}: ${cidr} contains`);
      seen[contains ? "contains" : "outside"]++;
    });
    const oursExact = /^is a ClusterIP /.test(clusterIpProblem(ip, listed(exact)) ?? "");
    assert.equal(oursExact, go.exact, `${title}: listed`);
    if (go.exact) seen.exact++;
    const special = clusterIpProblem(ip, NO_CLUSTER_ADDRESSES);
    const expected = SPECIAL_TEXT[go.special];
    if (expected) assert.match(special ?? "", expected, title);
    else assert.equal(special, undefined, title);
    if (expected) seen.special++;
  });
  // The generators must reach every side, or the agreement proves little.
  for (const [side, count] of Object.entries(seen)) assert.ok(count > 100, `only ${count} cases of ${side}`);
});
