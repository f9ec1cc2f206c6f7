// Pure selection and summary with plain data, and detectAddresses against a fake kernel adapter.
// The same rules against a real kernel: detect.kernel.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Netlink } from "../net/netlink.ts";
import type { HostAddress } from "../net/rtnetlink.ts";
import {
  type DetectionMethod,
  detectAddresses,
  selectByCidr,
  selectByInterface,
  summarize,
} from "./detect.ts";

type Flag = keyof HostAddress["flags"];

/** "198.18.0.2/24 eth0" plus flags → a HostAddress; interface index follows the name. */
function addr(spec: string, ...flags: Flag[]): HostAddress {
  const [cidr = "", interfaceName = "eth0"] = spec.split(" ");
  const [address = "", prefix = ""] = cidr.split("/");
  const family = address.includes(":") ? 6 : 4;
  const set = (flag: Flag) => flags.includes(flag);
  return {
    address,
    prefixLength: Number(prefix),
    family,
    interfaceName,
    interfaceIndex: { lo: 1, eth0: 2, eth1: 3 }[interfaceName] ?? 9,
    scope: interfaceName === "lo" ? "host" : address.startsWith("fe80") ? "link" : "global",
    flags: {
      secondary: set("secondary"),
      tentative: set("tentative"),
      deprecated: set("deprecated"),
      dadFailed: set("dadFailed"),
    },
  };
}

// A host as the kernel lists it: IPv4 first, loopback first.
const host: HostAddress[] = [
  addr("127.0.0.1/8 lo"),
  addr("198.18.0.2/24 eth0"),
  addr("198.18.0.100/32 eth0"), // keepalived/kube-vip style VIP
  addr("198.18.0.3/24 eth0", "secondary"),
  addr("169.254.7.7/16 eth0"),
  addr("198.19.0.2/24 eth1"),
  addr("::1/128 lo"),
  addr("fd00:198:18::100/128 eth0"), // IPv6 VIP
  addr("fd00:198:18::5/64 eth0", "deprecated"), // IPv6 VIPs are often added with preferred_lft 0
  addr("fd00:198:18::6/64 eth0", "tentative"),
  addr("fd00:198:18::7/64 eth0", "tentative", "dadFailed"),
  addr("fd00:198:18::2/64 eth0"),
  addr("fe80::1/64 eth0"),
  addr("fd00:198:18:1::2/64 eth1"),
  addr("fe80::2/64 eth1"),
];

describe("selectByInterface", () => {
  test("takes the interface's usable addresses, IPv4 first, kernel order within a family", () => {
    assert.deepEqual(selectByInterface(host, "eth0"), ["198.18.0.2", "fd00:198:18::2"]);
    assert.deepEqual(selectByInterface(host, "eth1"), ["198.19.0.2", "fd00:198:18:1::2"]);
    const v6First = [addr("fd00:198:18::2/64 eth0"), addr("198.18.0.9/24 eth0"), addr("198.18.0.2/24 eth0")];
    assert.deepEqual(selectByInterface(v6First, "eth0"), ["198.18.0.9", "198.18.0.2", "fd00:198:18::2"]);
  });

  test("never loopback, link-local, tentative, DAD-failed, deprecated, secondary or a VIP", () => {
    assert.deepEqual(selectByInterface(host, "lo"), []);
    assert.deepEqual(selectByInterface([addr("fe80::1/64"), addr("169.254.1.1/16")], "eth0"), []);
    assert.deepEqual(selectByInterface([addr("fd00:198:18::6/64", "tentative")], "eth0"), []);
    assert.deepEqual(selectByInterface([addr("fd00:198:18::6/64", "deprecated")], "eth0"), []);
    assert.deepEqual(selectByInterface([addr("198.18.0.3/24", "secondary")], "eth0"), []);
    assert.deepEqual(selectByInterface([addr("fd00:198:18::6/64", "dadFailed")], "eth0"), []);
  });

  test("a host-prefix address is a VIP only beside a regular address of its family on the same interface", () => {
    // L3 designs put the node's own /32 or /128 on lo or alone on an interface: that is the node address.
    const routed = [
      addr("127.0.0.1/8 lo"),
      addr("198.18.5.5/32 lo"),
      addr("::1/128 lo"),
      addr("fd00:198:18::5/128 lo"),
    ];
    assert.deepEqual(selectByInterface(routed, "lo"), ["198.18.5.5", "fd00:198:18::5"]);
    const alone = [addr("198.18.0.100/32 eth0"), addr("fe80::1/64 eth0"), addr("198.19.0.2/24 eth1")];
    assert.deepEqual(selectByInterface(alone, "eth0"), ["198.18.0.100"]);
    const otherFamily = [addr("198.18.0.2/24 eth0"), addr("fd00:198:18::100/128 eth0")];
    assert.deepEqual(selectByInterface(otherFamily, "eth0"), ["198.18.0.2", "fd00:198:18::100"]);
  });

  test("an unknown interface yields nothing; the same address twice appears once", () => {
    assert.deepEqual(selectByInterface(host, "eth9"), []);
    assert.deepEqual(selectByInterface([addr("198.18.0.2/24"), addr("198.18.0.2/24")], "eth0"), [
      "198.18.0.2",
    ]);
  });
});

