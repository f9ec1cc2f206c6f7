// The BGP method (src/agent/announcer/bgp/method.ts) against GoBGP (Debian's gobgpd) in a namespace: what the
// announcing loop hands over (desired.ts, from Services) reaches the router as host routes with our address as next
// hop, IPv4 and IPv6 over one session; a change goes out as UPDATEs (the session never resets); after stopping (with
// graceful restart negotiated) the router holds nothing of ours. That the withdrawals go out before the Cease is the
// pure test's (src/agent/announcer/bgp/method.test.ts): GoBGP drops a Cease'd peer's routes either way.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { waitForEqual } from "../../localcluster/wait.ts";
import { createLogger } from "../../src/cli/log.ts";
import { decideDesired } from "../../src/agent/announcer/desired.ts";
import type { Decision } from "../../src/agent/announcer/bgp/fsm.ts";
import { startBgpMethod } from "../../src/agent/announcer/bgp/method.ts";
import type { Family } from "../../src/net/ip.ts";
import { createNetwork, type Network } from "../netns/netns.ts";
import { type Router, startGracefulGobgp } from "./routers.ts";

const WAIT_MS = 60_000;
let net: Network | undefined;
after(() => net?.remove());

const service = (name: string, ips: string[]): Service => ({
  metadata: { namespace: "default", name },
  spec: { type: "LoadBalancer" },
  status: { loadBalancer: { ingress: ips.map((ip) => ({ ip })) } },
});

/** What the router learned, as prefix → next hop. */
async function learned(router: Router, family: Family): Promise<Record<string, string>> {
  const routes = [...(await router.routes(family)).values()].sort((a, b) => a.prefix.localeCompare(b.prefix));
  return Object.fromEntries(routes.map((route) => [route.prefix, route.nextHop]));
}

test("GoBGP learns the desired set as host routes, hears each change as UPDATEs, nothing once we stop", async () => {
  net = await createNetwork();
  const { router, session } = await startGracefulGobgp(net, 246);
  const decisions: Decision[] = [];
  const method = startBgpMethod({
    log: createLogger({ verbosity: 0, format: "text", write: () => {} }),
    peers: [
      {
        session: { ...session(false), onDecision: (decision) => decisions.push(decision) },
        nextHops: router.ours,
      },
    ],
  });
  try {
    const both = async () => ({ 4: await learned(router, 4), 6: await learned(router, 6) });
    method.apply(
      decideDesired(
        [service("web", ["198.51.100.7", "2001:db8:5::7"]), service("shared", ["198.51.100.7"])],
        () => undefined,
      ),
    );
    await waitForEqual(
      "GoBGP has the first set",
      both,
      { 4: { "198.51.100.7/32": router.ours[4] }, 6: { "2001:db8:5::7/128": router.ours[6] } },
      WAIT_MS,
    );
    const drops = await router.drops();
    method.apply(decideDesired([service("web", ["198.51.100.7", "198.51.100.8"])], () => undefined));
    await waitForEqual(
      "GoBGP has the changed set",
      both,
      { 4: { "198.51.100.7/32": router.ours[4], "198.51.100.8/32": router.ours[4] }, 6: {} },
      WAIT_MS,
    );
    assert.equal(await router.drops(), drops, "the change reset no session");
    assert.equal(decisions.filter((d) => d.rule === "established").length, 1, "one session throughout");
    await method.stop(false);
    await waitForEqual("GoBGP has nothing of ours", both, { 4: {}, 6: {} }, WAIT_MS);
  } finally {
    await method.stop(false);
    await router.stop();
  }
});
