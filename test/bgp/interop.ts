// The differential test our speaker passes against each real router (gobgp.test.ts, frr.test.ts): two sessions
// from the root namespace — eBGP over IPv4 and iBGP over IPv6, both carrying IPv4 and IPv6 unicast — announce
// generated route sets one after another (prefixes come and go, attributes change), and after each the router
// reports exactly the prefixes, next hops, communities, local-pref and AS path we meant, while neither side ever
// sees the session go down.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { type Decision } from "../../src/agent/announcer/bgp/fsm.ts";
import { canonicalCommunities, type Route } from "../../src/agent/announcer/bgp/ribout.ts";
import { type BgpSession, startSession } from "../../src/agent/announcer/bgp/session.ts";
import { type Family, ipFromBytes } from "../../src/net/ip.ts";
import { createNetwork, type Network } from "../netns/netns.ts";
import { type LearnedRoute, MY_ASN, ROUTER_ASN, type Router, type RouterOptions, sessionTo } from "./routers.ts";

const WAIT_MS = 60_000;

interface Peering {
  name: string;
  router: Router;
  session: BgpSession;
  ibgp: boolean;
  transport: Family;
  decisions: Decision[];
}

/** Routes the test announces: host and short prefixes from the documentation ranges, with attributes. */
const routeSpec = fc.record({
  family: fc.constantFrom<Family>(4, 6),
  host: fc.nat(63),
  length: fc.constantFrom(32, 28, 24),
  communities: fc.uniqueArray(
    fc.tuple(fc.integer({ min: 1, max: 65535 }), fc.nat(65535)).map(([a, b]) => `${a}:${b}`),
    { maxLength: 3 },
  ),
  localPref: fc.option(fc.integer({ min: 0, max: 1000 }), { nil: undefined }),
});
export const routeSets = fc.uniqueArray(routeSpec, {
  maxLength: 24,
  selector: (r) => `${r.family}/${r.host}/${r.length}`,
});

export type RouteSpec = typeof routeSpec extends fc.Arbitrary<infer T> ? T : never;

function prefixOfSpec(spec: RouteSpec): string {
  if (spec.family === 4) {
    const length = spec.length;
    const host = spec.host & ~((1 << (32 - length)) - 1) & 0xff;
    return `${ipFromBytes(Uint8Array.from([198, 51, 100, length === 24 ? 0 : host]))}/${length}`;
  }
  const length = spec.length + 96; // 128, 124, 120
  const bytes = new Uint8Array(16);
  bytes.set([0x20, 0x01, 0x0d, 0xb8, 0, 0x64]);
  bytes[15] = length === 120 ? 0 : spec.host & ~((1 << (128 - length)) - 1) & 0xff;
  return `${ipFromBytes(bytes)}/${length}`;
}

/** The routes for a peering: the same prefixes for every peer, each with our address towards that peer. */
function routesFor(specs: RouteSpec[], router: Router): Route[] {
  const seen = new Set<string>();
  const routes: Route[] = [];
  for (const spec of specs) {
    const prefix = prefixOfSpec(spec);
    if (seen.has(prefix)) continue; // two specs may name one prefix once masked
    seen.add(prefix);
    routes.push({
      prefix,
      nextHop: router.ours[spec.family],
      communities: spec.communities,
      ...(spec.localPref === undefined ? {} : { localPref: spec.localPref }),
    });
  }
  return routes;
}

/** What the router should report for our routes. */
function expected(routes: Route[], peering: Peering, family: Family): Record<string, LearnedRoute> {
  const view: Record<string, LearnedRoute> = {};
  for (const route of routes
    .filter((r) => r.prefix.includes(":") === (family === 6))
    .sort((a, b) => a.prefix.localeCompare(b.prefix)))
    view[route.prefix] = {
      prefix: route.prefix,
      nextHop: route.nextHop,
      communities: canonicalCommunities(route.communities ?? []),
      ...(peering.ibgp ? { localPref: route.localPref ?? 100 } : {}),
      asPath: peering.ibgp ? [] : [MY_ASN],
    };
  return view;
}

async function reported(peering: Peering, family: Family): Promise<Record<string, LearnedRoute>> {
  const routes = await peering.router.routes(family);
  return Object.fromEntries([...routes.entries()].sort(([a], [b]) => a.localeCompare(b)));
}

