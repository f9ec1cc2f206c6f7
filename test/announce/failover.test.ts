// Two agents on one bridge (world.ts), the test in the pool controller's place: the Service is node A's, and the
// test moves it to B only as the controller may (announcement.ts): once A's Lease has expired by leaseExpiry() on
// the test's own clock, or once A's Lease acknowledges the removal (hasApplied()). The faults: A loses the API (its
// link stays up); A's Service watch is black-holed while its renewals go on, its events then delivered late (a
// lagging watch) or lost with the connection (a watch that died silently); A's process is stopped (SIGSTOP) and
// resumed after B took over. Meanwhile the client keeps asking for the addresses, and a capture on its link
// (test/netns/announce-fixture.ts, our own packet socket) records who answers: A's last frame comes before B's first,
// so the two never answer at once, over ARP and NDP. B probes each address before it first announces it
// (conflicts.ts): the time from its assignment to its first answer shows what that adds.
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, type TestContext, test } from "node:test";
import { PROBE_DECIDED_MS } from "../../src/agent/announcer/arp-ndp/conflicts.ts";
import {
  APPLIED_ANNOTATION,
  hasApplied,
  LEASE_DURATION_SECONDS,
  leaseExpiry,
  SEGMENTS_ANNOTATION,
} from "../../src/pools/announcement.ts";
import { sleep } from "../../src/time/backoff.ts";
import { waitFor } from "../../localcluster/wait.ts";
import {
  type AgentNode,
  type AnnounceWorld,
  BUDGET_MS,
  claims,
  type Frame,
  startAnnounceWorld,
  SUBNET,
} from "./world.ts";

const ADDRESSES = [`${SUBNET.v4}.56`, `${SUBNET.v6}:56`];
const WAIT_MS = 60_000;
/** How often the test, as the controller, reads the Lease: its observation is at most this late. */
const POLL_MS = 100;