describe("selectByCidr", () => {
  test("takes the usable addresses inside the CIDR in listing order, any interface", () => {
    assert.deepEqual(selectByCidr(host, "198.18.0.0/15"), ["198.18.0.2", "198.19.0.2"]);
    assert.deepEqual(selectByCidr(host, "fd00:198:18::/48"), ["fd00:198:18::2", "fd00:198:18:1::2"]);
    assert.deepEqual(selectByCidr(host, "198.19.0.0/24"), ["198.19.0.2"]);
    assert.deepEqual(selectByCidr(host, "198.20.0.0/16"), []);
  });

  test("broad CIDRs never ask for loopback, link-local, VIPs, secondary or deprecated addresses", () => {
    assert.deepEqual(selectByCidr(host, "0.0.0.0/0"), ["198.18.0.2", "198.19.0.2"]);
    assert.deepEqual(selectByCidr(host, "::/0"), ["fd00:198:18::2", "fd00:198:18:1::2"]);
    assert.deepEqual(selectByCidr(host, "198.18.0.0/24"), ["198.18.0.2"]);
  });

  test("a CIDR inside the special range asks for loopback or link-local", () => {
    assert.deepEqual(selectByCidr(host, "127.0.0.0/8"), ["127.0.0.1"]);
    assert.deepEqual(selectByCidr(host, "::1/128"), ["::1"]);
    assert.deepEqual(selectByCidr(host, "169.254.0.0/16"), ["169.254.7.7"]);
    assert.deepEqual(selectByCidr(host, "fe80::/10"), ["fe80::1", "fe80::2"]);
    assert.deepEqual(selectByCidr(host, "fe80::2/128"), ["fe80::2"]);
    assert.deepEqual(selectByCidr(host, "fe80::/9"), [], "wider than link-local: does not ask for it");
  });

  test("a VIP, secondary or deprecated address is taken only by naming it (/32 or /128)", () => {
    assert.deepEqual(selectByCidr(host, "198.18.0.100/32"), ["198.18.0.100"]);
    assert.deepEqual(selectByCidr(host, "198.18.0.96/28"), []);
    assert.deepEqual(selectByCidr(host, "198.18.0.3/32"), ["198.18.0.3"]);
    assert.deepEqual(selectByCidr(host, "fd00:198:18::100/128"), ["fd00:198:18::100"]);
    assert.deepEqual(selectByCidr(host, "fd00:198:18::5/128"), ["fd00:198:18::5"]);
  });

  test("tentative and DAD-failed addresses are never taken, even when named", () => {
    assert.deepEqual(selectByCidr(host, "fd00:198:18::6/128"), []);
    assert.deepEqual(selectByCidr(host, "fd00:198:18::7/128"), []);
  });

  test("an address on two interfaces appears once", () => {
    assert.deepEqual(
      selectByCidr([addr("198.18.0.2/24 eth0"), addr("198.18.0.2/24 eth1")], "198.18.0.0/24"),
      ["198.18.0.2"],
    );
  });
});