async function converged(peerings: Peering[], routes: (p: Peering) => Route[]): Promise<void> {
  for (const peering of peerings)
    for (const family of [4, 6] as const)
      await waitForEqual(
        `${peering.name}: IPv${family} routes`,
        () => reported(peering, family),
        expected(routes(peering), peering, family),
        WAIT_MS,
      );
}

const established = (peering: Peering) => peering.decisions.filter((d) => d.rule === "established").length;

/** The suite for one router implementation; `subnet` keeps its root-namespace links apart from other files'. */
export function interopSuite(start: (net: Network, options: RouterOptions) => Promise<Router>, subnet: number): void {
  let net: Network;
  const peerings: Peering[] = [];

  before(async () => {
    net = await createNetwork();
    const setups = [
      { name: "eBGP over IPv4", index: 0, asn: ROUTER_ASN, transport: 4 as Family },
      { name: "iBGP over IPv6", index: 1, asn: MY_ASN, transport: 6 as Family },
    ];
    for (const setup of setups) {
      const router = await start(net, {
        index: setup.index,
        subnet,
        asn: setup.asn,
        peerAsn: MY_ASN,
        transport: setup.transport,
      });
      const decisions: Decision[] = [];
      const session = startSession({
        ...sessionTo(router, setup.transport, { peerAsn: setup.asn }),
        onDecision: (decision) => decisions.push(decision),
      });
      peerings.push({
        name: `${router.kind} ${setup.name}`,
        router,
        session,
        ibgp: setup.asn === MY_ASN,
        transport: setup.transport,
        decisions,
      });
    }
  });

  after(async () => {
    for (const peering of peerings.splice(0)) {
      peering.session.stop();
      await peering.router.stop();
    }
    await net?.remove();
  });

  test("both sessions come up and the routers learn the initial table", async () => {
    for (const peering of peerings) {
      await waitFor(
        `${peering.name} established (decisions: ${JSON.stringify(peering.decisions.map((d) => [d.rule, d.reason]))})`,
        () => peering.session.state().phase === "established",
        WAIT_MS,
      );
      await waitFor(
        `${peering.name}: the router sees the session established`,
        async () => /^established$/i.test(await peering.router.sessionState()),
        WAIT_MS,
      );
    }
    const initial = (peering: Peering) =>
      routesFor(
        [
          { family: 4, host: 7, length: 32, communities: ["65001:100"], localPref: 200 },
          { family: 6, host: 7, length: 32, communities: [], localPref: undefined },
        ],
        peering.router,
      );
    for (const peering of peerings) peering.session.setRoutes(initial(peering));
    await converged(peerings, initial);
  });

  test("generated route sets, one after another: each router reports exactly what we meant, no session resets", async () => {
    const drops = await Promise.all(peerings.map((p) => p.router.drops()));
    await fc.assert(
      fc.asyncProperty(routeSets, async (specs) => {
        for (const peering of peerings) peering.session.setRoutes(routesFor(specs, peering.router));
        await converged(peerings, (peering) => routesFor(specs, peering.router));
      }),
      { numRuns: 5, endOnFailure: true },
    );
    // an attribute change alone, and a withdrawal of everything
    const changed: RouteSpec[] = [
      { family: 4, host: 9, length: 32, communities: ["65001:1"], localPref: 300 },
      { family: 6, host: 9, length: 32, communities: ["65001:2"], localPref: 50 },
    ];
    for (const step of [
      changed,
      changed.map((spec) => ({ ...spec, communities: ["65001:3", "65001:4"], localPref: 150 })),
      [],
    ]) {
      for (const peering of peerings) peering.session.setRoutes(routesFor(step, peering.router));
      await converged(peerings, (peering) => routesFor(step, peering.router));
    }
    for (const peering of peerings) {
      assert.equal(established(peering), 1, `${peering.name}: the session came up once`);
      assert.equal(peering.session.state().phase, "established", peering.name);
    }
    assert.deepEqual(
      await Promise.all(peerings.map((p) => p.router.drops())),
      drops,
      "the routers saw no session drop",
    );
  });
}
