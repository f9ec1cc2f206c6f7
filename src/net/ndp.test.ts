import assert from "node:assert/strict";
import { test } from "node:test";
import {
  buildNeighborAdvertisement,
  duplicateAddressProbe,
  parseNeighborAdvertisement,
  parseNeighborSolicitation,
  solicitedNodeGroup,
  unsolicitedAdvertisement,
} from "./ndp.ts";

const bytes = (hex: string) => Buffer.from(hex.replaceAll(" ", ""), "hex");
// An NS for fd00:198:18::55 with a source link-layer option 02:00:00:00:00:09 (checksum as the wire has it).
const TARGET = "fd00 0198 0018 0000 0000 0000 0000 0055";
const SOLICITATION = `8700 1234 00000000 ${TARGET} 0101 020000000009`;

test("reads a solicitation's target and the asker's MAC", () => {
  assert.deepEqual(parseNeighborSolicitation(bytes(SOLICITATION)), {
    target: "fd00:198:18::55",
    sourceMac: "02:00:00:00:00:09",
  });
  // From :: (duplicate address detection): no option.
  assert.deepEqual(parseNeighborSolicitation(bytes(`8700 0000 00000000 ${TARGET}`)), { target: "fd00:198:18::55" });
  // Unknown options are skipped; the first source option counts.
  assert.deepEqual(
    parseNeighborSolicitation(
      bytes(`8700 0000 00000000 ${TARGET} c801 000000000000 0101 02000000000a 0101 020000000009`),
    ),
    { target: "fd00:198:18::55", sourceMac: "02:00:00:00:00:0a" },
  );
});

test("discards what RFC 4861 7.1.1 discards, and other messages", () => {
  const cases: [string, string][] = [
    ["an advertisement", `8800 0000 00000000 ${TARGET}`],
    ["code 1", `8701 0000 00000000 ${TARGET}`],
    ["shorter than 24 bytes", `8700 0000 00000000 ${TARGET.slice(0, -5)}`],
    ["a multicast target", `8700 0000 00000000 ff02 0000 0000 0000 0000 0001 ff00 0055`],
    ["an option of length 0", `8700 0000 00000000 ${TARGET} 0100 020000000009`],
    ["an option past the end", `8700 0000 00000000 ${TARGET} 0102 020000000009`],
    ["a lone option byte", `8700 0000 00000000 ${TARGET} 01`],
    ["an IPv4-mapped target", `8700 0000 00000000 0000 0000 0000 0000 0000 ffff c612 0505`],
    ["a 16-byte link-layer option", `8700 0000 00000000 ${TARGET} 0102 ${"00".repeat(14)}`],
  ];
  for (const [name, hex] of cases) assert.equal(parseNeighborSolicitation(bytes(hex)), undefined, name);
});

test("builds solicited and unsolicited advertisements with the target's link-layer option", () => {
  const solicited = { target: "fd00:198:18::55", mac: "02:00:00:00:00:0a", solicited: true, override: true };
  assert.equal(
    buildNeighborAdvertisement(solicited).toString("hex"),
    bytes(`8800 0000 60000000 ${TARGET} 0201 02000000000a`).toString("hex"),
  );
  const unsolicited = unsolicitedAdvertisement("fd00:198:18::55", "02:00:00:00:00:0a");
  assert.deepEqual(unsolicited, { ...solicited, solicited: false });
  assert.equal(buildNeighborAdvertisement(unsolicited)[4], 0x20);
  assert.throws(() => buildNeighborAdvertisement({ ...solicited, target: "198.18.5.5" }), /not an IPv6 address/);
});

test("the solicited-node group keeps an address's last 24 bits", () => {
  assert.equal(solicitedNodeGroup("fd00:198:18::55"), "ff02::1:ff00:55");
  assert.equal(solicitedNodeGroup("2001:db8::abcd:ef01:2345"), "ff02::1:ff01:2345");
  assert.equal(solicitedNodeGroup("fe80::1"), "ff02::1:ff00:1");
});

test("reads advertisements: target, flags, the target's link-layer option when there is one", () => {
  assert.deepEqual(parseNeighborAdvertisement(bytes(`8800 1234 a0000000 ${TARGET} 0201 02000000000b`)), {
    target: "fd00:198:18::55",
    mac: "02:00:00:00:00:0b",
    solicited: false,
    override: true,
  });
  assert.deepEqual(parseNeighborAdvertisement(bytes(`8800 0000 40000000 ${TARGET} 0101 02000000000b`)), {
    target: "fd00:198:18::55",
    solicited: true,
    override: false,
  });
  const refused: [string, string][] = [
    ["a solicitation", `8700 0000 00000000 ${TARGET}`],
    ["code 1", `8801 0000 00000000 ${TARGET}`],
    ["a multicast target", `8800 0000 00000000 ff02 0000 0000 0000 0000 0001 ff00 0055`],
    ["an option past the end", `8800 0000 00000000 ${TARGET} 0202 02000000000b`],
  ];
  for (const [name, hex] of refused) assert.equal(parseNeighborAdvertisement(bytes(hex)), undefined, name);
});

test("duplicate address detection: an NS from :: to the solicited-node group, hop limit 255, checksummed", () => {
  const { packet, mac } = duplicateAddressProbe("fd00:198:18::1:55");
  assert.equal(mac, "33:33:ff:01:00:55");
  const header = packet.subarray(0, 40);
  assert.equal(header.toString("hex", 0, 8), "6000000000183aff", "version 6, 24 bytes of ICMPv6, hop limit 255");
  assert.equal(header.toString("hex", 8, 24), "0".repeat(32), "from ::");
  assert.equal(header.toString("hex", 24, 40), "ff0200000000000000000001ff010055");
  const message = packet.subarray(40);
  assert.deepEqual(parseNeighborSolicitation(message), { target: "fd00:198:18::1:55" });
  // The one's complement sum over the pseudo-header and the message, checksum included, is all ones.
  const pseudo = Buffer.concat([header.subarray(8, 40), Buffer.from("000000180000003a", "hex"), message]);
  let sum = 0;
  for (let i = 0; i < pseudo.length; i += 2) sum += pseudo.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  assert.equal(sum, 0xffff);
});
