import assert from "node:assert/strict";
import { test } from "node:test";
import { type ArpPacket, arpProbe, arpReply, buildArp, gratuitousArp, parseArp } from "./arp.ts";

// A request from 198.18.0.9 (02:00:00:00:00:09) for 198.18.5.5, as tcpdump -xx shows it after the Ethernet header.
const REQUEST_HEX = "0001 0800 0604 0001 020000000009 c6120009 000000000000 c6120505";
const REQUEST: ArpPacket = {
  operation: "request",
  senderMac: "02:00:00:00:00:09",
  senderIp: "198.18.0.9",
  targetMac: "00:00:00:00:00:00",
  targetIp: "198.18.5.5",
};
const bytes = (hex: string) => Buffer.from(hex.replaceAll(" ", ""), "hex");

test("reads requests and replies; ignores Ethernet padding", () => {
  assert.deepEqual(parseArp(bytes(REQUEST_HEX)), REQUEST);
  assert.deepEqual(parseArp(Buffer.concat([bytes(REQUEST_HEX), Buffer.alloc(18)])), REQUEST);
  const reply = bytes(REQUEST_HEX);
  reply[7] = 2;
  assert.equal(parseArp(reply)?.operation, "reply");
});

test("refuses what is not an Ethernet/IPv4 request or reply", () => {
  const cases: [string, (data: Buffer) => void][] = [
    ["short", () => {}],
    ["hardware type 6 (IEEE 802)", (d) => d.writeUInt16BE(6, 0)],
    ["protocol IPv6", (d) => d.writeUInt16BE(0x86dd, 2)],
    ["hardware length 8", (d) => (d[4] = 8)],
    ["protocol length 16", (d) => (d[5] = 16)],
    ["RARP request (3)", (d) => d.writeUInt16BE(3, 6)],
    ["operation 0", (d) => d.writeUInt16BE(0, 6)],
  ];
  for (const [name, spoil] of cases) {
    const data = bytes(REQUEST_HEX);
    spoil(data);
    assert.equal(parseArp(name === "short" ? data.subarray(0, 27) : data), undefined, name);
  }
});

test("builds what it reads: requests, replies, gratuitous requests", () => {
  assert.equal(buildArp(REQUEST).toString("hex"), REQUEST_HEX.replaceAll(" ", ""));
  const reply = arpReply(REQUEST, "02:00:00:00:00:0a");
  assert.deepEqual(reply, {
    operation: "reply",
    senderMac: "02:00:00:00:00:0a",
    senderIp: "198.18.5.5",
    targetMac: "02:00:00:00:00:09",
    targetIp: "198.18.0.9",
  });
  assert.deepEqual(parseArp(buildArp(reply)), reply);
  const gratuitous = gratuitousArp("198.18.5.5", "02:00:00:00:00:0a");
  assert.equal(
    buildArp(gratuitous).toString("hex"),
    "000108000604000102000000000ac6120505000000000000c6120505",
  );
});

test("an ARP probe (RFC 5227 2.1.1) asks from 0.0.0.0 with a zero target MAC", () => {
  assert.equal(
    buildArp(arpProbe("198.18.5.5", "02:00:00:00:00:0a")).toString("hex"),
    "000108000604000102000000000a00000000000000000000c6120505",
  );
});

test("refuses to build with what is not a MAC or an IPv4 address", () => {
  assert.throws(() => buildArp({ ...REQUEST, senderMac: "02:00:00:00:00" }), /not an Ethernet address/);
  assert.throws(() => buildArp({ ...REQUEST, targetIp: "fd00::1" }), /not an IPv4 address/);
});
