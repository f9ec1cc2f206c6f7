import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { NodeAddress } from "kubernetes-types/core/v1.js";
import {
  type DetectedAddresses,
  desiredAddresses,
  hasInternalIP,
  parseProvidedNodeIPs,
  sameAddresses,
} from "./addresses.ts";
import { canonicalIp } from "../net/ip.ts";

const internalIP = (address: string): NodeAddress => ({ type: "InternalIP", address });
const externalIP = (address: string): NodeAddress => ({ type: "ExternalIP", address });
const hostname = (address: string): NodeAddress => ({ type: "Hostname", address });
const internalDNS = (address: string): NodeAddress => ({ type: "InternalDNS", address });
const externalDNS = (address: string): NodeAddress => ({ type: "ExternalDNS", address });

// What kubelet --cloud-provider=external --node-ip=198.18.0.10 writes before any cloud controller ran.
const kubeletNode = [internalIP("198.18.0.10"), hostname("node-1")];

interface Input {
  current: NodeAddress[];
  detected: DetectedAddresses;
  provided: string[];
}

interface Case {
  name: string;
  current: NodeAddress[];
  detected: DetectedAddresses;
  provided?: string[];
  addresses: NodeAddress[];
  notes?: string[];
}

const cases: Case[] = [
  {
    name: "kubelet-like node, external only: ExternalIP right after kubelet's InternalIP",
    current: kubeletNode,
    detected: { external: ["198.18.1.1"] },
    provided: ["198.18.0.10"],
    addresses: [internalIP("198.18.0.10"), externalIP("198.18.1.1"), hostname("node-1")],
  },
  {
    name: "kubelet-like node, internal detection agrees with provided-node-ip",
    current: kubeletNode,
    detected: { internal: ["198.18.0.10"], external: ["198.18.1.1"] },
    provided: ["198.18.0.10"],
    addresses: [internalIP("198.18.0.10"), externalIP("198.18.1.1"), hostname("node-1")],
  },
  {
    name: "kubelet-like node, internal detection disagrees: provided stays first, detected follows, a note",
    current: kubeletNode,
    detected: { internal: ["198.18.0.20"], external: ["198.18.1.1"] },
    provided: ["198.18.0.10"],
    addresses: [
      internalIP("198.18.0.10"),
      internalIP("198.18.0.20"),
      externalIP("198.18.1.1"),
      hostname("node-1"),
    ],
    notes: [
      "detected InternalIP 198.18.0.20 differs from provided-node-ip 198.18.0.10; 198.18.0.10 stays the first IPv4 InternalIP",
    ],
  },
  {
    name: "provided IP of a family detection did not report: no note",
    current: kubeletNode,
    detected: { internal: ["fd00:198:18::20"] },
    provided: ["198.18.0.10"],
    addresses: [internalIP("198.18.0.10"), internalIP("fd00:198:18::20"), hostname("node-1")],
  },
  {
    name: "managed internal replaces kubelet's other InternalIPs",
    current: [internalIP("198.18.0.99"), internalIP("198.18.0.10"), hostname("node-1")],
    detected: { internal: ["198.18.0.10"] },
    provided: ["198.18.0.10"],
    addresses: [internalIP("198.18.0.10"), hostname("node-1")],
  },
  {
    name: "managed internal with nothing provided or detected leaves no InternalIP",
    current: kubeletNode,
    detected: { internal: [] },
    addresses: [hostname("node-1")],
  },
  {
    name: "unmanaged internal keeps every kubelet InternalIP in order, even when not provided",
    current: [internalIP("198.18.0.99"), internalIP("198.18.0.10"), hostname("node-1")],
    detected: { external: ["198.18.1.1"] },
    provided: ["198.18.0.10"],
    addresses: [
      internalIP("198.18.0.99"),
      internalIP("198.18.0.10"),
      externalIP("198.18.1.1"),
      hostname("node-1"),
    ],
  },
  {
    name: "dual-stack: one address per target, in flag order, provided IPs first",
    current: [internalIP("198.18.0.10"), internalIP("fd00:198:18::10"), hostname("node-1")],
    detected: {
      internal: ["fd00:198:18::10", "198.18.0.10"],
      external: ["198.18.1.1", "fd00:198:18:1::1"],
    },
    provided: ["198.18.0.10", "fd00:198:18::10"],
    addresses: [
      internalIP("198.18.0.10"),
      internalIP("fd00:198:18::10"),
      externalIP("198.18.1.1"),
      externalIP("fd00:198:18:1::1"),
      hostname("node-1"),
    ],
  },
  {
    name: "dual-stack disagreement in one family only: one note",
    current: [],
    detected: { internal: ["198.18.0.10", "fd00:198:18::20", "fd00:198:18::21"] },
    provided: ["198.18.0.10", "fd00:198:18::10"],
    addresses: [
      internalIP("198.18.0.10"),
      internalIP("fd00:198:18::10"),
      internalIP("fd00:198:18::20"),
      internalIP("fd00:198:18::21"),
    ],
    notes: [
      "detected InternalIP fd00:198:18::20, fd00:198:18::21 differs from provided-node-ip fd00:198:18::10; fd00:198:18::10 stays the first IPv6 InternalIP",
    ],
  },
  {
    name: "ExternalIP equal to kubelet's InternalIP is not written",
    current: kubeletNode,
    detected: { external: ["198.18.0.10"] },
    addresses: kubeletNode,
  },
  {
    name: "ExternalIP equal to a detected InternalIP is not written; the other family's ExternalIP is",
    current: [hostname("node-1")],
    detected: { internal: ["198.18.0.10"], external: ["198.18.0.10", "fd00:198:18:1::1"] },
    addresses: [internalIP("198.18.0.10"), externalIP("fd00:198:18:1::1"), hostname("node-1")],
  },
  {
    name: "ExternalIP equal to an InternalIP in another IPv6 spelling is not written",
    current: [internalIP("fd00:198:18:0:0::10"), hostname("node-1")],
    detected: { external: ["FD00:198:18::10"] },
    addresses: [internalIP("fd00:198:18:0:0::10"), hostname("node-1")],
  },
  {
    name: "external detection failed: current ExternalIPs kept exactly, internal still managed",
    current: [internalIP("198.18.0.10"), externalIP("FD00:198:18:1:0::1"), hostname("node-1")],
    detected: { internal: ["198.18.0.20"] },
    addresses: [internalIP("198.18.0.20"), externalIP("FD00:198:18:1:0::1"), hostname("node-1")],
  },
  {
    name: "internal detection failed: kubelet's InternalIPs kept, external still managed",
    current: [internalIP("198.18.0.10"), externalIP("198.18.1.1"), hostname("node-1")],
    detected: { external: ["198.18.1.2"] },
    provided: ["198.18.0.10"],
    addresses: [internalIP("198.18.0.10"), externalIP("198.18.1.2"), hostname("node-1")],
  },
  {
    name: "no detection at all: the list is returned as it is",
    current: [hostname("node-1"), externalIP("198.18.1.1"), internalIP("198.18.0.10")],
    detected: {},
    provided: ["198.18.0.10"],
    addresses: [hostname("node-1"), externalIP("198.18.1.1"), internalIP("198.18.0.10")],
  },
  {
    name: "an empty detection removes the type's addresses",
    current: [internalIP("198.18.0.10"), externalIP("198.18.1.1"), hostname("node-1")],
    detected: { external: [] },
    addresses: [internalIP("198.18.0.10"), hostname("node-1")],
  },
  {
    name: "DNS and unknown types keep their order; the managed list takes its type's first slot",
    current: [
      hostname("node-1"),
      internalDNS("node-1.internal"),
      externalIP("198.18.1.9"),
      { type: "VendorSpecific", address: "x" },
      externalIP("198.18.1.8"),
      externalDNS("node-1.example"),
    ],
    detected: { external: ["198.18.1.1", "fd00:198:18:1::1"] },
    addresses: [
      hostname("node-1"),
      internalDNS("node-1.internal"),
      externalIP("198.18.1.1"),
      externalIP("fd00:198:18:1::1"),
      { type: "VendorSpecific", address: "x" },
      externalDNS("node-1.example"),
    ],
  },
  {
    name: "a new ExternalIP goes after the last InternalIP even with entries in between",
    current: [hostname("node-1"), internalIP("198.18.0.10"), internalDNS("node-1.internal")],
    detected: { external: ["198.18.1.1"] },
    addresses: [
      hostname("node-1"),
      internalIP("198.18.0.10"),
      externalIP("198.18.1.1"),
      internalDNS("node-1.internal"),
    ],
  },
  {
    name: "new InternalIPs go first, new ExternalIPs right after them",
    current: [hostname("node-1"), externalDNS("node-1.example")],
    detected: { internal: ["198.18.0.10"], external: ["198.18.1.1"] },
    addresses: [
      internalIP("198.18.0.10"),
      externalIP("198.18.1.1"),
      hostname("node-1"),
      externalDNS("node-1.example"),
    ],
  },
  {
    name: "exact duplicates are removed: first one stays, IPs compared canonically",
    current: [
      hostname("node-1"),
      internalIP("fd00:198:18::10"),
      hostname("node-1"),
      internalIP("FD00:198:18:0::10"),
      hostname("node-2"),
    ],
    detected: { external: ["198.18.1.1", "198.18.1.1"] },
    addresses: [
      hostname("node-1"),
      internalIP("fd00:198:18::10"),
      externalIP("198.18.1.1"),
      hostname("node-2"),
    ],
  },
  {
    name: "a provided IP that is also detected appears once",
    current: [],
    detected: { internal: ["198.18.0.20", "198.18.0.10"] },
    provided: ["198.18.0.10", "198.18.0.10"],
    addresses: [internalIP("198.18.0.10"), internalIP("198.18.0.20")],
  },
  {
    name: "what the agent adds is written in canonical form",
    current: [],
    detected: { internal: ["FD00:198:18:0:0:0:0:10"], external: ["2001:DB8:0::1", "::ffff:198.18.1.1"] },
    provided: ["fd00:198:18::10"],
    addresses: [internalIP("fd00:198:18::10"), externalIP("2001:db8::1"), externalIP("198.18.1.1")],
  },
  {
    name: "empty current list, nothing detected",
    current: [],
    detected: { internal: [], external: [] },
    addresses: [],
  },
  {
    name: "empty current list, only external",
    current: [],
    detected: { external: ["198.18.1.1"] },
    addresses: [externalIP("198.18.1.1")],
  },
];

