import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { poolFacts } from "./pool.ts";
import { formatRange, ipNumber, ipText, mergeRanges, parseAddressEntry, rangeSize } from "./ranges.ts";

test("entries: CIDRs (host bits ignored), bare IPs and first-last ranges of one family", () => {
  const read = (text: string) => {
    const range = parseAddressEntry(text);
    return typeof range === "string" ? range : formatRange(range);
  };
  assert.equal(read("198.51.100.7/24"), "198.51.100.0-198.51.100.255");
  assert.equal(read("198.51.100.7"), "198.51.100.7");
  assert.equal(read("198.51.100.10 - 198.51.100.20"), "198.51.100.10-198.51.100.20");
  assert.equal(read("2001:db8::/126"), "2001:db8::-2001:db8::3");
  assert.equal(read("198.51.100.20-198.51.100.10"), '"198.51.100.20-198.51.100.10" ends before it starts');
  assert.equal(read("198.51.100.1-2001:db8::1"), '"198.51.100.1-2001:db8::1" mixes IPv4 and IPv6');
  assert.equal(read("198.51.100.0/33"), '"198.51.100.0/33" is not a CIDR or a first-last range');
  assert.equal(read("010.0.0.1"), '"010.0.0.1" is not a CIDR or a first-last range');
});

test("sizes: bigints past int64 for IPv6, .0 and .255 left out only when avoided and only for IPv4", () => {
  const size = (text: string, avoid = false) => String(rangeSize(parseAddressEntry(text) as never, avoid));
  assert.equal(size("2001:db8::/32"), String(2n ** 96n));
  assert.equal(size("198.51.100.0/24"), "256");
  assert.equal(size("198.51.100.0/24", true), "254");
  assert.equal(size("198.51.100.255-198.51.101.0", true), "0");
  assert.equal(size("198.51.100.250-198.51.102.5", true), String(268 - 4));
  assert.equal(size("2001:db8::/120", true), "256");
});

test("property: a size with .0/.255 avoided counts exactly the addresses not ending so", () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.integer({ min: 0, max: 1000 }), (start, length) => {
      const first = BigInt(start);
      const last = first + BigInt(length) > 0xffffffffn ? 0xffffffffn : first + BigInt(length);
      let expected = 0n;
      for (let value = first; value <= last; value++) if (value % 256n !== 0n && value % 256n !== 255n) expected++;
      assert.equal(rangeSize({ family: "IPv4", first, last }, true), expected);
    }),
  );
});

test("numbers and text round-trip in both families", () => {
  for (const ip of ["0.0.0.0", "255.255.255.255", "198.51.100.7", "::", "2001:db8::1", "ffff:ffff::"]) {
    const number = ipNumber(ip);
    assert.ok(number);
    assert.equal(ipText(number.family, number.value), ip);
  }
  assert.equal(ipNumber("fe80::1%eth0"), undefined);
});

test("a pool's entries merge; a bad entry is not served, the others are; a bad selector serves nothing", () => {
  const merged = mergeRanges(
    ["198.51.100.0/25", "198.51.100.128-198.51.100.200", "2001:db8::/127", "198.51.100.10"].map(
      (text) => parseAddressEntry(text) as never,
    ),
  );
  assert.deepEqual(merged.map(formatRange), ["198.51.100.0-198.51.100.200", "2001:db8::-2001:db8::1"]);
  const bad = poolFacts({
    metadata: { name: "p" },
    spec: {
      addresses: ["198.51.100.9-198.51.100.1", "198.51.100.16/30"],
      serviceSelector: { matchExpressions: [{ key: "a", operator: "Is" }] },
    },
  });
  assert.equal(bad.problem, 'serviceSelector: unknown operator "Is"');
  assert.deepEqual(bad.unservable, ['"198.51.100.9-198.51.100.1" ends before it starts']);
  assert.deepEqual(bad.ranges.map(formatRange), ["198.51.100.16-198.51.100.19"]);
  assert.equal(poolFacts({ metadata: { name: "p" }, spec: {} }).problem, "spec.addresses is empty");
  const good = poolFacts({ metadata: { name: "p" }, spec: { addresses: ["198.51.100.0/30"] } });
  assert.deepEqual([good.problem, good.autoAssign, good.avoidBuggyIps], [undefined, true, false]);
});