describe("selection properties", () => {
  const arbitraryAddress = fc
    .record({
      v4: fc.boolean(),
      last: fc.integer({ min: 1, max: 4 }),
      special: fc.constantFrom("", "loopback", "linkLocal"),
      prefix: fc.constantFrom("host", "subnet"),
      interfaceName: fc.constantFrom("lo", "eth0", "eth1"),
      flags: fc.subarray<Flag>(["secondary", "tentative", "deprecated", "dadFailed"]),
    })
    .map(({ v4, last, special, prefix, interfaceName, flags }) => {
      const base = v4
        ? { "": "198.18.0.", loopback: "127.0.0.", linkLocal: "169.254.0." }[special]
        : { "": "fd00:198:18::", loopback: "::", linkLocal: "fe80::" }[special];
      const length = prefix === "host" ? (v4 ? 32 : 128) : v4 ? 24 : 64;
      return addr(`${base}${special === "loopback" && !v4 ? 1 : last}/${length} ${interfaceName}`, ...flags);
    });

  test("interface selection: only that interface, only usable addresses, no duplicates, IPv4 first", () => {
    fc.assert(
      fc.property(
        fc.array(arbitraryAddress, { maxLength: 12 }),
        fc.constantFrom("lo", "eth0", "eth1"),
        (list, name) => {
          const selected = selectByInterface(list, name);
          assert.equal(new Set(selected).size, selected.length);
          for (const ip of selected) {
            const entries = list.filter((entry) => entry.address === ip && entry.interfaceName === name);
            assert.ok(entries.some((entry) => !Object.values(entry.flags).some(Boolean)));
            assert.doesNotMatch(ip, /^(127\.|169\.254\.|fe80:|::1$)/);
          }
          const families = selected.map((ip) => (ip.includes(":") ? 6 : 4));
          assert.deepEqual(families, [...families].sort());
        },
      ),
    );
  });

  test("CIDR selection: the widest CIDR takes exactly the usable addresses of its family; a named tentative address is never taken", () => {
    fc.assert(
      fc.property(fc.array(arbitraryAddress, { maxLength: 12 }), (list) => {
        for (const cidr of ["0.0.0.0/0", "::/0"]) {
          const family = cidr.includes(":") ? 6 : 4;
          const usable = ["lo", "eth0", "eth1"].flatMap((name) => selectByInterface(list, name));
          const selected = selectByCidr(list, cidr);
          assert.equal(new Set(selected).size, selected.length);
          assert.deepEqual(
            new Set(selected),
            new Set(usable.filter((ip) => (ip.includes(":") ? 6 : 4) === family)),
          );
        }
        for (const entry of list.filter((e) => e.flags.tentative || e.flags.dadFailed)) {
          const named = selectByCidr(list, `${entry.address}/${entry.family === 4 ? 32 : 128}`);
          const others = list.filter(
            (e) => e.address === entry.address && !e.flags.tentative && !e.flags.dadFailed,
          );
          if (others.length === 0) assert.deepEqual(named, []);
        }
      }),
    );
  });
});

describe("summarize", () => {
  test("targets: one address each in flag order, duplicates removed, each routeless target a NoRoute problem", () => {
    const method: DetectionMethod = {
      kind: "target",
      targets: ["198.19.0.1", "198.19.1.1", "198.19.2.1", "198.19.3.1"],
    };
    assert.deepEqual(summarize("ExternalIP", method, [["198.18.1.2"], [], ["198.18.0.2"], ["198.18.1.2"]]), {
      addresses: ["198.18.1.2", "198.18.0.2"],
      problems: [{ type: "ExternalIP", reason: "NoRoute", message: "no route to 198.19.1.1" }],
    });
  });

  test("nothing found at all: undefined addresses (keep the current ones) and a problem per item", () => {
    const method: DetectionMethod = { kind: "target", targets: ["198.19.0.1", "fd00:198:18:ff::1"] };
    assert.deepEqual(summarize("InternalIP", method, [[], []]), {
      addresses: undefined,
      problems: [
        { type: "InternalIP", reason: "NoRoute", message: "no route to 198.19.0.1" },
        { type: "InternalIP", reason: "NoRoute", message: "no route to fd00:198:18:ff::1" },
      ],
    });
  });

  test("CIDRs and interfaces: NoAddress per empty item; addresses of all items in order", () => {
    const cidrs: DetectionMethod = {
      kind: "cidr",
      cidrs: ["198.18.0.0/24", "fd00:198:18::/64", "198.20.0.0/16"],
    };
    assert.deepEqual(
      summarize("InternalIP", cidrs, [["198.18.0.2"], ["fd00:198:18::2", "fd00:198:18::3"], []]),
      {
        addresses: ["198.18.0.2", "fd00:198:18::2", "fd00:198:18::3"],
        problems: [
          { type: "InternalIP", reason: "NoAddress", message: "no usable address in 198.20.0.0/16" },
        ],
      },
    );
    const interfaces: DetectionMethod = { kind: "interface", interfaces: ["eth9"] };
    assert.deepEqual(summarize("ExternalIP", interfaces, [[]]), {
      addresses: undefined,
      problems: [{ type: "ExternalIP", reason: "NoAddress", message: "no usable address on interface eth9" }],
    });
  });
});

