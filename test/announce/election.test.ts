// The election whole, without a cluster: a real kube-apiserver, the address pool controller (in this process, with
// its own RBAC, as test/pools runs it), and two agents on one bridge with a client (world.ts). The pool hands a
// Service an address on the bridge, the controller names an announcer, the client resolves it afresh every second.
// - kube-apiserver stopped (SIGSTOP) for 60 s: every one of those resolutions is answered, by the same node, and
//   nothing moves after it is back (the agents hold on their peers' answers, the controller's Lease guard pauses);
// - the announcer cut off from the API and from its peers (its port on the bridge taken out): it withdraws, the
//   controller moves the address within the failover budget, and back on the link it never answers again.
// A capture on the client's link counts the requests answered by two MACs: none.
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { Informer } from "../../src/kube/informer.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION } from "../../src/pools/announcement.ts";
import { sleep } from "../../src/time/backoff.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { RunningController } from "../pools/world.ts";
import { startElection } from "./election-world.ts";
import { type AgentNode, type AnnounceWorld, claims, type Frame, startAnnounceWorld, SUBNET } from "./world.ts";

const WAIT_MS = 60_000;
const OUTAGE_MS = 60_000;
/** The failover budget: a node cut off to another node answering. */
const BUDGET_MS = 5000;

describe("the election with its controller: an API outage moves nothing; a node cut off is replaced", () => {
  let world: AnnounceWorld;
  let nodes: AgentNode[];
  let running: RunningController;
  let frames: Frame[] = [];
  let address = "";

  before(async () => {
    world = await startAnnounceWorld(79);
    ({ nodes, running } = await startElection(world, [`${SUBNET.v4}.70`]));
    frames = (await world.capture()).frames;
    await world.services.create({
      metadata: { name: "web" },
      spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port: 80, protocol: "TCP" }] },
    });
    address = `${SUBNET.v4}.70`;
  });

  after(async () => {
    await running?.stop();
    await world?.stop();
  });

  const announcer = async () => (await world.services.get("web")).metadata?.annotations?.[ANNOUNCER_ANNOTATION];
  const nodeNamed = (name: string | undefined) => nodes.find((node) => node.name === name) as AgentNode;
  const answeredBy = async (node: AgentNode) => (await world.resolve(address)) === node.mac;

  /** Requests (from `fromFrame` on) that two MACs answered: replies of two senders between two requests. */
  const dualAnswers = (fromFrame: number) => {
    let dual = 0;
    let answering = new Set<string>();
    for (const frame of frames.slice(fromFrame)) {
      if (frame.outgoing && frame.arp?.operation === "request" && frame.arp.targetIp === address) {
        if (answering.size > 1) dual++;
        answering = new Set();
      } else if (frame.from && frame.arp?.operation === "reply" && claims(frame, address)) answering.add(frame.from);
    }
    return dual + (answering.size > 1 ? 1 : 0);
  };

  /** Every value the announcer annotation takes, each change once. */
  const recordAnnouncers = async () => {
    const seen: (string | undefined)[] = [];
    const informer = new Informer(world.services, { fieldSelector: "metadata.name=web" });
    const record = (service: Service) => {
      const node = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
      if (seen.at(-1) !== node || seen.length === 0) seen.push(node);
    };
    informer.addHandlers({ onAdd: record, onUpdate: (_, service) => record(service) });
    informer.start();
    await informer.waitForSync();
    return { seen, stop: () => informer.stop() };
  };

  test("kube-apiserver stopped for 60 s: every fresh resolution answered by the announcer; nothing moves", async (t) => {
    const first = nodeNamed(await waitFor("web announced", announcer, WAIT_MS));
    await waitFor("the client resolving web to its announcer", () => answeredBy(first), WAIT_MS);
    const recorder = await recordAnnouncers();
    const fromFrame = frames.length;
    let [requests, failed, others] = [0, 0, 0];
    const apiserver = world.plane.pids().apiserver;
    process.kill(apiserver, "SIGSTOP");
    try {
      const until = performance.now() + OUTAGE_MS;
      while (performance.now() < until) {
        const started = performance.now();
        const mac = await world.resolve(address);
        requests++;
        if (mac === undefined) failed++;
        else if (mac !== first.mac) others++;
        await sleep(1000 - (performance.now() - started));
      }
    } finally {
      process.kill(apiserver, "SIGCONT");
    }
    const outage = `API outage of ${OUTAGE_MS / 1000} s: ${requests} fresh resolutions`;
    t.diagnostic(`${outage}, ${failed} failed, ${others} by another MAC`);
    assert.equal(failed, 0, "resolutions failed during the outage");
    assert.equal(others, 0, "resolutions answered by another node during the outage");
    assert.match(first.logs(), /a peer on the link answered/, "held on its peers' answers");
    // Back: the Leases renew, the guard lifts, and a while after (three Lease durations) nothing has moved.
    const renewed = (await first.readLease())?.spec?.renewTime;
    const renewing = async () => (await first.readLease())?.spec?.renewTime !== renewed;
    await waitFor("the announcer renewing again", renewing, WAIT_MS);
    const guardFresh = /lease_guard\{rule="fresh"\} 1$/m;
    await waitFor("the controller's guard lifted", async () => guardFresh.test(running.registry.expose()), WAIT_MS);
    await sleep(10_000); // what is measured is that nothing happens in this while
    assert.equal(await announcer(), first.name);
    assert.deepEqual(recorder.seen, [first.name], "the announcer never changed");
    await recorder.stop();
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
    } finally {
      await first.segment.restore();
      first.proxy.restore();
    }
    // Back on the link and the API: it renews, relists, and stays silent; the other keeps answering.
    const renewed = (await first.readLease())?.spec?.renewTime;
    const renewing = async () => (await first.readLease())?.spec?.renewTime !== renewed;
    await waitFor("the old announcer renewing again", renewing, WAIT_MS);
    for (let round = 0; round < 5; round++) assert.ok(await answeredBy(other), `round ${round}: the new announcer`);
    const late = frames.slice(fromFrame).filter((frame) => frame.from === first.mac && claims(frame, address));
    assert.deepEqual(late, [], "the old announcer claimed the address after it was cut");
    const dual = dualAnswers(fromFrame);
    t.diagnostic(`dual answers: ${dual}`);
    assert.equal(dual, 0);
  });
});
