// The election whole, without a cluster: a real kube-apiserver, the address pool controller (in this process, with
// its own RBAC, as test/pools runs it), and two agents on one bridge with a client (world.ts). The pool hands a
// Service an address on the bridge, the controller names an announcer, the client resolves it afresh every second.
// The Service is dual-stack: an IPv4 address (ARP) and an IPv6 one (NDP), held and moved by one rule.
// - kube-apiserver stopped (SIGSTOP) for 60 s: every one of those resolutions is answered, by the same node, and
//   nothing moves after it is back (the agents hold on their peers' answers, the controller's Lease guard pauses);
// - the announcer cut off from the API and from its peers (its port on the bridge taken out): it withdraws, the
//   controller moves the addresses within the failover budget, and back on the link (the API still out of reach)
//   its fresh probes are answered by the new announcer: it never answers again.
// A capture on the client's link counts the requests (ARP requests, Neighbor Solicitations) answered by two MACs:
// none.
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, test } from "node:test";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION, LEASE_DURATION_SECONDS } from "../../src/pools/announcement.ts";
import { sleep } from "../../src/time/backoff.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { RunningController } from "../pools/world.ts";
import { watchAnnouncer } from "./announcer-watch.ts";
import { startElection } from "./election-world.ts";
import { type AgentNode, type AnnounceWorld, BUDGET_MS, claims, type Frame, startAnnounceWorld, SUBNET } from "./world.ts";

const WAIT_MS = 60_000;
const OUTAGE_MS = 60_000;

