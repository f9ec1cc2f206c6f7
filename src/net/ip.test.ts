import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  canonicalIp,
  cidrContains,
  cidrProblem,
  cidrWithin,
  hostPort,
  ipFamily,
  ipFromBytes,
  ipProblem,
  ipToBytes,
  parseCidr,
  prefixOf,
  uniqueIPs,
} from "./ip.ts";

const cidr = (text: string) => {
  const parsed = parseCidr(text);
  assert.ok(parsed, text);
  return parsed;
};

test("IP text to network-order bytes and back to canonical text", () => {
  const cases: [string, string, string][] = [
    ["198.18.0.1", "c6120001", "198.18.0.1"],
    ["::", "0".repeat(32), "::"],
    ["::1", `${"0".repeat(31)}1`, "::1"],
    ["fd00::", `fd00${"0".repeat(28)}`, "fd00::"],
    ["FD00:0198:0018:0000:0000:0000:0000:0002", "fd000198001800000000000000000002", "fd00:198:18::2"],
    ["2001:db8:0:0:1:0:0:1", "20010db8000000000001000000000001", "2001:db8::1:0:0:1"],
    ["1:2:3:4:5:6:7:8", "00010002000300040005000600070008", "1:2:3:4:5:6:7:8"],
    ["64:ff9b::198.18.0.1", "0064ff9b0000000000000000c6120001", "64:ff9b::c612:1"],
    ["::ffff:198.18.0.1", "00000000000000000000ffffc6120001", "::ffff:198.18.0.1"],
    // IPv4-compatible: Go prints hex where inet_ntop prints ::10.0.0.1.
    ["::10.0.0.1", "0000000000000000000000000a000001", "::a00:1"],
    ["::255.255.1.2", "000000000000000000000000ffff0102", "::ffff:102"],
    ["1:0:0:2:0:0:0:3", "00010000000000020000000000000003", "1:0:0:2::3"],
    ["1:0:0:2:0:0:3:4", "00010000000000020000000000030004", "1::2:0:0:3:4"],
    ["1:0:2:3:4:5:6:7", "00010000000200030004000500060007", "1:0:2:3:4:5:6:7"],
  ];
  for (const [text, hex, canonical] of cases) {
    assert.equal(ipToBytes(text).toString("hex"), hex, text);
    assert.equal(ipFromBytes(ipToBytes(text)), canonical, text);
  }
});

test("any 16 bytes survive text and back", () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 16, maxLength: 16 }), (bytes) => {
      assert.deepEqual(new Uint8Array(ipToBytes(ipFromBytes(bytes))), bytes);
    }),
  );
});

test("families", () => {
  assert.equal(ipFamily("198.18.0.1"), 4);
  assert.equal(ipFamily("fd00::1"), 6);
  assert.equal(ipFamily("::ffff:198.18.0.1"), 6);
  assert.equal(ipFamily("eth0"), undefined);
  assert.equal(ipFamily("010.0.0.1"), undefined);
});

test("IP flags are refused where kube-apiserver's strict validation refuses an IP field", () => {
  for (const ip of ["198.18.0.1", "FD00::1", "fd00:0:0::1", "::"]) assert.equal(ipProblem(ip), undefined, ip);
  const cases: [string, RegExp][] = [
    ["010.0.0.1", /^"010.0.0.1" has leading zeros, which some software reads as octal: write 10.0.0.1$/],
    ["::ffff:198.18.0.1", /^"::ffff:198.18.0.1" is an IPv4-mapped IPv6 address: write 198.18.0.1$/],
    ["fe80::1%eth0", /is not an IP address/],
    ["198.18.0.1 ", /is not an IP address/],
    ["", /is not an IP address/],
  ];
  for (const [ip, message] of cases) assert.match(ipProblem(ip) ?? "", message, ip);
});

test("CIDR flags: netip.ParsePrefix, and no IPv4-mapped addresses; host bits may be set", () => {
  for (const text of ["198.18.0.0/15", "198.18.0.7/24", "fd00::/8", "0.0.0.0/0", "::/0"])
    assert.equal(cidrProblem(text), undefined, text);
  assert.match(cidrProblem("::ffff:198.18.0.0/112") ?? "", /IPv4-mapped IPv6 address: write the IPv4 CIDR/);
  assert.match(cidrProblem("fd00::/129") ?? "", /has a prefix length above 128/);
  for (const text of ["198.18.0.1", "198.18.0.0/024", "010.0.0.0/8", "fd00::/8%eth0", "fe80::%eth0/64"])
    assert.match(cidrProblem(text) ?? "", /is not a CIDR/, text);
});

test("CIDR parsing: a bare IP is its host prefix; bad lengths and text are refused", () => {
  assert.deepEqual(parseCidr("198.18.0.7/24"), { address: "198.18.0.7", prefixLength: 24, family: 4 });
  assert.deepEqual(parseCidr("fd00:198:18::/48"), { address: "fd00:198:18::", prefixLength: 48, family: 6 });
  assert.deepEqual(parseCidr("198.18.0.7"), { address: "198.18.0.7", prefixLength: 32, family: 4 });
  assert.deepEqual(parseCidr("::/0"), { address: "::", prefixLength: 0, family: 6 });
  for (const bad of [
    "198.18.0.0/33",
    "fd00::/129",
    "198.18.0.0/",
    "198.18.0.0/-1",
    "198.18.0.0/2/3",
    "eth0/24",
    "",
    "198.18.0.0/024", // netip: no leading zeros in the length
    "198.018.0.0/24", // nor in the address
    "fe80::/10%eth0",
    "fe80::%eth0/10", // nor a zone
    " 198.18.0.0/24",
    "198.18.0.0/+8",
  ])
    assert.equal(parseCidr(bad), undefined, bad);
});

