// The bgppeer-status controller against a real kube-apiserver with the chart's BGPPeer CRD, run in this process
// as the program runs it (its own RBAC rules only, trimmed informers): Nodes report their sessions as agents do
// (a merge patch of the local-ccm.io/bgp-sessions annotation on their own Node), and `kubectl get bgppeer` shows
// the ESTABLISHED and NODES columns for peers with and without a nodeSelector, written by the leader only (a
// replica that does not lead writes nothing, and writes the next change once it leads); a state change, a Node
// going not Ready and a new Node update them; a malformed report is counted as refused, named in the status and
// told to its Node as an Event.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { BGP_PEER_RESOURCE, BGP_PEER_TYPE, type BGPPeer } from "../../src/bgppeers/peer.ts";
import { bgpPeerStatus } from "../../src/bgppeers/definition.ts";
import type { PeerStatusController } from "../../src/bgppeers/controller.ts";
import type { PeerStatusMetrics } from "../../src/bgppeers/metrics.ts";
import { SESSIONS_ANNOTATION, type SessionState, sessionReportText } from "../../src/bgppeers/sessions.ts";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitForEqual } from "../../localcluster/wait.ts";
import {
  type ControllerRun,
  controllerKubeconfig,
  createNode,
  eventsAbout,
  reportingComponent,
  setNodeReady,
  startController,
} from "../kube/controller-harness.ts";
import { installBgpPeerCrd } from "../pools/crd.ts";

let plane: ControlPlane;
let kubeconfig: string;
let peers: Resource<BGPPeer>;
let nodes: Resource<Node>;
const running = new Set<ControllerRun<PeerStatusController, PeerStatusMetrics>>();
/** The replica that leads, for the tests after the first. */
let current: ControllerRun<PeerStatusController, PeerStatusMetrics>;

before(async () => {
  plane = await startControlPlane();
  await installBgpPeerCrd(plane);
  // Events about Nodes go to "default", where the program's own grant (the chart's eventsGrant) lets it write them.
  const events = { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] };
  kubeconfig = await controllerKubeconfig(plane, "local-ccm-bgppeer-status", bgpPeerStatus.rbac.cluster, {
    default: [events],
  });
  peers = new Resource(plane.admin, BGP_PEER_RESOURCE);
  nodes = new Resource(plane.admin, NODE_RESOURCE);
});
after(async () => {
  for (const each of running) await stop(each);
  await plane?.stop();
});

const start = async (leader = true) => {
  const run = await startController(bgpPeerStatus, { kubeconfig, config: {}, leader });
  running.add(run);
  return run;
};
const stop = async (run: ControllerRun<PeerStatusController, PeerStatusMetrics>) => {
  running.delete(run);
  await run.stop();
};

/** As an agent writes its report: a merge patch of the annotation on its own Node. */
const report = (node: string, text: string | null) =>
  nodes.patch(node, "merge", { metadata: { annotations: { [SESSIONS_ANNOTATION]: text } } });
const sessions = (node: string, states: Record<string, SessionState>) => report(node, sessionReportText(states));

const createPeer = (name: string, nodeSelector?: NonNullable<BGPPeer["spec"]>["nodeSelector"]) =>
  peers.create({
    ...BGP_PEER_TYPE,
    metadata: { name },
    spec: { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513, ...(nodeSelector ? { nodeSelector } : {}) },
  });

/** `kubectl get bgppeer`'s rows: name, ESTABLISHED, NODES ("<none>" before any status). */
async function columns(): Promise<string[][]> {
  const table = await plane.kubectl(["get", "bgppeer"]);
  const [header, ...rows] = table
    .trim()
    .split("\n")
    .map((line) => line.trim().split(/\s{2,}/));
  assert.deepEqual(header?.slice(4, 6), ["ESTABLISHED", "NODES"]);
  return rows.map((row) => [row[0] ?? "", row[4] ?? "", row[5] ?? ""]);
}

const notEstablished = async (peer: string) => (await peers.get(peer)).status?.notEstablished;