describe("detectAddresses", () => {
  /** A kernel adapter over plain data; route answers arrive in reverse order to prove order is kept. */
  function fakeNetlink(routes: Record<string, string>, addresses: HostAddress[]) {
    const calls = { routeSource: 0, listAddresses: 0 };
    const netlink: Netlink = {
      async routeSource(target) {
        calls.routeSource++;
        await new Promise((resolve) => setTimeout(resolve, 20 - calls.routeSource));
        return routes[target];
      },
      async listAddresses() {
        calls.listAddresses++;
        return addresses;
      },
      listLinks: async () => [],
      listDefaultGateways: async () => [],
      watchChanges: () => ({ close() {} }),
      close() {},
    };
    return { netlink, calls };
  }

  test("targets only: route sources in flag order, no address listing", async () => {
    const { netlink, calls } = fakeNetlink(
      { "198.19.0.1": "198.18.0.2", "fd00:198:18:ff::1": "fd00:198:18::2" },
      host,
    );
    const detection = await detectAddresses(netlink, {
      external: { kind: "target", targets: ["198.19.0.1", "fd00:198:18:ff::1", "198.19.9.9"] },
    });
    assert.deepEqual(detection, {
      external: ["198.18.0.2", "fd00:198:18::2"],
      internal: undefined,
      problems: [{ type: "ExternalIP", reason: "NoRoute", message: "no route to 198.19.9.9" }],
    });
    assert.deepEqual(calls, { routeSource: 3, listAddresses: 0 });
  });

  test("both types: one address listing shared by CIDR and interface methods", async () => {
    const { netlink, calls } = fakeNetlink({}, host);
    const detection = await detectAddresses(netlink, {
      external: { kind: "interface", interfaces: ["eth1"] },
      internal: { kind: "cidr", cidrs: ["198.18.0.0/24", "fd00:198:18::/64"] },
    });
    assert.deepEqual(detection, {
      external: ["198.19.0.2", "fd00:198:18:1::2"],
      internal: ["198.18.0.2", "fd00:198:18::2"],
      problems: [],
    });
    assert.equal(calls.listAddresses, 1);
  });

  test("nothing configured: nothing detected, nothing asked", async () => {
    const { netlink, calls } = fakeNetlink({}, host);
    assert.deepEqual(await detectAddresses(netlink, {}), {
      external: undefined,
      internal: undefined,
      problems: [],
    });
    assert.deepEqual(calls, { routeSource: 0, listAddresses: 0 });
  });

  test("problems of both types are reported, ExternalIP first", async () => {
    const { netlink } = fakeNetlink({}, host);
    const detection = await detectAddresses(netlink, {
      external: { kind: "target", targets: ["198.19.0.1"] },
      internal: { kind: "interface", interfaces: ["lo"] },
    });
    assert.deepEqual(detection, {
      external: undefined,
      internal: undefined,
      problems: [
        { type: "ExternalIP", reason: "NoRoute", message: "no route to 198.19.0.1" },
        { type: "InternalIP", reason: "NoAddress", message: "no usable address on interface lo" },
      ],
    });
  });
});
