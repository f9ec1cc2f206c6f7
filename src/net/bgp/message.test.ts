import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { type BgpError, notificationName } from "./errors.ts";
import { type Family, ipFromBytes, prefixOf } from "../ip.ts";
import { decodeMessage, encodeMessage, type Message, MAX_MESSAGE_LENGTH, splitMessages } from "./message.ts";
import { endOfRib, endOfRibFamily, type PathAttributes, type Update } from "./update.ts";

// ---- generators ----

const prefix = (family: Family) =>
  fc
    .tuple(
      fc.uint8Array({ minLength: family === 4 ? 4 : 16, maxLength: family === 4 ? 4 : 16 }),
      fc.nat(family === 4 ? 32 : 128),
    )
    .map(([bytes, length]) => prefixOf(ipFromBytes(bytes), length));
const ipv4Unicast = fc
  .tuple(fc.integer({ min: 1, max: 223 }), fc.uint8Array({ minLength: 3, maxLength: 3 }))
  .map(([first, rest]) => ipFromBytes(Uint8Array.from([first, ...rest])));
const ipv6 = fc.uint8Array({ minLength: 16, maxLength: 16 }).map(ipFromBytes);
const linkLocal = fc
  .uint8Array({ minLength: 8, maxLength: 8 })
  .map((tail) => ipFromBytes(Uint8Array.from([0xfe, 0x80, 0, 0, 0, 0, 0, 0, ...tail])));
const asn = fc.integer({ min: 1, max: 0xffffffff });
const community = fc.tuple(fc.nat(0xffff), fc.nat(0xffff)).map(([a, b]) => `${a}:${b}`);
const family = fc.constantFrom<Family>(4, 6);

const attributesFor = (announces4: boolean, announcesMp: boolean): fc.Arbitrary<PathAttributes> =>
  fc
    .record(
      {
        origin: fc.constantFrom("igp" as const, "egp" as const, "incomplete" as const),
        asPath: fc.array(
          fc.record({
            type: fc.constantFrom(
              "set" as const,
              "sequence" as const,
              "confed-sequence" as const,
              "confed-set" as const,
            ),
            asns: fc.array(asn, { minLength: 1, maxLength: 6 }),
          }),
          { maxLength: 3 },
        ),
        nextHop: ipv4Unicast,
        med: fc.nat(0xffffffff),
        localPref: fc.nat(0xffffffff),
        communities: fc.array(community, { minLength: 1, maxLength: 8 }),
        mpReach: family.chain((f) =>
          fc.record(
            {
              family: fc.constant(f),
              nextHop: f === 4 ? ipv4Unicast : ipv6,
              linkLocalNextHop: f === 4 ? fc.constant(undefined) : linkLocal,
              nlri: fc.array(prefix(f), { minLength: announcesMp ? 1 : 0, maxLength: announcesMp ? 20 : 0 }),
            },
            { requiredKeys: ["family", "nextHop", "nlri"] },
          ),
        ),
        mpUnreach: family.chain((f) =>
          fc.record({ family: fc.constant(f), withdrawn: fc.array(prefix(f), { maxLength: 20 }) }),
        ),
      },
      {
        requiredKeys: [
          ...(announces4 || announcesMp ? (["origin", "asPath"] as const) : []),
          ...(announces4 ? (["nextHop"] as const) : []),
          ...(announcesMp ? (["mpReach"] as const) : []),
        ],
      },
    )
    .map((attributes) => {
      // fc.record leaves an optional key out; a generated undefined link-local next hop is left out the same way
      if (attributes.mpReach && attributes.mpReach.linkLocalNextHop === undefined)
        delete attributes.mpReach.linkLocalNextHop;
      return attributes;
    });

const update: fc.Arbitrary<Update> = fc.tuple(fc.boolean(), fc.boolean()).chain(([announces4, announcesMp]) =>
  fc.record({
    withdrawn: fc.array(prefix(4), { maxLength: 30 }),
    attributes: attributesFor(announces4, announcesMp),
    nlri: fc.array(prefix(4), { minLength: announces4 ? 1 : 0, maxLength: announces4 ? 30 : 0 }),
  }),
);

