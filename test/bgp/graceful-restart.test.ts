// Graceful restart (RFC 4724) end to end against GoBGP as the helper: our speaker, a process of its own, is killed
// (no NOTIFICATION, as in a crash or a rolling update) and started again with the R bit within the restart time.
// GoBGP keeps our routes the whole time (polled throughout), and after our End-of-RIB holds exactly the new table.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { type Route } from "../../src/agent/announcer/bgp/ribout.ts";
import { createNetwork, type Network } from "../netns/netns.ts";
import { startGracefulGobgp } from "./routers.ts";
import { startSpeaker } from "./speaker.ts";

let net: Network | undefined;
after(() => net?.remove());

test("GoBGP keeps our routes while the speaker restarts within the restart time, then holds the new table", async () => {
  net = await createNetwork();
  const { router, session } = await startGracefulGobgp(net, 242);
  try {
    const routes: Route[] = [
      { prefix: "198.51.100.1/32", nextHop: router.ours[4] },
      { prefix: "198.51.100.2/32", nextHop: router.ours[4] },
    ];
    const first = startSpeaker({ options: session(false), routes });
    await waitFor("the first speaker established", () => first.rules.includes("established"), 30_000);
    const prefixes = async () => [...(await router.routes(4)).keys()].sort();
    await waitForEqual("GoBGP has both routes", prefixes, ["198.51.100.1/32", "198.51.100.2/32"], 30_000);

    const exited = new Promise((resolve) => first.child.once("exit", resolve));
    first.child.kill("SIGKILL");
    await exited;
    // through the gap and the new session, the routes never leave GoBGP's table
    let polling = true;
    const missing: string[][] = [];
    const poll = (async () => {
      while (polling) {
        const seen = await prefixes();
        if (!seen.includes("198.51.100.1/32")) missing.push(seen);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 2000)); // the restart takes a while
    const second = startSpeaker({
      options: session(true),
      routes: [routes[0]!, { prefix: "198.51.100.3/32", nextHop: router.ours[4] }],
    });
    try {
      await waitFor("the restarted speaker established", () => second.rules.includes("established"), 30_000);
      // after End-of-RIB GoBGP drops the stale route we no longer announce and keeps the rest
      await waitForEqual("GoBGP has the new table", prefixes, ["198.51.100.1/32", "198.51.100.3/32"], 30_000);
    } finally {
      polling = false;
      await poll;
      second.child.kill("SIGKILL");
    }
    assert.deepEqual(missing, [], "a kept route was never missing");
  } finally {
    await router.stop();
  }
});
