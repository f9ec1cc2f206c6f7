import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { type ControlPacket, decodeControl, encodeControl, isDropped, STATES } from "./control.ts";

const uint32 = fc.integer({ min: 0, max: 0xffffffff });
const valid: fc.Arbitrary<ControlPacket> = fc
  .record({
    diag: fc.nat(31),
    state: fc.constantFrom(...STATES),
    poll: fc.boolean(),
    final: fc.boolean(),
    cpi: fc.boolean(),
    demand: fc.boolean(),
    detectMult: fc.integer({ min: 1, max: 255 }),
    myDiscriminator: fc.integer({ min: 1, max: 0xffffffff }),
    yourDiscriminator: uint32,
    desiredMinTx: uint32,
    requiredMinRx: uint32,
    requiredMinEchoRx: uint32,
  })
  // a plain object (fast-check's records have no prototype), with a discriminator wherever the state needs one
  .map((p) => ({ ...p, yourDiscriminator: p.state === "up" || p.state === "init" ? p.yourDiscriminator || 1 : p.yourDiscriminator }));

const UP: ControlPacket = {
  diag: 0,
  state: "up",
  poll: false,
  final: false,
  cpi: false,
  demand: false,
  detectMult: 3,
  myDiscriminator: 0x01020304,
  yourDiscriminator: 7,
  desiredMinTx: 300_000,
  requiredMinRx: 300_000,
  requiredMinEchoRx: 0,
};

test("the layout of RFC 5880 §4.1, byte by byte", () => {
  assert.equal(
    encodeControl({ ...UP, diag: 3, poll: true }).toString("hex"),
    "23e003180102030400000007000493e0000493e000000000",
  );
});

test("decode(encode(x)) == x for every valid packet", () => {
  fc.assert(fc.property(valid, (packet) => assert.deepEqual(decodeControl(encodeControl(packet)), packet)));
});

test("arbitrary bytes never throw: a packet or a named drop", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      const result = decodeControl(bytes);
      if (isDropped(result)) assert.match(result.drop, /^[a-z-]+$/);
      else assert.ok(result.detectMult > 0 && result.myDiscriminator > 0);
    }),
    { numRuns: 5000 },
  );
});

test("bytes past the Length field are ignored (the encapsulation may pad)", () => {
  assert.deepEqual(decodeControl(Buffer.concat([encodeControl(UP), Buffer.alloc(8, 0xff)])), UP);
});

test("§6.8.6's drop rules, each named", () => {
  const with_ = (change: (bytes: Buffer) => void) => {
    const bytes = encodeControl(UP);
    change(bytes);
    return bytes;
  };
  const cases: [string, Uint8Array, string][] = [
    ["fewer than 24 bytes", encodeControl(UP).subarray(0, 23), "short"],
    ["version 2", with_((b) => (b[0] = 0x40)), "version"],
    ["version 0", with_((b) => (b[0] = 0x00)), "version"],
    ["length 23", with_((b) => (b[3] = 23)), "length"],
    ["length beyond the payload", with_((b) => (b[3] = 25)), "length"],
    ["detect mult 0", with_((b) => (b[2] = 0)), "detect-mult"],
    ["the M bit", with_((b) => (b[1]! |= 0x01)), "multipoint"],
    ["my discriminator 0", with_((b) => b.writeUInt32BE(0, 4)), "my-discriminator"],
    ["your discriminator 0 while Up", with_((b) => b.writeUInt32BE(0, 8)), "your-discriminator"],
    ["your discriminator 0 while Init", with_((b) => (b.writeUInt32BE(0, 8), (b[1] = 0x80))), "your-discriminator"],
    ["the A bit with no room for its section", with_((b) => (b[1]! |= 0x04)), "length"],
    [
      "the A bit (no authentication configured)",
      Buffer.concat([with_((b) => ((b[1]! |= 0x04), (b[3] = 28))), Buffer.from([1, 4, 1, 0])]),
      "authentication",
    ],
  ];
  for (const [name, bytes, rule] of cases) {
    const result = decodeControl(bytes);
    assert.ok(isDropped(result), name);
    assert.equal(result.drop, rule, name);
  }
  for (const state of ["down", "admin-down"] as const)
    assert.deepEqual(
      decodeControl(encodeControl({ ...UP, state, yourDiscriminator: 0 })),
      { ...UP, state, yourDiscriminator: 0 },
      `your discriminator 0 is fine while ${state}`,
    );
});