const open = fc.boolean().chain((fourOctetAs) =>
  fc.record({
    asn: fourOctetAs ? asn : fc.integer({ min: 1, max: 0xffff }),
    holdTime: fc.oneof(fc.constant(0), fc.integer({ min: 3, max: 0xffff })),
    identifier: fc
      .integer({ min: 1, max: 0xffffffff })
      .map((n) => ipFromBytes(Uint8Array.from([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255]))),
    capabilities: fc.record(
      {
        fourOctetAs: fc.constant(fourOctetAs),
        families: fc.uniqueArray(family, { maxLength: 2 }),
        routeRefresh: fc.boolean(),
        gracefulRestart: fc.record({
          restarting: fc.boolean(),
          restartTime: fc.nat(4095),
          families: fc.array(fc.record({ family, forwarding: fc.boolean() }), { maxLength: 2 }),
        }),
      },
      { requiredKeys: ["fourOctetAs", "families", "routeRefresh"] },
    ),
  }),
);

/** The value with plain objects for fc.record's null-prototype ones, so that deepEqual compares content only. */
function plain<T>(value: T): T {
  if (Buffer.isBuffer(value) || typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return value.map(plain) as T;
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, plain(item)])) as T;
}

const message: fc.Arbitrary<Message> = fc
  .oneof(
    open.map((o) => ({ type: "open" as const, open: o })),
    update.map((u) => ({ type: "update" as const, update: u })),
    fc
      .record({
        code: fc.nat(255),
        subcode: fc.nat(255),
        data: fc.uint8Array({ maxLength: 64 }).map((d) => Buffer.from(d)),
      })
      .map((n) => ({ type: "notification" as const, notification: n })),
    fc.constant({ type: "keepalive" as const }),
    fc
      .record({ afi: fc.nat(0xffff), safi: fc.nat(255) })
      .map((r) => ({ type: "route-refresh" as const, routeRefresh: r })),
  )
  .map(plain);

const isError = (value: Message | BgpError): value is BgpError => "notification" in value && "reason" in value;
const named = (value: Message | BgpError) =>
  isError(value) ? notificationName(value.notification) : `message ${value.type}`;
const hex = (text: string) => Buffer.from(text.replaceAll(" ", ""), "hex");
const MARKER = "ff".repeat(16);

// ---- properties ----

test("decode(encode(message)) is the message, for every message that fits in 4096 bytes", () => {
  fc.assert(
    fc.property(message, (m) => {
      let bytes: Buffer;
      try {
        bytes = encodeMessage(m);
      } catch (err) {
        fc.pre(!/exceeds 4096/.test((err as Error).message));
        throw err;
      }
      assert.ok(bytes.length <= MAX_MESSAGE_LENGTH);
      assert.deepEqual(decodeMessage(bytes), m);
    }),
    { numRuns: 2000 },
  );
});

test("arbitrary bytes never throw and are read in bounded time; a stream splits into whole messages or one error", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 4200 }), fc.boolean(), (raw, framed) => {
      const bytes = Buffer.from(raw);
      if (framed && bytes.length >= 19) {
        bytes.fill(0xff, 0, 16); // past the marker check, so the body readers see the noise
        bytes.writeUInt16BE(Math.min(bytes.length, 0xffff), 16);
        bytes[18] = 1 + ((bytes[18] ?? 0) % 5);
      }
      const started = performance.now();
      decodeMessage(bytes);
      const { messages, rest, error } = splitMessages(bytes);
      for (const m of messages) decodeMessage(m);
      assert.ok(error !== undefined || messages.reduce((n, m) => n + m.length, 0) + rest.length === bytes.length);
      assert.ok(performance.now() - started < 200, "one message takes bounded work");
    }),
    { numRuns: 5000 },
  );
});

test("valid messages with bytes flipped or cut never throw; a cut UPDATE is refused with an UPDATE error", () => {
  fc.assert(
    fc.property(message, fc.array(fc.tuple(fc.nat(), fc.nat(255)), { maxLength: 4 }), fc.nat(), (m, flips, cut) => {
      let bytes: Buffer;
      try {
        bytes = encodeMessage(m);
      } catch {
        return fc.pre(false);
      }
      const spoiled = Buffer.from(bytes);
      for (const [at, value] of flips) spoiled[19 + (at % Math.max(1, spoiled.length - 19))] = value;
      decodeMessage(spoiled);
      if (m.type !== "update" || bytes.length <= 23) return;
      // the body cut short, the header's length made to match: the lengths inside now overrun
      const length = 23 + (cut % (bytes.length - 23));
      const truncated = Buffer.from(bytes.subarray(0, length));
      truncated.writeUInt16BE(length, 16);
      const result = decodeMessage(truncated);
      if (isError(result)) assert.equal(result.notification.code, 3, named(result));
    }),
    { numRuns: 2000 },
  );
});

