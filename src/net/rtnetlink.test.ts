// The wire codec against hand-built bytes (this machine is little-endian, like every prebuilt target
// of the `netlink` package); netlink.test.ts checks the same code against a real kernel.
import assert from "node:assert/strict";
import { endianness } from "node:os";
import { describe, test } from "node:test";
import {
  decodeMessages,
  dumpQuery,
  encodeMessage,
  errorCode,
  hostAddress,
  hostLink,
  MessageType,
  parseAttributes,
  routeQuery,
  routeSource,
} from "./rtnetlink.ts";

const hex = (text: string) => Buffer.from(text.replace(/\s+/g, ""), "hex");
const u16 = (n: number) => Buffer.from([n & 0xff, n >> 8]);
const u32 = (n: number) => Buffer.from([n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >>> 24]);
/** An rtattr with its padding. */
const attr = (type: number, payload: Buffer) =>
  Buffer.concat([u16(4 + payload.length), u16(type), payload, Buffer.alloc((4 - (payload.length % 4)) % 4)]);
/** struct ifaddrmsg. */
const ifaddrmsg = (family: number, prefix: number, flags: number, scope: number, index: number) =>
  Buffer.concat([Buffer.from([family, prefix, flags, scope]), u32(index)]);
const names = new Map([[2, "eth0"]]);

