// The kernel adapter against real kernels: each test builds namespaces (test/netns) and runs the
// adapter inside one through test/netns/detect-fixture.ts. Nothing routes to the root namespace.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { addressesIn, gatewaysIn, quietHost, routesIn, watchIn } from "../../test/netns/detect-client.ts";
import { networkPool, type Host, type Link, type Network } from "../../test/netns/netns.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { coalesce, openNetlink } from "./netlink.ts";

test("coalesce: one call per burst, delayMs after the burst's first trigger; cancel drops a pending call", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  let calls = 0;
  const changed = coalesce(() => calls++, 100);
  changed.trigger();
  t.mock.timers.tick(60);
  changed.trigger();
  t.mock.timers.tick(39);
  assert.equal(calls, 0);
  t.mock.timers.tick(1);
  assert.equal(calls, 1, "a trigger inside the window joins the burst instead of postponing it");
  t.mock.timers.tick(1000);
  assert.equal(calls, 1);
  changed.trigger();
  changed.cancel();
  t.mock.timers.tick(1000);
  assert.equal(calls, 1);
  changed.trigger();
  t.mock.timers.tick(100);
  assert.equal(calls, 2);
});

/** A host linked to a router namespace: 198.18.0.2/24 and fd00:198:18::2/64 on the host's end. */
async function hostBehindRouter(net: Network): Promise<{ host: Host; router: Host; link: Link }> {
  const [host, router] = [await quietHost(net), await net.host()];
  const link = await net.link(router, host, {
    addressesA: ["198.18.0.1/24", "fd00:198:18::1/64"],
    addressesB: ["198.18.0.2/24", "fd00:198:18::2/64"],
  });
  return { host, router, link };
}

test("listings asked at once all answer: the kernel's one dump per socket at a time is queued, not EBUSY", async () => {
  // This process's own namespace, read only: a listing sends nothing anywhere.
  const netlink = openNetlink();
  try {
    const listings = await Promise.all(Array.from({ length: 4 }, () => netlink.listAddresses()));
    assert.ok(listings[0]?.some((entry) => entry.address === "127.0.0.1"), "loopback listed");
    for (const listing of listings) assert.deepEqual(listing, listings[0]);
  } finally {
    netlink.close();
  }
});