test("End-of-RIB markers for both families are recognised, and nothing else is", () => {
  for (const f of [4, 6] as const) {
    const decoded = decodeMessage(encodeMessage({ type: "update", update: endOfRib(f) }));
    assert.ok(!isError(decoded) && decoded.type === "update");
    assert.equal(endOfRibFamily(decoded.update), f);
  }
  assert.equal(encodeMessage({ type: "update", update: endOfRib(4) }).length, 23);
  assert.equal(endOfRibFamily({ withdrawn: ["198.18.0.0/24"], attributes: {}, nlri: [] }), undefined);
  assert.equal(
    endOfRibFamily({ withdrawn: [], attributes: { mpUnreach: { family: 6, withdrawn: ["fd00::/64"] } }, nlri: [] }),
    undefined,
  );
});

test("known bytes: an OPEN with AS_TRANS and the 4-octet ASN, as RFC 6793 writes it", () => {
  const bytes = encodeMessage({
    type: "open",
    open: {
      asn: 4200000001,
      holdTime: 90,
      identifier: "198.18.0.1",
      capabilities: {
        fourOctetAs: true,
        families: [4, 6],
        routeRefresh: true,
        gracefulRestart: { restarting: true, restartTime: 120, families: [{ family: 4, forwarding: true }] },
      },
    },
  });
  const expected = `${MARKER} 003b 01 04 5ba0 005a c6120001 1e 02 1c 0104 00010001 0104 00020001 0200 4006 8078 0001 0180 4104 fa56ea01`;
  assert.equal(bytes.toString("hex"), hex(expected).toString("hex"));
});

test("known bytes: an IPv6 UPDATE with a global and a link-local next hop (RFC 2545: next hop length 32)", () => {
  const bytes = encodeMessage({
    type: "update",
    update: {
      withdrawn: [],
      attributes: {
        origin: "igp",
        asPath: [{ type: "sequence", asns: [65001] }],
        mpReach: { family: 6, nextHop: "fd00::1", linkLocalNextHop: "fe80::1", nlri: ["fd00:1::/64"] },
      },
      nlri: [],
    },
  });
  const attrs = `40010100 4002 06 0201 0000fde9 800e 2e 0002 01 20 fd000000000000000000000000000001 fe800000000000000000000000000001 00 40 fd000001 00000000`;
  assert.equal(
    bytes.subarray(19).toString("hex"),
    hex(`0000 ${hex(attrs).length.toString(16).padStart(4, "0")} ${attrs}`).toString("hex"),
  );
});

