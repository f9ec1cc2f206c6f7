// Detection against real kernels: each test builds hosts and routers in network namespaces and runs
// detectAddresses inside the host (test/netns/detect-fixture.ts). Routes only ever point at the test's
// own router namespaces, which have no route out; route lookups send nothing.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { detectIn, quietHost } from "../../test/netns/detect-client.ts";
import { type Host, type Network, networkPool } from "../../test/netns/netns.ts";

describe("node address detection in network namespaces", () => {
  const pool = networkPool();
  const network = pool.create;
  after(pool.removeAll);

  /** The host end of a link to a new router: 198.18.<n>.2/24 and fd00:198:18:<n>::2/64 (router: .1 / ::1). */
  async function uplink(net: Network, host: Host, n: number, families = [4, 6]): Promise<string> {
    const router = await net.host();
    const side = (end: number) => [
      ...(families.includes(4) ? [`198.18.${n}.${end}/24`] : []),
      ...(families.includes(6) ? [`fd00:198:18:${n}::${end}/64`] : []),
    ];
    const link = await net.link(router, host, { addressesA: side(1), addressesB: side(2) });
    return link.nameB;
  }

  const defaultRoutes = async (host: Host, n: number) => {
    await host.ip("route", "add", "default", "via", `198.18.${n}.1`);
    await host.ip("-6", "route", "add", "default", "via", `fd00:198:18:${n}::1`);
  };

  test("IPv4 and IPv6 targets: one source each, in the order given", async () => {
    const net = await network();
    const host = await quietHost(net);
    await uplink(net, host, 0);
    await defaultRoutes(host, 0);
    const targets = ["198.19.0.1", "fd00:198:18:ff::1"];
    assert.deepEqual(await detectIn(host, { external: { kind: "target", targets } }), {
      external: ["198.18.0.2", "fd00:198:18::2"],
      problems: [],
    });
    assert.deepEqual(await detectIn(host, { external: { kind: "target", targets: targets.toReversed() } }), {
      external: ["fd00:198:18::2", "198.18.0.2"],
      problems: [],
    });
  });

  test("an IPv6-only host: the IPv6 target is found, the IPv4 one is a NoRoute problem", async () => {
    const net = await network();
    const host = await quietHost(net);
    await uplink(net, host, 0, [6]);
    await host.ip("-6", "route", "add", "default", "via", "fd00:198:18::1");
    const detection = await detectIn(host, {
      external: { kind: "target", targets: ["8.8.8.8", "2001:4860:4860::8888"] },
    });
    assert.deepEqual(detection, {
      external: ["fd00:198:18::2"],
      problems: [{ type: "ExternalIP", reason: "NoRoute", message: "no route to 8.8.8.8" }],
    });
  });

  test("two NICs with different routes: each target gets the source of its own NIC", async () => {
    const net = await network();
    const host = await quietHost(net);
    await uplink(net, host, 1);
    await uplink(net, host, 2);
    await host.ip("route", "add", "198.19.1.0/24", "via", "198.18.1.1");
    await host.ip("route", "add", "198.19.2.0/24", "via", "198.18.2.1");
    await host.ip("-6", "route", "add", "fd00:198:18:f2::/64", "via", "fd00:198:18:2::1");
    assert.deepEqual(
      await detectIn(host, {
        external: { kind: "target", targets: ["198.19.2.1", "fd00:198:18:f2::1"] },
        internal: { kind: "target", targets: ["198.19.1.1"] },
      }),
      { external: ["198.18.2.2", "fd00:198:18:2::2"], internal: ["198.18.1.2"], problems: [] },
    );
  });

  test("policy routing: a rule towards another table moves the source; a prohibit rule removes the route", async () => {
    const net = await network();
    const host = await quietHost(net);
    await uplink(net, host, 1);
    await uplink(net, host, 2);
    await defaultRoutes(host, 1);
    await host.ip("route", "add", "default", "via", "198.18.2.1", "table", "100");
    const config = { external: { kind: "target", targets: ["198.19.5.1", "198.19.6.1"] } } as const;
    assert.deepEqual((await detectIn(host, config)).external, ["198.18.1.2"]);

    await host.ip("rule", "add", "to", "198.19.5.0/24", "lookup", "100");
    await host.ip("rule", "add", "to", "198.19.6.0/24", "prohibit");
    assert.deepEqual(await detectIn(host, config), {
      external: ["198.18.2.2"],
      problems: [{ type: "ExternalIP", reason: "NoRoute", message: "no route to 198.19.6.1" }],
    });
  });

  test("no default route: the targets are NoRoute problems and the type stays undefined", async () => {
    const net = await network();
    const host = await quietHost(net);
    const nic = await uplink(net, host, 0);
    const detection = await detectIn(host, {
      external: { kind: "target", targets: ["8.8.8.8", "198.19.0.1"] },
      internal: { kind: "interface", interfaces: [nic] },
    });
    assert.deepEqual(detection, {
      internal: ["198.18.0.2", "fd00:198:18::2"],
      problems: [
        { type: "ExternalIP", reason: "NoRoute", message: "no route to 8.8.8.8" },
        { type: "ExternalIP", reason: "NoRoute", message: "no route to 198.19.0.1" },
      ],
    });
  });

  test("VIPs on the main interface: targets and interfaces skip them, only a CIDR naming them picks them", async () => {
    const net = await network();
    const host = await quietHost(net);
    const nic = await uplink(net, host, 0);
    await defaultRoutes(host, 0);
    await host.ip("address", "add", "198.18.0.100/32", "dev", nic);
    // IPv6 VIPs go in deprecated (keepalived's default): RFC 6724 source selection would prefer a plain
    // /128 to the /64 for many destinations, so only a deprecated VIP is safe with the target method.
    await host.ip("address", "add", "fd00:198:18::100/128", "dev", nic, "nodad", "preferred_lft", "0");
    const targets = { kind: "target", targets: ["198.19.0.1", "fd00:198:18:ff::1"] } as const;
    assert.deepEqual(await detectIn(host, { external: targets }), {
      external: ["198.18.0.2", "fd00:198:18::2"],
      problems: [],
    });

    await host.ip("address", "add", "fd00:198:18::101/128", "dev", nic, "nodad");
    assert.deepEqual(
      await detectIn(host, {
        external: { kind: "interface", interfaces: [nic] },
        internal: { kind: "cidr", cidrs: ["198.18.0.0/24", "fd00:198:18::/64"] },
      }),
      {
        external: ["198.18.0.2", "fd00:198:18::2"],
        internal: ["198.18.0.2", "fd00:198:18::2"],
        problems: [],
      },
    );
    const named = ["198.18.0.100/32", "fd00:198:18::100/128", "fd00:198:18::101/128"];
    assert.deepEqual(await detectIn(host, { internal: { kind: "cidr", cidrs: named } }), {
      internal: ["198.18.0.100", "fd00:198:18::100", "fd00:198:18::101"],
      problems: [],
    });
  });

  test("link-local and tentative addresses are never picked unless a link-local CIDR asks", async () => {
    const net = await network();
    const host = await quietHost(net);
    const router = await net.host();
    const { nameB: nic } = await net.link(router, host, { addressesB: ["169.254.1.2/16", "fe80::1234/64"] });
    // DAD with a minute between probes keeps a new global address tentative for the whole test.
    await host.exec("sysctl", ["-q", "-w", `net.ipv6.conf.${nic}.accept_dad=1`]);
    await host.exec("sysctl", ["-q", "-w", `net.ipv6.neigh.${nic}.retrans_time_ms=60000`]);
    await host.ip("address", "add", "fd00:198:18::6/64", "dev", nic);
    assert.match(
      await host.ip("-6", "address", "show", "dev", nic),
      /fd00:198:18::6\/64 scope global tentative/,
    );

    const detection = await detectIn(host, {
      external: { kind: "interface", interfaces: [nic] },
      internal: { kind: "cidr", cidrs: ["fd00:198:18::/64", "0.0.0.0/0", "::/0"] },
    });
    assert.deepEqual(detection, {
      problems: [
        { type: "ExternalIP", reason: "NoAddress", message: `no usable address on interface ${nic}` },
        { type: "InternalIP", reason: "NoAddress", message: "no usable address in fd00:198:18::/64" },
        { type: "InternalIP", reason: "NoAddress", message: "no usable address in 0.0.0.0/0" },
        { type: "InternalIP", reason: "NoAddress", message: "no usable address in ::/0" },
      ],
    });
    const linkLocal = await detectIn(host, {
      internal: { kind: "cidr", cidrs: ["169.254.0.0/16", "fe80::1234/128"] },
    });
    assert.deepEqual(linkLocal, { internal: ["169.254.1.2", "fe80::1234"], problems: [] });
  });

  test("CIDR and interface methods across two NICs keep the order of the flags", async () => {
    const net = await network();
    const host = await quietHost(net);
    const first = await uplink(net, host, 1);
    const second = await uplink(net, host, 2);
    assert.deepEqual(
      await detectIn(host, {
        external: { kind: "interface", interfaces: [second, first] },
        internal: { kind: "cidr", cidrs: ["fd00:198:18:1::/64", "198.18.0.0/15"] },
      }),
      {
        external: ["198.18.2.2", "fd00:198:18:2::2", "198.18.1.2", "fd00:198:18:1::2"],
        internal: ["fd00:198:18:1::2", "198.18.1.2", "198.18.2.2"],
        problems: [],
      },
    );
  });
});
