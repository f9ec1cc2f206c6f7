// The agent announcing for real (world.ts): a kube-apiserver, the agent in a node's network namespace as uid 65532
// with CAP_NET_RAW only, reaching the API through a proxy the test can cut, and a client on the node's bridge. Its
// announcer Lease is created with label, segments and holder, renewed, recreated when deleted; a Service assigned
// to the node (annotation and label, an ingress IP in the link's subnet) makes the client resolve that IP to the
// node's MAC, over ARP and NDP; moved to another node, it stops answering; with the API cut it answers on for both
// addresses while the client, its peer, answers its probes (ARP, and solicitations to its IPv6 address; with the
// bridge dropping ARP, the solicitations alone), stops once its port on the bridge is taken out too, and answers
// again when the API returns; on SIGTERM it withdraws and deletes its Lease. A second node with
// --lb-l2-node-selector deletes a Lease left from before and answers nothing until its Node is labelled; then it
// keeps its Lease and answers, until the label goes.
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node } from "kubernetes-types/core/v1.js";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { PEER_FRESH_MS } from "../../src/agent/announcer/arp-ndp/holding.ts";
import { announcerLease } from "../../src/agent/announcer/arp-ndp/lease.ts";
import {
  ANNOUNCER_LEASE_LABEL,
  announcerLeaseName,
  GATEWAYS_ANNOTATION,
  LEASE_DURATION_SECONDS,
  SEGMENTS_ANNOTATION,
} from "../../src/pools/announcement.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { sleep } from "../../src/time/backoff.ts";
import { type AgentNode, type AnnounceWorld, type Frame, NAMESPACE, startAnnounceWorld, SUBNET } from "./world.ts";

const NODE = "node-a";
const LEASE = announcerLeaseName(NODE) as string;
const ADDRESSES = [`${SUBNET.v4}.55`, `${SUBNET.v6}:55`];
/** And one in none of the node's segments: skipped by rule. */
const INGRESS = [...ADDRESSES, "203.0.113.5"];
const WAIT_MS = 60_000;
const EDGE_LABEL = "node-role.kubernetes.io/l2-edge";