describe("desiredAddresses", () => {
  for (const c of cases) {
    test(c.name, () => {
      const context = { providedNodeIPs: c.provided ?? [] };
      const plan = desiredAddresses(c.current, c.detected, context);
      assert.deepEqual(plan, { addresses: c.addresses, notes: c.notes ?? [] });
      const again = desiredAddresses(plan.addresses, c.detected, context);
      assert.deepEqual(again, plan, "a second reconcile must change nothing");
    });
  }

  test("does not modify its input", () => {
    const current = [internalIP("198.18.0.10"), hostname("node-1")];
    const snapshot = structuredClone(current);
    desiredAddresses(
      current,
      { internal: ["198.18.0.20"], external: ["198.18.1.1"] },
      { providedNodeIPs: [] },
    );
    assert.deepEqual(current, snapshot);
  });
});

describe("parseProvidedNodeIPs", () => {
  const table: [string | undefined, string[]][] = [
    [undefined, []],
    ["", []],
    [" , ", []],
    ["198.18.0.10", ["198.18.0.10"]],
    [" 198.18.0.10 , FD00:198:18:0::10 ", ["198.18.0.10", "fd00:198:18::10"]],
    ["fd00:198:18::10,198.18.0.10", ["fd00:198:18::10", "198.18.0.10"]],
    ["198.18.0.10,198.18.0.10", ["198.18.0.10"]],
    ["0.0.0.0", []],
    ["::,198.18.0.10", ["198.18.0.10"]],
    ["not-an-ip,198.18.0.10", ["198.18.0.10"]],
    ["010.000.0.10,198.18.0.10", ["10.0.0.10", "198.18.0.10"]], // kubelet and Kubernetes read --node-ip as decimal
    ["::ffff:198.18.0.10", ["198.18.0.10"]],
  ];
  for (const [annotation, expected] of table) {
    test(`${JSON.stringify(annotation)} → ${JSON.stringify(expected)}`, () =>
      assert.deepEqual(parseProvidedNodeIPs(annotation), expected));
  }
});