describe("failover between two agents: the old announcer is silent before the new one speaks", () => {
  let world: AnnounceWorld;
  let a: AgentNode;
  let b: AgentNode;
  let frames: Frame[] = [];

  before(async () => {
    world = await startAnnounceWorld(78);
    a = await world.addNode("node-a", 0);
    b = await world.addNode("node-b", 1);
    frames = (await world.capture()).frames;
  });

  after(async () => {
    await world?.stop();
  });

  const everyAddress = (node: AgentNode, addresses = ADDRESSES) => async () => {
    for (const address of addresses) if ((await world.resolve(address)) !== node.mac) return false;
    return true;
  };

  /** The client asks for `addresses` afresh, round after round, while `body` runs. */
  const asking = async <T>(addresses: string[], body: () => Promise<T>): Promise<T> => {
    let on = true;
    const questions = (async () => {
      while (on) for (const address of addresses) await world.resolve(address);
    })();
    try {
      return await body();
    } finally {
      on = false;
      await questions;
    }
  };

  /** As the controller: returns once A's Lease has expired by leaseExpiry() of when its last change was seen. */
  const leaseExpired = async (node: AgentNode) => {
    let [seen, observedAt] = [(await node.readLease())?.spec?.renewTime, performance.now()];
    while (performance.now() < leaseExpiry(observedAt, LEASE_DURATION_SECONDS)) {
      await sleep(POLL_MS);
      const renewTime = (await node.readLease())?.spec?.renewTime;
      if (renewTime !== seen) [seen, observedAt] = [renewTime, performance.now()];
    }
  };

  /** Every address: heard from both nodes, A's last claim before B's first. */
  const assertHandedOver = (addresses: string[], from: AgentNode, to: AgentNode) => {
    for (const address of addresses) {
      const heard = (node: AgentNode) =>
        frames.flatMap((frame, index) => (claims(frame, address) && frame.from === node.mac ? [index] : []));
      const [fromA, fromB] = [heard(from), heard(to)];
      assert.ok(fromA.length > 0 && fromB.length > 0, `${address}: both nodes were heard`);
      assert.ok(Math.max(...fromA) < Math.min(...fromB), `${address}: A's last frame before B's first`);
    }
  };

  /** B's first frame for each address: after its probes found nobody, within the failover bound (loaded CI: 3x). */
  const assertProbedFirst = (t: TestContext, addresses: string[], to: AgentNode, assignedAt: number, cutAt: number) => {
    for (const address of addresses) {
      const first = frames.find((frame) => claims(frame, address) && frame.from === to.mac);
      const firstAt = first?.at ?? Infinity;
      const [sinceAssigned, sinceCut] = [Math.round(firstAt - assignedAt), Math.round(firstAt - cutAt)];
      t.diagnostic(`${address}: B's first frame ${sinceAssigned} ms after its assignment, ${sinceCut} ms after A's cut`);
      assert.ok(first, `${address}: B never claimed it`);
      assert.ok(sinceAssigned >= PROBE_DECIDED_MS, `${address}: probed first (${sinceAssigned} ms)`);
      assert.ok(sinceAssigned < 3 * BUDGET_MS, `${address}: ${sinceAssigned} ms after its assignment`);
    }
  };

  const applied = async (node: AgentNode) => (await node.readLease())?.metadata?.annotations?.[APPLIED_ANNOTATION];

  test("A cut from the API, the Service moved to B once A's Lease expired: A's last answer first", async (t) => {
    await world.assign("web", a.name, ADDRESSES);
    await waitFor("A answering for both addresses", everyAddress(a), WAIT_MS);
    a.proxy.cut();
    const cutAt = performance.now();
    let assignedAt = NaN;
    await asking(ADDRESSES, async () => {
      await leaseExpired(a);
      assignedAt = performance.now();
      await world.assign("web", b.name, ADDRESSES);
      await waitFor("B answering for both addresses", everyAddress(b), WAIT_MS);
    });
    a.proxy.restore();
    assertHandedOver(ADDRESSES, a, b);
    assertProbedFirst(t, ADDRESSES, b, assignedAt, cutAt);
    // Past its deadline A held the IPv4 address on the client's answers, and gave it up at B's first claim.
    assert.match(a.logs(), /another MAC claims an address while this node's view may be stale: yielded/);
  });

  for (const [fault, address] of [
    ["its events delivered late (a lagging watch)", `${SUBNET.v4}.57`],
    ["the connection lost (a watch that died silently)", `${SUBNET.v4}.58`],
  ] as const)
    test(`A's Service watch black-holed, ${fault}: B only once A acknowledged the release`, async () => {
      const name = `held-${address.split(".").at(-1)}`;
      await waitFor("A's Lease renewed through the proxy", async () => hasApplied(await applied(a), "1"), WAIT_MS);
      await world.assign(name, a.name, [address]);
      await waitFor("A answering", everyAddress(a, [address]), WAIT_MS);
      // Each of its connections is frozen once quiet for 1.5 s (its watches, after their last event); its renewals,
      // every second, go on.
      for (const until = performance.now() + 3000; performance.now() < until; await sleep(100)) a.proxy.freezeIdle(1500);
      const released = await world.release(name);
      await asking([address], async () => {
        // A cannot know: it goes on answering, live, and its Lease does not say it applied the release.
        const renewed = (await a.readLease())?.spec?.renewTime;
        const until = performance.now() + 5000;
        while (performance.now() < until) {
          assert.ok(!hasApplied(await applied(a), released), "A acknowledged a release its watch never delivered");
          await sleep(POLL_MS);
        }
        assert.notEqual((await a.readLease())?.spec?.renewTime, renewed, "A's Lease kept being renewed");
        assert.equal(await world.resolve(address), a.mac, "A still answers: its watch is black-holed");
        if (fault.startsWith("its events")) a.proxy.thaw();
        else a.proxy.restore();
        const acknowledged = async () => hasApplied(await applied(a), released);
        await waitFor("A's Lease acknowledging the release", acknowledged, WAIT_MS);
        await world.assign(name, b.name, [address]);
        await waitFor("B answering", everyAddress(b, [address]), WAIT_MS);
      });
      assertHandedOver([address], a, b);
    });

  test("A's link to the segment loses its carrier: its Lease says so (renewed over another link), B takes over", async (t) => {
    const address = `${SUBNET.v4}.60`;
    const segment = `${SUBNET.v4}.0/24`;
    const segments = async () => (await a.readLease())?.metadata?.annotations?.[SEGMENTS_ANNOTATION]?.split(",") ?? [];
    await world.assign("linked", a.name, [address]);
    await waitFor("A answering", everyAddress(a, [address]), WAIT_MS);
    try {
      await asking([address], async () => {
        const downAt = performance.now();
        await a.segment.carrier(false);
        await waitFor("A's Lease without the segment", async () => !(await segments()).includes(segment), WAIT_MS);
        const droppedMs = Math.round(performance.now() - downAt);
        t.diagnostic(`A's Lease dropped the segment ${droppedMs} ms after the link went down`);
        // As the controller: A no longer has the segment, its Lease lives: released, and B once A acknowledged.
        const released = await world.release("linked");
        await waitFor("A acknowledging the release", async () => hasApplied(await applied(a), released), WAIT_MS);
        await world.assign("linked", b.name, [address]);
        await waitFor("B answering", everyAddress(b, [address]), WAIT_MS);
        await a.segment.carrier(true);
        await waitFor("A's Lease with the segment again", async () => (await segments()).includes(segment), WAIT_MS);
        for (let round = 0; round < 3; round++) assert.equal(await world.resolve(address), b.mac);
      });
    } finally {
      await a.segment.carrier(true);
    }
    assertHandedOver([address], a, b);
  });

  test("A stopped (SIGSTOP) and moved to B once its Lease expired; resumed, it never answers again", async () => {
    const address = `${SUBNET.v4}.59`;
    await world.assign("stopped", a.name, [address]);
    await waitFor("A answering", everyAddress(a, [address]), WAIT_MS);
    const renewedAfter = async (time: string | undefined) => (await a.readLease())?.spec?.renewTime !== time;
    await asking([address], async () => {
      a.signal("SIGSTOP");
      try {
        await leaseExpired(a);
        await world.assign("stopped", b.name, [address]);
        await waitFor("B answering", everyAddress(b, [address]), WAIT_MS);
      } finally {
        a.signal("SIGCONT");
      }
      // Resumed with requests queued on its sockets and its timers overdue: it renews, and still never answers.
      const before = (await a.readLease())?.spec?.renewTime;
      await waitFor("A renewing again", () => renewedAfter(before), WAIT_MS);
      for (let round = 0; round < 3; round++) assert.equal(await world.resolve(address), b.mac);
    });
    assertHandedOver([address], a, b);
  });
});