test("refusals name the NOTIFICATION RFC 4271 §6 and RFC 7606 ask for", () => {
  const keepalive = encodeMessage({ type: "keepalive" });
  const goodOpen = encodeMessage({
    type: "open",
    open: {
      asn: 65001,
      holdTime: 90,
      identifier: "198.18.0.1",
      capabilities: { fourOctetAs: true, families: [4], routeRefresh: true },
    },
  });
  const withLength = (bytes: Buffer, length: number) => {
    const copy = Buffer.from(bytes);
    copy.writeUInt16BE(length, 16);
    return copy;
  };
  const patched = (bytes: Buffer, at: number, value: number[]) => {
    const copy = Buffer.from(bytes);
    Buffer.from(value).copy(copy, at);
    return copy;
  };
  const update = (body: string) => {
    const content = hex(body);
    return Buffer.concat([hex(MARKER), Buffer.from([0, 19 + content.length, 2]), content]);
  };
  const cases: [string, Buffer, string, boolean?][] = [
    ["marker not all ones", patched(keepalive, 3, [0]), "message-header/connection-not-synchronized"],
    ["length 18", withLength(keepalive, 18), "message-header/bad-message-length"],
    [
      "length 4097 (oversized)",
      withLength(Buffer.concat([keepalive, Buffer.alloc(4078)]), 4097),
      "message-header/bad-message-length",
    ],
    ["type 6", patched(keepalive, 18, [6]), "message-header/bad-message-type"],
    [
      "KEEPALIVE of 20 bytes",
      withLength(Buffer.concat([keepalive, Buffer.alloc(1)]), 20),
      "message-header/bad-message-length",
    ],
    ["OPEN of 28 bytes", withLength(goodOpen.subarray(0, 28), 28), "message-header/bad-message-length"],
    ["OPEN version 3", patched(goodOpen, 19, [3]), "open/unsupported-version-number"],
    ["OPEN hold time 2", patched(goodOpen, 22, [0, 2]), "open/unacceptable-hold-time"],
    ["OPEN identifier 0", patched(goodOpen, 24, [0, 0, 0, 0]), "open/bad-bgp-identifier"],
    ["OPEN optional parameter type 1", patched(goodOpen, 29, [1]), "open/unsupported-optional-parameter"],
    ["OPEN parameters length past the message", patched(goodOpen, 28, [200]), "open/unspecific"],
    [
      "ROUTE-REFRESH of 24 bytes",
      withLength(
        Buffer.concat([encodeMessage({ type: "route-refresh", routeRefresh: { afi: 1, safi: 1 } }), Buffer.alloc(1)]),
        24,
      ),
      "route-refresh/invalid-message-length",
    ],
    ["withdrawn length past the message", update("0010 0000"), "update/malformed-attribute-list"],
    ["attributes length past the message", update("0000 0010 400101 00"), "update/malformed-attribute-list"],
    ["an attribute past the attribute list", update("0000 0003 400105"), "update/malformed-attribute-list"],
    ["NLRI prefix length 33", update("0000 0000 21 c6120000 00"), "update/invalid-network-field"],
    ["NLRI prefix cut short", update("0000 0000 18 c612"), "update/invalid-network-field"],
    ["unknown well-known attribute", update("0000 0003 406300"), "update/unrecognized-well-known-attribute"],
    [
      "MP_REACH next hop length 5",
      update("0000 000a 800e 07 0002 01 05 0000000000"),
      "update/optional-attribute-error",
    ],
    ["MP_REACH twice", update("0000 000c 800f 03 000201 800f 03 000201"), "update/malformed-attribute-list"],
    ["ORIGIN 3", update("0000 000e 40010103 400200 400304c6120001 18c61200"), "update/invalid-origin-attribute", true],
    [
      "ORIGIN flags optional",
      update("0000 000e 80010100 400200 400304c6120001 18c61200"),
      "update/attribute-flags-error",
      true,
    ],
    [
      "AS_PATH segment type 9",
      update("0000 0014 40010100 40020609 010000fde9 400304c6120001 18c61200"),
      "update/malformed-as-path",
      true,
    ],
    [
      "AS_PATH segment past the attribute",
      update("0000 0013 40010100 40020502 02000000 400304c6120001 18c61200"),
      "update/malformed-as-path",
      true,
    ],
    [
      "NEXT_HOP 224.0.0.1",
      update("0000 000e 40010100 400200 400304e0000001 18c61200"),
      "update/invalid-next-hop-attribute",
      true,
    ],
    [
      "NEXT_HOP of 3 bytes",
      update("0000 000d 40010100 400200 400303c61200 18c61200"),
      "update/attribute-length-error",
      true,
    ],
    [
      "COMMUNITIES of 3 bytes",
      update("0000 0014 40010100 400200 400304c6120001 c00803000001 18c61200"),
      "update/optional-attribute-error",
      true,
    ],
    [
      "NLRI without NEXT_HOP",
      update("0000 0007 40010100 400200 18c61200"),
      "update/missing-well-known-attribute",
      true,
    ],
  ];
  for (const [name, bytes, expected, withdraw = false] of cases) {
    const result = decodeMessage(bytes);
    assert.equal(named(result), expected, name);
    if (isError(result)) assert.equal(result.treatAsWithdraw, withdraw, `${name}: treat-as-withdraw`);
  }
  // RFC 4271 §6.1: a bad length's NOTIFICATION carries the length field; a version error the version we speak
  const oversized = decodeMessage(withLength(Buffer.concat([keepalive, Buffer.alloc(4078)]), 4097));
  assert.ok(isError(oversized) && oversized.notification.data.equals(Buffer.from([0x10, 0x01])));
  const version = decodeMessage(patched(goodOpen, 19, [3]));
  assert.ok(isError(version) && version.notification.data.equals(Buffer.from([0, 4])));
});

test("an oversized header is refused before its body arrives; whole messages split off a stream", () => {
  const keepalive = encodeMessage({ type: "keepalive" });
  const header = Buffer.from(keepalive);
  header.writeUInt16BE(60000, 16);
  const split = splitMessages(Buffer.concat([keepalive, keepalive, header]));
  assert.equal(split.messages.length, 2);
  assert.equal(split.error && notificationName(split.error.notification), "message-header/bad-message-length");
  const partial = splitMessages(Buffer.concat([keepalive, keepalive.subarray(0, 10)]));
  assert.deepEqual([partial.messages.length, partial.rest.length, partial.error], [1, 10, undefined]);
});
