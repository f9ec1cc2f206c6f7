// ARP and NDP as src/net/arp.ts and ndp.ts read and build them, against MetalLB's L2 speaker libraries
// (github.com/mdlayher/arp, github.com/mdlayher/ndp) on generated packets: what either refuses, the other refuses
// too, except where ours is stricter by a rule named here (RFC 4861 7.1.1: code 0, no multicast target; ARP: only
// Ethernet/IPv4 requests and replies, where mdlayher/arp reads any types and operations). What we send whole (the
// IPv6 packet of duplicate address detection) is read by golang.org/x/net/ipv6 and checksummed by mdlayher/ndp.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { type ArpPacket, arpProbe, buildArp, parseArp } from "../../src/net/arp.ts";
import { ipFromBytes } from "../../src/net/ip.ts";
import { macFromBytes } from "../../src/net/mac.ts";
import {
  buildNeighborAdvertisement,
  buildNeighborSolicitation,
  duplicateAddressProbe,
  parseNeighborAdvertisement,
  parseNeighborSolicitation,
} from "../../src/net/ndp.ts";
import { type Oracle, startOracle } from "./oracle.ts";

const seed = Number(process.env.ORACLE_SEED ?? 20261124);
const numRuns = 3000;

interface GoArp extends Partial<Omit<ArpPacket, "operation">> {
  error?: string;
  hardwareType?: number;
  protocolType?: number;
  operation?: number;
}
interface GoNdp {
  error?: string;
  type?: "solicitation" | "advertisement" | "other";
  target?: string;
  solicited?: boolean;
  override?: boolean;
  router?: boolean;
  sourceMac?: string;
  targetMac?: string;
}

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

const u16 = (n: number) => [n >> 8, n & 0xff];
const choice = <T>(usual: T[], other: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...usual) }, { weight: 1, arbitrary: other });
const bytesOf = (length: number) => fc.uint8Array({ minLength: length, maxLength: length });
const mac = bytesOf(6).map(macFromBytes);
const ipv4 = bytesOf(4).map(ipFromBytes);
const ipv6Bytes = fc.oneof(
  { weight: 6, arbitrary: bytesOf(16) },
  { weight: 1, arbitrary: bytesOf(14).map((b) => Uint8Array.from([0xff, 2, ...b])) }, // multicast
  { weight: 1, arbitrary: bytesOf(4).map((b) => Uint8Array.from([...Array(10).fill(0), 255, 255, ...b])) }, // mapped
);

// ARP: the header fields mostly right, sometimes not; the address area of the length they promise, give or take.
const arpBytes = fc
  .record({
    htype: choice([1], fc.integer({ min: 0, max: 0xffff })),
    ptype: choice([0x0800], fc.constantFrom(0x86dd, 0)),
    hlen: choice([6], fc.integer({ min: 0, max: 10 })),
    plen: choice([4], fc.constantFrom(0, 6, 16)),
    op: choice([1, 2], fc.integer({ min: 0, max: 9 })),
    slack: choice([0, 18], fc.integer({ min: -3, max: 3 })),
  })
  .chain((h) =>
    bytesOf(Math.max(0, 2 * h.hlen + 2 * h.plen + h.slack)).map((rest) =>
      Buffer.from([...u16(h.htype), ...u16(h.ptype), h.hlen, h.plen, ...u16(h.op), ...rest]),
    ),
  );

test("ARP packets: mdlayher/arp reads what we read; we read only Ethernet/IPv4 requests and replies", async () => {
  const seen = { read: 0, goOnly: 0, refused: 0 };
  await fc.assert(
    fc.asyncProperty(arpBytes, async (data) => {
      const go = await oracle.ask<GoArp>("neighbor", { op: "arp", hex: data.toString("hex") });
      const ours = parseArp(data);
      const context = `${data.toString("hex")}: Go ${JSON.stringify(go)}, ours ${JSON.stringify(ours)}`;
      const ethernetIpv4 = data[4] === 6 && data[5] === 4 && go.hardwareType === 1 && go.protocolType === 0x0800;
      if (go.error !== undefined || !ethernetIpv4 || (go.operation !== 1 && go.operation !== 2)) {
        assert.equal(ours, undefined, context);
        seen[go.error === undefined ? "goOnly" : "refused"]++;
        return;
      }
      seen.read++;
      assert.deepEqual(ours, {
        operation: go.operation === 1 ? "request" : "reply",
        senderMac: go.senderMac,
        senderIp: go.senderIp,
        targetMac: go.targetMac,
        targetIp: go.targetIp,
      }, context);
    }),
    { seed, numRuns },
  );
  assert.ok(seen.read > numRuns / 4 && seen.goOnly > 100 && seen.refused > 100, JSON.stringify(seen));
});