describe("hasInternalIP", () => {
  test("true with any InternalIP, wherever it is", () => {
    assert.equal(
      hasInternalIP([hostname("node-1"), externalIP("198.18.1.1"), internalIP("198.18.0.10")]),
      true,
    );
  });
  test("false without one (ExternalIP, DNS and empty lists do not count)", () => {
    assert.equal(hasInternalIP([]), false);
    assert.equal(
      hasInternalIP([hostname("node-1"), externalIP("198.18.1.1"), internalDNS("n.internal")]),
      false,
    );
    assert.equal(hasInternalIP([internalIP("")]), false);
  });
});

describe("sameAddresses", () => {
  const list = [internalIP("198.18.0.10"), hostname("node-1")];
  test("equal lists", () => assert.equal(sameAddresses(list, structuredClone(list)), true));
  test("order matters", () => assert.equal(sameAddresses(list, [...list].reverse()), false));
  test("length matters", () => assert.equal(sameAddresses(list, list.slice(0, 1)), false));
  test("type matters", () =>
    assert.equal(sameAddresses(list, [externalIP("198.18.0.10"), hostname("node-1")]), false));
  test("address text matters", () =>
    assert.equal(sameAddresses([internalIP("fd00:198:18::1")], [internalIP("FD00:198:18::1")]), false));
});