describe("the election with its controller: an API outage moves nothing; a node cut off is replaced", () => {
  let world: AnnounceWorld;
  let nodes: AgentNode[];
  let running: RunningController;
  let frames: Frame[] = [];
  const addresses = [`${SUBNET.v4}.70`, `${SUBNET.v6}:70`];

  before(async () => {
    world = await startAnnounceWorld(79);
    ({ nodes, running } = await startElection(world, addresses));
    frames = (await world.capture()).frames;
    await world.services.create({
      metadata: { name: "web" },
      spec: {
        type: "LoadBalancer",
        loadBalancerClass: L2_CLASS,
        ipFamilyPolicy: "RequireDualStack",
        ipFamilies: ["IPv4", "IPv6"],
        ports: [{ port: 80, protocol: "TCP" }],
      },
    });
  });

  after(async () => {
    await running?.stop();
    await world?.stop();
  });

  const announcer = async () => (await world.services.get("web")).metadata?.annotations?.[ANNOUNCER_ANNOTATION];
  const nodeNamed = (name: string | undefined) => nodes.find((node) => node.name === name) as AgentNode;
  const answeredBy = async (node: AgentNode) => {
    for (const address of addresses) if ((await world.resolve(address)) !== node.mac) return false;
    return true;
  };

  /**
   * Requests (from `fromFrame` on) that two MACs answered, of both addresses: answers (ARP replies, gratuitous ARP,
   * Neighbor Advertisements) of two senders between two of the client's requests (ARP requests, solicitations).
   */
  const dualAnswers = (fromFrame: number) => {
    let dual = 0;
    for (const address of addresses) {
      let answering = new Set<string>();
      for (const frame of frames.slice(fromFrame)) {
        const asked = frame.arp?.operation === "request" ? frame.arp.targetIp : frame.solicitation?.target;
        if (frame.outgoing && asked === address) {
          if (answering.size > 1) dual++;
          answering = new Set();
        } else if (frame.from && claims(frame, address)) answering.add(frame.from);
      }
      dual += answering.size > 1 ? 1 : 0;
    }
    return dual;
  };

  test("kube-apiserver stopped 60 s: every fresh ARP and NDP resolution answered by the announcer", async (t) => {
    const first = nodeNamed(await waitFor("web announced", announcer, WAIT_MS));
    await waitFor("the client resolving web to its announcer", () => answeredBy(first), WAIT_MS);
    const watch = await watchAnnouncer(world.services, "web", first.name);
    const fromFrame = frames.length;
    const counts = new Map(addresses.map((address) => [address, { requests: 0, failed: 0, others: 0 }]));
    const apiserver = world.plane.pids().apiserver;
    process.kill(apiserver, "SIGSTOP");
    try {
      const until = performance.now() + OUTAGE_MS;
      while (performance.now() < until) {
        const started = performance.now();
        for (const address of addresses) {
          const mac = await world.resolve(address);
          const count = counts.get(address) as { requests: number; failed: number; others: number };
          count.requests++;
          if (mac === undefined) count.failed++;
          else if (mac !== first.mac) count.others++;
        }
        await sleep(Math.max(0, 1000 - (performance.now() - started))); // two resolutions may take longer
      }
    } finally {
      process.kill(apiserver, "SIGCONT");
    }
    for (const [address, { requests, failed, others }] of counts) {
      const outage = `API outage of ${OUTAGE_MS / 1000} s, ${address}: ${requests} fresh resolutions`;
      t.diagnostic(`${outage}, ${failed} failed, ${others} by another MAC`);
      assert.equal(failed, 0, `resolutions of ${address} failed during the outage`);
      assert.equal(others, 0, `resolutions of ${address} answered by another node during the outage`);
    }
    assert.match(first.logs(), /a peer on the link answered/, "held on its peers' answers");
    // Back: the Leases renew, the guard lifts, and a while after (three Lease durations) nothing has moved.
    const renewed = (await first.readLease())?.spec?.renewTime;
    const renewing = async () => (await first.readLease())?.spec?.renewTime !== renewed;
    await waitFor("the announcer renewing again", renewing, WAIT_MS);
    const guardFresh = /lease_guard\{rule="fresh"\} 1$/m;
    await waitFor("the controller's guard lifted", async () => guardFresh.test(running.registry.expose()), WAIT_MS);
    // The window: until every agent's Lease has been renewed three Lease durations past the lift, long enough for
    // the controller to act on any expiry its stale view caused; the watch fails the test at the first move.
    const liftedAt = Date.now();
    const renewedPast = async (node: AgentNode) =>
      Date.parse((await node.readLease())?.spec?.renewTime ?? "") >= liftedAt + 3 * LEASE_DURATION_SECONDS * 1000;
    const window = async () => (await Promise.all(nodes.map(renewedPast))).every(Boolean);
    try {
      await Promise.race([watch.moved, waitFor("the Leases renewed three durations past the lift", window, WAIT_MS)]);
    } finally {
      await watch.stop();
    }
    assert.equal(await announcer(), first.name);
    for (let round = 0; round < 3; round++) assert.ok(await answeredBy(first), "still answered by the announcer");
    const dual = dualAnswers(fromFrame);
    t.diagnostic(`dual answers: ${dual}`);
    assert.equal(dual, 0);
  });

  test("the announcer cut off from API and peers: withdrawn, replaced within the budget, silent after", async (t) => {
    const first = nodeNamed(await waitFor("web announced", announcer, WAIT_MS));
    const other = nodes.find((node) => node !== first) as AgentNode;
    await waitFor("the client resolving web to its announcer", () => answeredBy(first), WAIT_MS);
    const fromFrame = frames.length;
    const cutAt = performance.now();
    first.proxy.cut();
    await first.segment.cut();
    try {
      await waitFor("the other node answering", () => answeredBy(other), WAIT_MS);
      const failoverMs = performance.now() - cutAt;
      t.diagnostic(`failover of a node cut off from the API and its peers: ${Math.round(failoverMs)} ms`);
      assert.ok(failoverMs < 3 * BUDGET_MS, `failover took ${failoverMs} ms`); // 5 s on an idle machine; CI is loaded
      assert.equal(await announcer(), other.name);
      assert.match(first.logs(), /no peer on the link answered lately: withdrawn/);
      // Back on the link alone (the API still out of reach): its peers answer, it probes each address afresh, the
      // other node answers those probes, and it takes neither back (ARP for IPv4, duplicate address detection).
      await first.segment.restore();
      const refused = async () => {
        const text = await (await fetch(`http://${first.reachableAt}:10265/metrics`)).text();
        return ["arp-sender", "advertisement"].every((rule) =>
          new RegExp(`^local_ccm_l2_address_conflicts_total\\{phase="probing",rule="${rule}"\\} [1-9]`, "m").test(text));
      };
      await waitFor("the old announcer's probes answered by the other node", refused, WAIT_MS);
      for (let round = 0; round < 3; round++) assert.ok(await answeredBy(other), `round ${round}: still the other node`);
    } finally {
      await first.segment.restore();
      first.proxy.restore();
    }
    // Back on the API too: it renews, relists, and stays silent; the other keeps answering.
    const renewed = (await first.readLease())?.spec?.renewTime;
    const renewing = async () => (await first.readLease())?.spec?.renewTime !== renewed;
    await waitFor("the old announcer renewing again", renewing, WAIT_MS);
    for (let round = 0; round < 5; round++) assert.ok(await answeredBy(other), `round ${round}: the new announcer`);
    const late = frames
      .slice(fromFrame)
      .filter((frame) => frame.from === first.mac && addresses.some((address) => claims(frame, address)));
    assert.deepEqual(late, [], "the old announcer claimed the address after it was cut");
    const dual = dualAnswers(fromFrame);
    t.diagnostic(`dual answers: ${dual}`);
    assert.equal(dual, 0);
  });
});