test("ARP packets we send (probes too) are the bytes arp.NewPacket(...).MarshalBinary() sends", async () => {
  const packet = fc.oneof(
    fc.record({
      operation: fc.constantFrom("request" as const, "reply" as const),
      senderMac: mac,
      senderIp: ipv4,
      targetMac: mac,
      targetIp: ipv4,
    }),
    fc.tuple(ipv4, mac).map(([ip, sender]) => arpProbe(ip, sender)),
  );
  await fc.assert(
    fc.asyncProperty(packet, async (p) => {
      const go = await oracle.ask<{ hex?: string; error?: string }>("neighbor", {
        op: "arpBuild",
        packet: { ...p, operation: p.operation === "request" ? 1 : 2 },
      });
      assert.equal(buildArp(p).toString("hex"), go.hex, JSON.stringify({ p, go }));
    }),
    { seed, numRuns: numRuns / 3 },
  );
});

// NDP: solicitations mostly, some other types; options of the link-layer types and unknown ones, of any length.
const option = fc
  .record({ type: choice([1, 2], fc.constantFrom(200, 253)), units: choice([1], fc.integer({ min: 0, max: 3 })) })
  .chain(({ type, units }) =>
    bytesOf(Math.max(0, units * 8 - 2)).map((body) => [type, units, ...body]),
  );
const ndpBytes = (usual: number) =>
  fc
    .record({
      type: choice([usual], fc.constantFrom(134, 135, 136, 137, 128)),
      code: choice([0], fc.integer({ min: 1, max: 255 })),
      rest: bytesOf(6),
      target: ipv6Bytes,
      options: fc.array(option, { maxLength: 3 }),
      cut: choice([0], fc.integer({ min: 1, max: 30 })),
    })
    .map(({ type, code, rest, target, options, cut }) => {
      const data = Buffer.from([type, code, ...rest, ...target, ...options.flat()]);
      return data.subarray(0, Math.max(0, data.length - cut));
    });

/**
 * Our reader of one NDP message type against mdlayher/ndp's: what Go refuses (or reads as another type) we refuse;
 * what it reads, we read as `expected` says, unless RFC 4861 7.1.1/7.1.2 discards it (code not 0, multicast target).
 */
function compareNdpReader<T>(
  type: 135 | 136,
  parse: (data: Buffer) => T | undefined,
  expected: (go: GoNdp) => T,
  withMac: (ours: T | undefined) => boolean,
) {
  return async () => {
    const seen = { read: 0, rfcOnly: 0, refused: 0, withMac: 0 };
    await fc.assert(
      fc.asyncProperty(ndpBytes(type), async (data) => {
        const go = await oracle.ask<GoNdp>("neighbor", { op: "ndp", hex: data.toString("hex") });
        const ours = parse(data);
        const context = `${data.toString("hex")}: Go ${JSON.stringify(go)}, ours ${JSON.stringify(ours)}`;
        if (go.error !== undefined || go.type !== (type === 135 ? "solicitation" : "advertisement")) {
          assert.equal(ours, undefined, context);
          seen.refused++;
        } else if (data[1] !== 0 || data[8] === 0xff) {
          assert.equal(ours, undefined, context);
          seen.rfcOnly++;
        } else {
          seen.read++;
          if (withMac(ours)) seen.withMac++;
          assert.deepEqual(ours, expected(go), context);
        }
      }),
      { seed, numRuns },
    );
    const enough = seen.read > numRuns / 5 && seen.refused > numRuns / 5;
    assert.ok(enough && seen.rfcOnly > 100 && seen.withMac > 100, JSON.stringify(seen));
  };
}