describe("the agent announcing LoadBalancer addresses, with its Lease, against a real kube-apiserver", () => {
  let world: AnnounceWorld;
  let node: AgentNode;

  before(async () => {
    world = await startAnnounceWorld(77);
    node = await world.addNode(NODE, 0);
  });

  after(() => world?.stop());

  /** What went wrong, with the agent's last words. */
  const diagnoseNode = (agent: AgentNode, err: unknown): never => {
    throw new Error(`${(err as Error).message}\nagent:\n${agent.logs().split("\n").slice(-40).join("\n")}`, {
      cause: err,
    });
  };
  const diagnose = (err: unknown): never => diagnoseNode(node, err);
  const readLease = () => node.readLease();
  const everyAddress = (mac: string | undefined) => async () => {
    for (const address of ADDRESSES) if ((await world.resolve(address)) !== mac) return false;
    return true;
  };
  const answered = (what: string) => waitFor(what, everyAddress(node.mac), WAIT_MS).catch(diagnose);
  const unanswered = (what: string) => waitFor(what, everyAddress(undefined), WAIT_MS).catch(diagnose);
  const assign = (to: string) => world.assign("web", to, INGRESS);

  test("the Lease: created with label, segments and holder; renewed; created again when deleted", async () => {
    const first = await waitFor("the announcer Lease", readLease, WAIT_MS).catch(diagnose);
    assert.equal(first.metadata?.labels?.[ANNOUNCER_LEASE_LABEL], "true");
    assert.equal(first.metadata?.annotations?.[SEGMENTS_ANNOTATION], `${SUBNET.v4}.0/24,${SUBNET.v6}:/64`);
    assert.equal(first.spec?.holderIdentity, NODE);
    assert.equal(first.spec?.leaseDurationSeconds, LEASE_DURATION_SECONDS);
    const renewed = async () => (await readLease())?.spec?.renewTime !== first.spec?.renewTime;
    await waitFor("a renewal (renewTime moves)", renewed, WAIT_MS).catch(diagnose);
    await world.leases.delete(LEASE);
    const again = async () => {
      const lease = await readLease();
      return lease && lease.metadata?.uid !== first.metadata?.uid && lease;
    };
    const recreated = await waitFor("the Lease created again", again, WAIT_MS).catch(diagnose);
    assert.equal(recreated.spec?.holderIdentity, NODE);
  });

  test("the Lease: another writer's change is re-read and kept, the holder taken back; segments, gateways follow", async () => {
    const lease = (await readLease()) as Lease;
    const labels = { ...lease.metadata?.labels, team: "net" };
    // Its next update, pinned to the resourceVersion it read, conflicts: it re-reads and renews on top.
    const spec = { ...lease.spec, holderIdentity: "someone-else" };
    await world.leases.update({ ...lease, metadata: { ...lease.metadata, labels }, spec });
    const renewedOnTop = async () => {
      const current = await readLease();
      return current?.spec?.holderIdentity === NODE && current.metadata?.labels?.team === "net";
    };
    await waitFor("the Lease renewed on top of the other writer's change", renewedOnTop, WAIT_MS).catch(diagnose);
    await node.host.ip("address", "add", "198.18.78.1/24", "dev", node.link);
    const segments = `${SUBNET.v4}.0/24,198.18.78.0/24,${SUBNET.v6}:/64`;
    const followed = async () => (await readLease())?.metadata?.annotations?.[SEGMENTS_ANNOTATION] === segments;
    await waitFor(`segments ${segments}`, followed, WAIT_MS).catch(diagnose);
    // A default route's next hop is told too (one in a table of its own: the node's routing stays as it is).
    await node.host.ip("route", "add", "default", "via", `${SUBNET.v4}.254`, "table", "100");
    const gateways = async () => (await readLease())?.metadata?.annotations?.[GATEWAYS_ANNOTATION]?.split(",");
    const told = async () => (await gateways())?.includes(`${SUBNET.v4}.254`);
    await waitFor("the default route's next hop on the Lease", told, WAIT_MS).catch(diagnose);
  });

  test("a Service assigned to the node is announced (ARP, NDP); assigned to another node, it is not", async () => {
    await assign(NODE);
    await answered("the client resolving both addresses to the node's MAC");
    const metrics = await (await fetch(`http://${node.reachableAt}:10265/metrics`)).text();
    assert.match(metrics, /^local_ccm_l2_announced_addresses 2$/m);
    assert.match(metrics, /^local_ccm_l2_skipped_addresses\{rule="no-segment"\} 1$/m, "the address outside its segments");
    await assign("node-b");
    await unanswered("nobody answering once the Service is another node's");
    await assign(NODE);
    await answered("the node answering again once it is assigned back");
  });

  const metric = async (agent: AgentNode, line: RegExp) =>
    line.test(await (await fetch(`http://${agent.reachableAt}:10265/metrics`)).text());

  test("with the API cut, the node answers on while its peers answer it; cut off from them too, it stops until they answer", async (t) => {
    await answered("the node answering before the cut");
    const capture = await world.capture();
    node.proxy.cut();
    try {
      const holding = /^local_ccm_l2_links\{rule="peers-reachable"\} 1$/m;
      await waitFor("past its deadline, held by its peers' answers", () => metric(node, holding), WAIT_MS).catch(diagnose);
      // The deadline passes before the renewal under way times out (3 s): its failure is logged after.
      await waitFor("the failed renewal logged", () => /renewing the announcer Lease failed/.test(node.logs()), WAIT_MS);
      // The client (a peer: it asked the node before) answers its probes: every question is still answered, over
      // ARP and NDP alike.
      for (let round = 0; round < 5; round++)
        for (const address of ADDRESSES) assert.equal(await world.resolve(address), node.mac, `${address} ${round}`);
      // Its IPv6 peer is asked too: a solicitation from the node for an address of the client, which answers it.
      const peer = (frame: Frame) => frame.solicitation && !ADDRESSES.includes(frame.solicitation.target);
      const asked = capture.frames.find((frame) => frame.from === node.mac && peer(frame))?.solicitation?.target;
      assert.ok(asked, "the node solicited an IPv6 address of the client");
      const answer = (frame: Frame) => frame.outgoing && frame.advertisement?.target === asked;
      assert.ok(capture.frames.some(answer), "the client answered the node's solicitation");
      await capture.stop();
      // The segment IPv6-only (the bridge drops ARP): NDP alone proves the link, and the IPv6 address is answered
      // throughout a window of three times what one answer proves.
      await world.blockArp(true);
      try {
        const [v4, v6] = ADDRESSES as [string, string];
        assert.equal(await world.resolve(v4), undefined, "the bridge drops ARP");
        for (const until = performance.now() + 3 * PEER_FRESH_MS; performance.now() < until; )
          assert.equal(await world.resolve(v6), node.mac, "IPv6 answered with the segment's ARP dropped");
        assert.ok(await metric(node, holding), "held on an IPv6 peer's answers");
      } finally {
        await world.blockArp(false);
      }
      // Its process stopped (as CPU starvation looks from inside) for twice what one answer proves: it takes itself
      // for cut off and withdraws; resumed, its peers answer, it probes each address afresh and answers again.
      const withdrawals = () => node.logs().match(/no peer on the link answered lately: withdrawn/g)?.length ?? 0;
      const withdrawnBefore = withdrawals();
      node.signal("SIGSTOP");
      try {
        await sleep(2 * PEER_FRESH_MS); // the fault's length, not a wait for a condition
      } finally {
        node.signal("SIGCONT");
      }
      await waitFor("withdrawn once resumed", async () => withdrawals() > withdrawnBefore, WAIT_MS).catch(diagnose);
      await answered("the node answering again after the stop, the API still out of reach");
      const cutAt = performance.now();
      await node.segment.cut();
      const cutOff = /^local_ccm_l2_links\{rule="cut-off"\} 1$/m;
      await waitFor("withdrawn once no peer answers", () => metric(node, cutOff), WAIT_MS).catch(diagnose);
      const withdrawnMs = performance.now() - cutAt;
      t.diagnostic(`withdrawn ${Math.round(withdrawnMs)} ms after its segment was cut (API already out of reach)`);
      assert.ok(withdrawnMs < PEER_FRESH_MS + 5000, `withdrawn after ${withdrawnMs} ms`);
      assert.match(node.logs(), /no peer on the link answered lately: withdrawn/);
      await unanswered("nobody answering while cut off");
      // Back on its link, the API still out of reach: a peer answers, each address is probed afresh and, nobody
      // else holding it, answered again (one the controller gave to another node meanwhile: election.test.ts).
      await node.segment.restore();
      await answered("the node answering again once a peer answers, the API still out of reach");
      assert.ok(await metric(node, holding), "held on its peers' answers again");
    } finally {
      await node.segment.restore();
      node.proxy.restore();
    }
    await answered("the node answering again once its Lease is renewed");
  });

  test("--lb-l2-node-selector: no Lease until the Node is labelled; then it answers; unlabelled, it stops", async () => {
    const name = "node-edge";
    const address = `${SUBNET.v4}.66`;
    const nodes = new Resource<Node>(world.plane.admin, NODE_RESOURCE);
    await nodes.create({ metadata: { name } });
    // As a run that crashed would leave it: deleted, since the node is not selected.
    const identity = { node: name, name: announcerLeaseName(name) as string, namespace: NAMESPACE };
    await world.leases.create(announcerLease(identity, { segments: "", gateways: "" }, new Date()));
    const edge = await world.addNode(name, 1, [`--lb-l2-node-selector=${EDGE_LABEL}`]);
    const answers = (mac: string | undefined) => async () => (await world.resolve(address)) === mac;
    const until = (what: string, check: () => Promise<boolean>) =>
      waitFor(what, check, WAIT_MS).catch((err: unknown) => diagnoseNode(edge, err));

    const unselected = /does not announce: the Node's labels do not match --lb-l2-node-selector/;
    await until("the agent deciding from its unlabelled Node", async () => unselected.test(edge.logs()));
    await until("the leftover Lease deleted", async () => (await edge.readLease()) === undefined);
    await world.assign("edge", name, [address]);
    assert.equal(await world.resolve(address), undefined, "nobody answers for the node while it is not selected");
    assert.equal(await edge.readLease(), undefined, "still no Lease");
    const metrics = await (await fetch(`http://${edge.reachableAt}:10265/metrics`)).text();
    assert.match(metrics, /^local_ccm_l2_node_selection\{rule="not-selected"\} 1$/m);

    await nodes.patch(name, "merge", { metadata: { labels: { [EDGE_LABEL]: "" } } });
    await until("its Lease, once the Node is labelled", async () => (await edge.readLease()) !== undefined);
    await until("the client resolving the address to the labelled node's MAC", answers(edge.mac));

    await nodes.patch(name, "merge", { metadata: { labels: { [EDGE_LABEL]: null } } });
    await until("its Lease deleted, once the label is gone", async () => (await edge.readLease()) === undefined);
    await until("nobody answering once the label is gone", answers(undefined));
    assert.match(edge.logs(), /withdrawn everything[\s\S]*announcer Lease deleted/, "withdrawn, then the Lease deleted");
  });

  test("SIGTERM: everything withdrawn, the Lease deleted, exit 0", async () => {
    await answered("the node answering before it stops");
    node.signal("SIGTERM");
    assert.equal(await node.exited, 0);
    assert.equal(await readLease(), undefined, "the Lease is deleted");
    await unanswered("nobody answering once the agent has stopped");
    const lines = node.logs();
    const [withdrawn, deleted] = [lines.indexOf("withdrawn everything"), lines.indexOf("announcer Lease deleted")];
    assert.ok(withdrawn >= 0 && deleted > withdrawn, "withdrawn, then the Lease deleted");
  });
});