describe("desiredAddresses properties", () => {
  // Small pools so that collisions (duplicates, ExternalIP = InternalIP, provided = detected) are common.
  const ip = fc.constantFrom(
    "198.18.0.1",
    "198.18.0.2",
    "198.18.0.3",
    "fd00:198:18::1",
    "FD00:198:18:0::1",
    "fd00:198:18::2",
    "::ffff:198.18.0.3",
  );
  const name = fc.constantFrom("node-1", "node-2", "node-1.example");
  const plain = { noNullPrototype: true }; // deepEqual tells null-prototype records from object literals
  const entry: fc.Arbitrary<NodeAddress> = fc.oneof(
    fc.record({ type: fc.constantFrom("InternalIP", "ExternalIP"), address: ip }, plain),
    fc.record(
      { type: fc.constantFrom("Hostname", "InternalDNS", "ExternalDNS", "VendorSpecific"), address: name },
      plain,
    ),
  );
  const ipList = fc.array(ip, { maxLength: 4 });
  const input = fc.record({
    current: fc.array(entry, { maxLength: 8 }),
    detected: fc.record({ internal: ipList, external: ipList }, { ...plain, requiredKeys: [] }),
    provided: ipList,
  });
  const run = ({ current, detected, provided }: Input) =>
    desiredAddresses(current, detected, { providedNodeIPs: provided });
  const canonical = (address: string) => canonicalIp(address) ?? address;
  const isManaged = (type: string, detected: DetectedAddresses) =>
    (type === "InternalIP" && detected.internal !== undefined) ||
    (type === "ExternalIP" && detected.external !== undefined);
  const key = ({ type, address }: NodeAddress) =>
    `${type} ${type === "InternalIP" || type === "ExternalIP" ? canonical(address) : address}`;
  const ipsOf = (addresses: NodeAddress[], type: string) =>
    addresses.filter((a) => a.type === type).map((a) => a.address);
  const numRuns = 2000;

  test("idempotent: applying the plan again changes nothing", () => {
    fc.assert(
      fc.property(input, (i) => {
        const once = run(i);
        const twice = run({ ...i, current: once.addresses });
        assert.deepEqual(twice, once);
      }),
      { numRuns },
    );
  });

  test("unmanaged entries are kept untouched and in relative order (only exact duplicates go)", () => {
    fc.assert(
      fc.property(input, (i) => {
        const unmanaged = (list: NodeAddress[]) => list.filter((a) => !isManaged(a.type, i.detected));
        const firstOccurrences = unmanaged(i.current).filter(
          (a, index, all) => all.findIndex((b) => key(b) === key(a)) === index,
        );
        assert.deepEqual(unmanaged(run(i).addresses), firstOccurrences);
      }),
      { numRuns },
    );
  });

  test("managed types hold the detection: provided IPs first among InternalIPs, ExternalIPs in flag order", () => {
    fc.assert(
      fc.property(input, (i) => {
        const { addresses } = run(i);
        const unique = (ips: string[]) => [...new Set(ips.map(canonical))];
        const internal = ipsOf(addresses, "InternalIP");
        if (i.detected.internal) assert.deepEqual(internal, unique([...i.provided, ...i.detected.internal]));
        const internalSet = new Set(internal.map(canonical));
        if (i.detected.external)
          assert.deepEqual(
            ipsOf(addresses, "ExternalIP"),
            unique(i.detected.external).filter((a) => !internalSet.has(a)),
          );
      }),
      { numRuns },
    );
  });

  test("a written ExternalIP never equals an InternalIP", () => {
    fc.assert(
      fc.property(input, (i) => {
        fc.pre(i.detected.external !== undefined);
        const { addresses } = run(i);
        const internal = new Set(ipsOf(addresses, "InternalIP").map(canonical));
        for (const address of ipsOf(addresses, "ExternalIP"))
          assert.ok(!internal.has(canonical(address)), address);
      }),
      { numRuns },
    );
  });

  test("no duplicates, and each managed type's entries are contiguous", () => {
    fc.assert(
      fc.property(input, (i) => {
        const { addresses } = run(i);
        const keys = addresses.map(key);
        assert.equal(new Set(keys).size, keys.length, keys.join(", "));
        for (const type of ["InternalIP", "ExternalIP"]) {
          if (!isManaged(type, i.detected)) continue;
          const first = addresses.findIndex((a) => a.type === type);
          const count = addresses.filter((a) => a.type === type).length;
          assert.ok(addresses.slice(first, first + count).every((a) => a.type === type));
        }
      }),
      { numRuns },
    );
  });
});