test(
  "Neighbor Solicitations: mdlayher/ndp reads what we read; ours is stricter only where RFC 4861 says",
  compareNdpReader(
    135,
    parseNeighborSolicitation,
    (go) => ({ target: go.target ?? "", ...(go.sourceMac && { sourceMac: go.sourceMac }) }),
    (ours) => ours?.sourceMac !== undefined,
  ),
);

test(
  "Neighbor Advertisements: mdlayher/ndp reads what we read; ours is stricter only where RFC 4861 says",
  compareNdpReader(
    136,
    parseNeighborAdvertisement,
    (go) => ({
      target: go.target ?? "",
      ...(go.targetMac && { mac: go.targetMac }),
      solicited: !!go.solicited,
      override: !!go.override,
    }),
    (ours) => ours?.mac !== undefined,
  ),
);

test("Neighbor Advertisements we send read in mdlayher/ndp as what we meant", async () => {
  const advert = fc.record({
    target: ipv6Bytes.filter((b) => b[10] !== 255 || b[0] !== 0).map(ipFromBytes),
    mac,
    solicited: fc.boolean(),
    override: fc.boolean(),
  });
  await fc.assert(
    fc.asyncProperty(advert, async (a) => {
      const hex = buildNeighborAdvertisement(a).toString("hex");
      const go = await oracle.ask<GoNdp>("neighbor", { op: "ndp", hex });
      const expected = { type: "advertisement", target: a.target, targetMac: a.mac };
      const flags = { ...(a.solicited && { solicited: true }), ...(a.override && { override: true }) };
      assert.deepEqual(go, { ...expected, ...flags }, hex);
    }),
    { seed, numRuns: numRuns / 3 },
  );
});

test("Neighbor Solicitations we send to a peer read in mdlayher/ndp as what we meant", async () => {
  const target = ipv6Bytes.filter((b) => b[0] !== 0xff && (b[10] !== 255 || b[0] !== 0)).map(ipFromBytes);
  await fc.assert(
    fc.asyncProperty(target, mac, async (address, sourceMac) => {
      const hex = buildNeighborSolicitation(address, sourceMac).toString("hex");
      const go = await oracle.ask<GoNdp>("neighbor", { op: "ndp", hex });
      assert.deepEqual(go, { type: "solicitation", target: address, sourceMac }, hex);
    }),
    { seed, numRuns: numRuns / 3 },
  );
});

interface GoIpv6 {
  error?: string;
  version: number;
  payloadLen: number;
  nextHeader: number;
  hopLimit: number;
  source: string;
  destination: string;
  solicitedNode?: string;
  checksumOk: boolean;
  message: GoNdp;
}

test("duplicate address detection we send: x/net/ipv6 reads its header, mdlayher/ndp its NS and checksum", async () => {
  const target = ipv6Bytes.filter((b) => b[0] !== 0xff && (b[10] !== 255 || b[0] !== 0)).map(ipFromBytes);
  await fc.assert(
    fc.asyncProperty(target, async (address) => {
      const { packet, mac: destinationMac } = duplicateAddressProbe(address);
      const go = await oracle.ask<GoIpv6>("neighbor", { op: "ipv6", hex: packet.toString("hex") });
      assert.deepEqual(
        go,
        {
          version: 6,
          payloadLen: packet.length - 40,
          nextHeader: 58,
          hopLimit: 255,
          source: "::",
          destination: go.solicitedNode,
          solicitedNode: go.solicitedNode,
          checksumOk: true,
          message: { type: "solicitation", target: address },
        },
        `${address}: ${packet.toString("hex")}`,
      );
      // RFC 2464 7: 33:33 and the destination's last four bytes.
      const group = Buffer.from(packet.subarray(36, 40)).toString("hex").replace(/(..)(?!$)/g, "$1:");
      assert.equal(destinationMac, `33:33:${group}`);
    }),
    { seed, numRuns: numRuns / 3 },
  );
});