describe("rtnetlink codec", { skip: endianness() !== "LE" && "expected bytes are little-endian" }, () => {
  test("a route query is an RTM_GETROUTE with rtmsg family/dst_len and RTA_DST", () => {
    const message = encodeMessage({
      type: MessageType.GETROUTE,
      flags: 1,
      seq: 7,
      body: routeQuery("198.18.0.1"),
    });
    assert.deepEqual(
      message,
      hex("24000000 1a00 0100 07000000 00000000  02 20 000000000000 00000000  0800 0100 c6120001"),
    );
    const v6 = routeQuery("fd00:198:18::1");
    assert.deepEqual(v6.subarray(0, 2), Buffer.from([10, 128]));
    assert.deepEqual(
      v6.subarray(12),
      Buffer.concat([u16(20), u16(1), hex("fd000198001800000000000000000001")]),
    );
  });

  test("dump queries carry an all-families header of the right size", () => {
    assert.deepEqual(dumpQuery(MessageType.GETADDR), Buffer.alloc(8));
    assert.deepEqual(dumpQuery(MessageType.GETLINK), Buffer.alloc(16));
  });

  test("a datagram splits into its aligned messages; a truncated tail is dropped", () => {
    const one = encodeMessage({ type: 20, flags: 2, seq: 5, body: hex("0102 03") }); // 19 bytes, padded to 20
    const two = encodeMessage({ type: 3, flags: 2, seq: 5, body: u32(0) });
    const datagram = Buffer.concat([one, Buffer.alloc(1), two, hex("ff000000 0300")]);
    assert.deepEqual(decodeMessages(datagram), [
      { type: 20, flags: 2, seq: 5, body: hex("010203") },
      { type: 3, flags: 2, seq: 5, body: u32(0) },
    ]);
  });

  test("attributes: padding skipped, NLA_F_NESTED/NET_BYTEORDER bits masked, truncated ones dropped", () => {
    const data = Buffer.concat([attr(3, Buffer.from("ab")), attr(0x8000 | 7, u32(9)), hex("0800 0200 01")]);
    assert.deepEqual(
      parseAttributes(data),
      new Map([
        [3, Buffer.from("ab")],
        [7, u32(9)],
      ]),
    );
  });

  test("an error message carries a negative errno; 0 is an acknowledgement", () => {
    assert.equal(
      errorCode({ type: 2, flags: 0, seq: 1, body: Buffer.concat([u32(-101 >>> 0), Buffer.alloc(16)]) }),
      -101,
    );
    assert.equal(errorCode({ type: 3, flags: 2, seq: 1, body: u32(0) }), 0);
    assert.equal(errorCode({ type: 3, flags: 2, seq: 1, body: Buffer.alloc(0) }), 0);
  });

  test("the route source is RTA_PREFSRC, when present", () => {
    const rtmsg = Buffer.alloc(12);
    assert.equal(
      routeSource(Buffer.concat([rtmsg, attr(1, hex("c6130001")), attr(7, hex("c6120002"))])),
      "198.18.0.2",
    );
    const v6 = hex("fd000198001800000000000000000002");
    assert.equal(routeSource(Buffer.concat([rtmsg, attr(7, v6)])), "fd00:198:18::2");
    assert.equal(routeSource(Buffer.concat([rtmsg, attr(4, u32(2))])), undefined);
  });

  test("links: names lose their NUL terminator; a 6-byte IFLA_ADDRESS is the MAC; up is IFF_UP and IFF_RUNNING", () => {
    const ifinfomsg = (flags = 0) => Buffer.concat([Buffer.alloc(4), u32(2), u32(flags), Buffer.alloc(4)]);
    const name = attr(3, Buffer.from("eth0\0"));
    assert.deepEqual(hostLink(Buffer.concat([ifinfomsg(), name])), { index: 2, name: "eth0", up: false });
    assert.deepEqual(hostLink(Buffer.concat([ifinfomsg(0x10043), attr(1, hex("02000000000a")), name])), {
      index: 2,
      name: "eth0",
      up: true,
      mac: "02:00:00:00:00:0a",
    });
    // Set up, no carrier (IFF_RUNNING clear: `ip` prints NO-CARRIER); running but set down cannot be.
    assert.equal(hostLink(Buffer.concat([ifinfomsg(0x1003), name]))?.up, false);
    // An IPIP tunnel's "hardware address" is its IPv4 endpoint; loopback's is 6 zero bytes (a MAC like any).
    assert.deepEqual(hostLink(Buffer.concat([ifinfomsg(), attr(1, hex("c6120001")), name])), {
      index: 2,
      name: "eth0",
      up: false,
    });
    assert.equal(hostLink(ifinfomsg()), undefined);
  });

  test("addresses: IFA_LOCAL over IFA_ADDRESS (point-to-point), IFA_FLAGS over the u8 flags", () => {
    const ptp = Buffer.concat([
      ifaddrmsg(2, 32, 0x01, 0, 2),
      attr(1, hex("c6120009")),
      attr(2, hex("c6120002")),
    ]);
    assert.deepEqual(hostAddress(ptp, names), {
      address: "198.18.0.2",
      prefixLength: 32,
      family: 4,
      interfaceName: "eth0",
      interfaceIndex: 2,
      scope: "global",
      flags: { secondary: true, tentative: false, deprecated: false, dadFailed: false },
    });
    const v6 = Buffer.concat([
      ifaddrmsg(10, 64, 0x80, 253, 2),
      attr(1, hex("fe800000000000000000000000000001")),
      attr(8, u32(0x20 | 0x40 | 0x08)),
    ]);
    assert.deepEqual(hostAddress(v6, names), {
      address: "fe80::1",
      prefixLength: 64,
      family: 6,
      interfaceName: "eth0",
      interfaceIndex: 2,
      scope: "link",
      flags: { secondary: false, tentative: true, deprecated: true, dadFailed: true },
    });
  });

  test("address scopes: the reserved names as iproute2 prints them, any other value as its number", () => {
    // Found by test/netns/rtnetlink-iproute2.test.ts: `ip address add … scope 1` and `scope nowhere` were read as
    // "global" and "host"; the kernel never takes a scope-1 address as the source of a global route.
    const cases = [
      [0, "global"],
      [1, "1"],
      [100, "100"],
      [199, "199"],
      [200, "site"],
      [201, "201"],
      [252, "252"],
      [253, "link"],
      [254, "host"],
      [255, "nowhere"],
    ] as const;
    for (const [scope, name] of cases) {
      const body = Buffer.concat([ifaddrmsg(2, 24, 0, scope, 2), attr(1, hex("c6120002"))]);
      assert.equal(hostAddress(body, names)?.scope, name, `scope ${scope}`);
    }
  });

  test("addresses of other families, unknown interfaces or without an address are skipped", () => {
    assert.equal(
      hostAddress(Buffer.concat([ifaddrmsg(2, 24, 0, 0, 3), attr(1, hex("c6120002"))]), names),
      undefined,
    );
    assert.equal(
      hostAddress(Buffer.concat([ifaddrmsg(7, 24, 0, 0, 2), attr(1, hex("c6120002"))]), names),
      undefined,
    );
    assert.equal(
      hostAddress(Buffer.concat([ifaddrmsg(2, 24, 0, 0, 2), attr(1, hex("c61200"))]), names),
      undefined,
    );
    assert.equal(hostAddress(ifaddrmsg(2, 24, 0, 0, 2), names), undefined);
  });
});