describe("netlink adapter in network namespaces", () => {
  const pool = networkPool();
  const network = pool.create;
  after(pool.removeAll);

  test("route sources honour gateways, local targets and every no-route answer of both families", async () => {
    const { host } = await hostBehindRouter(await network());
    await host.ip("route", "add", "default", "via", "198.18.0.1");
    await host.ip("-6", "route", "add", "default", "via", "fd00:198:18::1");
    for (const [i, type] of ["unreachable", "prohibit", "blackhole", "throw"].entries()) {
      const n = i + 1; // subnet 0 of fd00:198:18::/48 is the link's
      await host.ip("route", "add", type, `198.19.${n}.0/24`);
      await host.ip("-6", "route", "add", type, `fd00:198:18:${n}::/64`);
    }
    const targets = ["198.19.9.1", "fd00:198:18:ff::1", "8.8.8.8", "198.18.0.2", "fd00:198:18::2"];
    const unroutable = [1, 2, 3, 4].flatMap((n) => [`198.19.${n}.1`, `fd00:198:18:${n}::1`]);
    assert.deepEqual(await routesIn(host, ...targets, ...unroutable), [
      "198.18.0.2",
      "fd00:198:18::2",
      "198.18.0.2", // a lookup only: nothing is sent
      "198.18.0.2",
      "fd00:198:18::2",
      ...unroutable.map(() => null),
    ]);
  });

  test("default gateways: each default route's next hop (multipath too, any table), not other routes'", async () => {
    const { host } = await hostBehindRouter(await network());
    assert.deepEqual(await gatewaysIn(host), [], "no default route yet");
    await host.ip("route", "add", "default", "via", "198.18.0.1");
    await host.ip("route", "add", "198.19.0.0/16", "via", "198.18.0.9");
    const multipath = ["nexthop", "via", "198.18.0.3", "nexthop", "via", "198.18.0.4"];
    await host.ip("route", "add", "default", "table", "100", ...multipath);
    await host.ip("-6", "route", "add", "default", "via", "fd00:198:18::1");
    await host.ip("route", "add", "unreachable", "default", "table", "101");
    const gateways = ["198.18.0.1", "198.18.0.3", "198.18.0.4", "fd00:198:18::1"];
    assert.deepEqual((await gatewaysIn(host)).sort(), gateways);
  });

  test("a namespace without routes has no source for any target", async () => {
    const host = await quietHost(await network());
    assert.deepEqual(await routesIn(host, "198.19.0.1", "fd00:198:18::1", "8.8.8.8"), [null, null, null]);
  });

  test("address listing: names, scopes, canonical text, IPv4 first, and the kernel's flags", async () => {
    const { host, router, link } = await hostBehindRouter(await network());
    const dev = link.nameB;
    await host.ip("address", "add", "198.18.0.3/24", "dev", dev); // same subnet: secondary
    await host.ip("address", "add", "198.18.0.100/32", "dev", dev);
    await host.ip("address", "add", "FD00:198:18:0::0:5/64", "dev", dev, "nodad", "preferred_lft", "0");
    // DAD on for this interface, with a minute between probes: a new address stays tentative…
    await host.exec("sysctl", ["-q", "-w", `net.ipv6.conf.${dev}.accept_dad=1`]);
    await host.exec("sysctl", ["-q", "-w", `net.ipv6.neigh.${dev}.retrans_time_ms=60000`]);
    await host.ip("address", "add", "fd00:198:18::6/64", "dev", dev);
    // …unless its owner answers the first probe: DAD fails.
    await router.ip("address", "add", "fd00:198:18::7/64", "dev", link.nameA, "nodad");
    await host.ip("address", "add", "fd00:198:18::7/64", "dev", dev);
    await waitFor(
      "DAD to fail",
      async () => /dadfailed/.test(await host.ip("-6", "address", "show", "dev", dev)),
      5000,
    );

    const listed = await addressesIn(host);
    const byAddress = new Map(listed.map((entry) => [entry.address, entry]));
    const flags = (secondary: boolean, tentative: boolean, deprecated: boolean, dadFailed: boolean) => ({
      secondary,
      tentative,
      deprecated,
      dadFailed,
    });
    const index = byAddress.get("198.18.0.2")?.interfaceIndex ?? -1;
    const expected = [
      ["198.18.0.2", 24, flags(false, false, false, false)],
      ["198.18.0.3", 24, flags(true, false, false, false)],
      ["198.18.0.100", 32, flags(false, false, false, false)],
      ["fd00:198:18::2", 64, flags(false, false, false, false)],
      ["fd00:198:18::5", 64, flags(false, false, true, false)],
      ["fd00:198:18::6", 64, flags(false, true, false, false)],
      ["fd00:198:18::7", 64, flags(false, true, false, true)],
    ] as const;
    for (const [address, prefixLength, expectedFlags] of expected) {
      assert.deepEqual(
        byAddress.get(address),
        {
          address,
          prefixLength,
          family: address.includes(":") ? 6 : 4,
          interfaceName: dev,
          interfaceIndex: index,
          scope: "global",
          flags: expectedFlags,
        },
        address,
      );
    }
    assert.equal(byAddress.get("127.0.0.1")?.scope, "host");
    assert.equal(byAddress.get("::1")?.interfaceName, "lo");
    assert.ok(listed.some((entry) => entry.scope === "link" && entry.address.startsWith("fe80::")));
    const families = listed.map((entry) => entry.family);
    assert.deepEqual(families, [...families].sort(), "IPv4 first");
  });

  test("watchChanges reports address additions and removals, route and rule changes", async () => {
    const net = await network();
    const { host, link } = await hostBehindRouter(net);
    await net.link(await net.host(), host, {
      addressesA: ["198.18.1.1/24"],
      addressesB: ["198.18.1.2/24"],
    });
    const watcher = await watchIn(host, 50, "198.19.0.1");
    try {
      await host.ip("address", "add", "198.18.0.50/24", "dev", link.nameB);
      const added = await watcher.until("198.18.0.50 added", (s) => s.addresses.includes("198.18.0.50"));
      await host.ip("address", "del", "198.18.0.50/24", "dev", link.nameB);
      await watcher.until(
        "198.18.0.50 removed",
        (s) => s.change > added.change && !s.addresses.includes("198.18.0.50"),
      );
      await host.ip("address", "add", "fd00:198:18::50/64", "dev", link.nameB, "nodad");
      await watcher.until("fd00:198:18::50 added", (s) => s.addresses.includes("fd00:198:18::50"));

      await host.ip("route", "add", "198.19.0.0/16", "via", "198.18.0.1");
      const routed = await watcher.until("a route to the target", (s) => s.source === "198.18.0.2");
      await host.ip("route", "add", "198.19.0.0/16", "via", "198.18.1.1", "table", "100");
      const tabled = await watcher.until("the table-100 route", (s) => s.change > routed.change);
      assert.equal(tabled.source, "198.18.0.2", "a route in an unused table changes nothing");
      await host.ip("rule", "add", "to", "198.19.0.0/16", "lookup", "100");
      await watcher.until("the rule moving the source", (s) => s.source === "198.18.1.2");
    } finally {
      await watcher.close();
    }
  });

  test("route sources, listings and change reports work as nobody without capabilities", async () => {
    const { host, link } = await hostBehindRouter(await network());
    await host.ip("route", "add", "198.19.0.0/16", "via", "198.18.0.1");
    const watcher = await watchIn(host, 50, "198.19.0.1", { unprivileged: true });
    try {
      await watcher.until(
        "the route source",
        (s) => s.source === "198.18.0.2" && s.addresses.includes("198.18.0.2"),
      );
      await host.ip("address", "add", "198.18.0.60/24", "dev", link.nameB);
      await watcher.until("198.18.0.60 added", (s) => s.addresses.includes("198.18.0.60"));
    } finally {
      await watcher.close();
    }
  });
});