describe("bgppeer-status", () => {
  test("kubectl get bgppeer shows each peer's sessions, written by the leader only; the next leader writes the next change", async () => {
    const rack = (name: string) => ({ "example.com/rack": name });
    for (const [name, labels] of [
      ["node-1", rack("r1")],
      ["node-2", rack("r1")],
      ["node-3", rack("r2")],
    ] as const)
      await createNode(nodes, name, { addresses: [], labels });
    await sessions("node-1", { "tor-all": "Established", "tor-r1": "Established" });
    await sessions("node-2", { "tor-all": "Established", "tor-r1": "Active" });
    await createPeer("tor-all");
    await createPeer("tor-r1", { matchLabels: rack("r1") });

    // Both start on the same caches: by the time the leader has written, the follower has had as long to.
    const follower = await start(false);
    const leader = await start();
    await waitForEqual("the columns", columns, [
      ["tor-all", "2", "3"],
      ["tor-r1", "1", "2"],
    ]);
    assert.deepEqual(await notEstablished("tor-all"), ["node-3: no report"]);
    assert.deepEqual(await notEstablished("tor-r1"), ["node-2: Active"]);
    assert.deepEqual([leader.writes(), follower.writes()], [2, 0], "one write per peer, by the leader only");

    // The leader gone, the follower takes over: what is written stays, and a change is its to write.
    await stop(leader);
    current = follower;
    follower.lead(true);
    follower.controller.resync();
    await sessions("node-2", { "tor-all": "Established", "tor-r1": "Established" });
    await waitForEqual("tor-r1 established on both", columns, [
      ["tor-all", "2", "3"],
      ["tor-r1", "2", "2"],
    ]);
    assert.deepEqual(await notEstablished("tor-r1"), []);
    assert.equal(follower.writes(), 1, "tor-all's status did not change: not written");
  });

  test("a Node not Ready and a new Node update the status", async () => {
    await setNodeReady(nodes, "node-1", "False");
    await createNode(nodes, "node-4", { addresses: [], labels: { "example.com/rack": "r1" } });
    await sessions("node-4", { "tor-r1": "OpenSent" });
    await waitForEqual("node-1 not Ready, node-4 in OpenSent", columns, [
      ["tor-all", "1", "4"],
      ["tor-r1", "1", "3"],
    ]);
    assert.deepEqual(await notEstablished("tor-r1"), ["node-1: not Ready", "node-4: OpenSent"]);
    await setNodeReady(nodes, "node-1", "True");
    await waitForEqual("node-1 Ready again", columns, [
      ["tor-all", "2", "4"],
      ["tor-r1", "2", "3"],
    ]);
  });

  test("a malformed report is refused whole: named in the status, counted, and told to its Node once", async () => {
    const run = current;
    await report("node-1", '{"tor-all":"Established","tor-r1":"Up"}');
    await report("node-2", "not json");
    await waitForEqual("node-1 and node-2 refused", columns, [
      ["tor-all", "0", "4"],
      ["tor-r1", "0", "3"],
    ]);
    assert.deepEqual(await notEstablished("tor-r1"), [
      "node-1: report refused (report-unknown-state)",
      "node-2: report refused (report-malformed)",
      "node-4: OpenSent",
    ]);
    const metrics = run.registry.expose();
    assert.match(metrics, /^test_bgppeer_status_reports_refused\{rule="report-unknown-state"\} 1$/m);
    assert.match(metrics, /^test_bgppeer_status_reports_refused\{rule="report-malformed"\} 1$/m);
    assert.match(metrics, /^test_bgppeer_status_sessions\{state="report-refused"\} 4$/m);
    const told = async () =>
      (await eventsAbout(plane.admin, reportingComponent(bgpPeerStatus), "default", "node-1")).map(
        ({ type, reason, message, count }) => `${type} ${reason} ${count}: ${message}`,
      );
    await waitForEqual("the Event on node-1", told, [
      `Warning BGPSessionReportRefused 1: ${SESSIONS_ANNOTATION} refused (report-unknown-state): peer tor-r1: "Up" ` +
        "is not one of Idle, Connect, Active, OpenSent, OpenConfirm, Established",
    ]);

    // Mended (or removed, as by an agent that no longer peers), the node counts again.
    await sessions("node-1", { "tor-all": "Established", "tor-r1": "Established" });
    await report("node-2", null);
    await waitForEqual("node-1 mended, node-2 without a report", columns, [
      ["tor-all", "1", "4"],
      ["tor-r1", "1", "3"],
    ]);
    assert.deepEqual(await notEstablished("tor-all"), ["node-2: no report", "node-3: no report", "node-4: no report"]);
    assert.match(run.registry.expose(), /^test_bgppeer_status_reports_refused\{rule="report-unknown-state"\} 0$/m);
  });
});