test("containment: same family only, host bits of the CIDR ignored", () => {
  assert.ok(cidrContains(cidr("198.18.0.77/24"), "198.18.0.1"));
  assert.ok(!cidrContains(cidr("198.18.0.0/24"), "198.18.1.1"));
  assert.ok(!cidrContains(cidr("::/0"), "198.18.0.1"));
  assert.ok(!cidrContains(cidr("0.0.0.0/0"), "::ffff:198.18.0.1"));
  assert.ok(cidrContains(cidr("fe80::/10"), "febf::1"));
  assert.ok(!cidrContains(cidr("fe80::/10"), "fec0::1"));
  assert.ok(!cidrContains(cidr("fe80::/10"), "fe80::1%eth0")); // netip: a zoned address is in no prefix
  assert.ok(!cidrContains(cidr("10.0.0.0/8"), "010.0.0.1")); // nor text ParseAddr refuses
  assert.ok(cidrContains(cidr("::ffff:10.0.0.0/104"), "::ffff:10.1.2.3"));
});

test("the prefix of an address: host bits cleared; it contains the address, and its own network is itself", () => {
  assert.equal(prefixOf("198.18.0.77", 24), "198.18.0.0/24");
  assert.equal(prefixOf("198.18.0.77", 20), "198.18.0.0/20");
  assert.equal(prefixOf("198.18.0.77", 32), "198.18.0.77/32");
  assert.equal(prefixOf("198.18.0.77", 0), "0.0.0.0/0");
  assert.equal(prefixOf("fd00:198:18::55", 64), "fd00:198:18::/64");
  assert.equal(prefixOf("fd00:198:18:ab12::55", 52), "fd00:198:18:a000::/52");
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 16, maxLength: 16 }), fc.integer({ min: 0, max: 128 }), (bytes, length) => {
      const address = ipFromBytes(bytes);
      const prefix = prefixOf(address, length);
      assert.ok(cidrContains(cidr(prefix), address), `${prefix} holds ${address}`);
      assert.equal(prefixOf(prefix.replace(/\/\d+$/, ""), length), prefix);
    }),
  );
});

test("a CIDR lies within another when it is as long or longer and starts inside it", () => {
  assert.ok(cidrWithin(cidr("fe80::1/128"), cidr("fe80::/10")));
  assert.ok(cidrWithin(cidr("fe80::/10"), cidr("fe80::/10")));
  assert.ok(!cidrWithin(cidr("fe80::/9"), cidr("fe80::/10")));
  assert.ok(!cidrWithin(cidr("198.18.0.0/24"), cidr("fe80::/10")));
  assert.ok(cidrWithin(cidr("198.18.0.100/32"), cidr("198.18.0.100/32")));
  assert.ok(!cidrWithin(cidr("198.18.0.101/32"), cidr("198.18.0.100/32")));
});

test("canonical IPs print as Go prints them: IPv4-mapped as IPv4, sloppy IPv4 as decimal, zones refused", () => {
  const cases: [string | Uint8Array, string | undefined][] = [
    ["198.18.0.12", "198.18.0.12"],
    ["198.018.000.012", "198.18.0.12"],
    ["198.18.0.256", undefined],
    ["FD00:0198:0018::000C", "fd00:198:18::c"],
    ["::ffff:198.18.0.12", "198.18.0.12"],
    ["::FFFF:c612:c", "198.18.0.12"],
    ["64:ff9b::198.18.0.12", "64:ff9b::c612:c"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"], // the first of equally long zero runs is compressed
    ["1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"], // a single zero group is not
    ["::", "::"],
    ["01.2.3.4", "1.2.3.4"], // as Kubernetes reads a Node address: decimal, not octal
    ["::ffff:010.1.2.3", "10.1.2.3"],
    ["::00001", "::1"], // Go 1.16's reader takes any number of leading zeros in a group
    ["fe80::1%eth0", undefined],
    ["n1", undefined],
    ["", undefined],
    [Uint8Array.from([198, 18, 0, 12]), "198.18.0.12"],
    [ipToBytes("::ffff:198.18.0.12"), "198.18.0.12"],
    [ipToBytes("fd00:198:18::c"), "fd00:198:18::c"],
    [Uint8Array.from([198, 18, 0]), undefined],
  ];
  for (const [ip, canonical] of cases) assert.equal(canonicalIp(ip), canonical, String(ip));
});

test("host:port brackets IPv6 literals only; an empty host stays empty (Go's :port)", () => {
  assert.equal(hostPort("198.18.0.1", 10250), "198.18.0.1:10250");
  assert.equal(hostPort("fd00:198:18::1", 10250), "[fd00:198:18::1]:10250");
  assert.equal(hostPort("api.example", "6443"), "api.example:6443");
  assert.equal(hostPort("", 10264), ":10264");
  // The bracketed form is what URL parsing takes back apart.
  fc.assert(
    fc.property(fc.oneof(fc.ipV4(), fc.ipV6()), fc.integer({ min: 1, max: 65535 }), (ip, port) => {
      const url = new URL(`https://${hostPort(ip, port)}/`);
      const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
      return url.port === (port === 443 ? "" : String(port)) && ipToBytes(host).equals(ipToBytes(ip));
    }),
  );
});

test("unique IPs keep the first of each, in order", () => {
  assert.deepEqual(uniqueIPs(["198.18.0.2", "fd00::1", "198.18.0.2", "198.18.0.1", "fd00::1"]), [
    "198.18.0.2",
    "fd00::1",
    "198.18.0.1",
  ]);
  assert.deepEqual(uniqueIPs([]), []);
});
