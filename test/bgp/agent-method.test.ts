// The BGP method as the agent runs it (src/agent/announcer/bgp/definition.ts behind the announcing loop) against a
// real kube-apiserver and GoBGP (Debian's gobgpd) in a namespace: a BGPPeer that selects the node, its TCP MD5
// password from a Secret, the next hop by the kernel's route lookup; GoBGP learns the host routes of the Services of
// class local-ccm.io/bgp only, with their pool's communities; the node turning ineligible withdraws them (UPDATEs:
// the session stays up), externalTrafficPolicy Local follows this node's ready endpoints, a change of a BGPPeer that
// is no session setting resets nothing, a deleted Service is withdrawn, and a BGPPeer no longer selecting the node
// ends the session with nothing left at the router. An IPv6 Service goes over the IPv4 session, its next hop the
// node's IPv6 address on that link. Meanwhile the agent reports its session on its own Node
// (local-ccm.io/bgp-sessions): Established while it is, gone once no BGPPeer selects the node, and no longer
// Established when the router goes away. With FRR (bgpd and bfdd), a BGPPeer with `bfd` gets a BFD session beside
// its BGP session: Up at the router, left alone by a change of Services, and FRR's bfdd stopped takes the BGP session
// down within BFD's detection time (the hold time is 90 s), both coming back once bfdd runs again. With GoBGP as
// graceful-restart helper, an agent restarting while its lists of Services and endpoints are slow opens no session
// until it has them, so its first table (then End-of-RIB) is complete and GoBGP never drops the routes it kept.
// With --bgp-advertise-pod-cidrs, its own Node's pod CIDRs (both families, the IPv6 one over the IPv4 session) go to
// the router beside the addresses, follow the Node (a new CIDR: the old withdrawn; being deleted: none), and with
// --bgp-network-unavailable-condition the Node's NetworkUnavailable says False (RouteCreated) while the router holds
// them and True (NoRouteCreated) once the router is gone.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Namespace, Node, Secret, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { announceWhileSelected } from "../../src/agent/announcer/announcing.ts";
import { type BgpOptions, bgpMethod } from "../../src/agent/announcer/bgp/definition.ts";
import { NETWORK_UNAVAILABLE } from "../../src/agent/announcer/bgp/podcidrs.ts";
import { createMetrics } from "../../src/agent/metrics.ts";
import { type BGPPeer, BGP_PEER_RESOURCE, BGP_PEER_TYPE } from "../../src/bgppeers/peer.ts";
import { SESSIONS_ANNOTATION } from "../../src/bgppeers/sessions.ts";
import { createLogger, type Logger } from "../../src/cli/log.ts";
import { KubeClient, type RequestOptions } from "../../src/kube/client.ts";
import {
  ENDPOINT_SLICE_RESOURCE,
  NODE_RESOURCE,
  Resource,
  SECRET_RESOURCE,
  SERVICE_RESOURCE,
} from "../../src/kube/resource.ts";
import { EXCLUDE_LABEL } from "../../src/loadbalancer/nodes.ts";
import { type Netlink, openNetlink } from "../../src/net/netlink.ts";
import { ALLOCATED_FROM_ANNOTATION, BGP_CLASS, L2_CLASS } from "../../src/pools/allocate.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { createNetwork, type Network } from "../netns/netns.ts";
import { installBgpPeerCrd, installPoolCrd } from "../pools/crd.ts";
import { sleep } from "../../src/time/backoff.ts";
import { MY_ASN, RESTART_TIME, ROUTER_ASN, type Router, startFrr, startGobgp, startGracefulGobgp } from "./routers.ts";
import { startSpeaker } from "./speaker.ts";

const WAIT_MS = 60_000;
const NAMESPACE = "bgp-agent";
const NODE = "node-a";
let plane: ControlPlane | undefined;
let net: Network | undefined;
after(async () => {
  await net?.remove();
  await plane?.stop();
});

/** The session report on the Node `name` (null: none). */
async function reportOn(name: string): Promise<Record<string, string> | null> {
  const text = (await new Resource<Node>(plane!.admin, NODE_RESOURCE).get(name)).metadata?.annotations?.[
    SESSIONS_ANNOTATION
  ];
  return text === undefined ? null : (JSON.parse(text) as Record<string, string>);
}

/** The agent's BGP method for `name`, run by its announcing loop as the agent runs it (src/agent/run.ts). */
function agentBgp(
  client: KubeClient,
  name: string,
  node: () => Node,
  netlink: Netlink,
  metrics: ReturnType<typeof createMetrics>,
  log: Logger,
  podCidrs: Pick<BgpOptions, "advertisePodCidrs" | "networkUnavailableCondition"> = {},
) {
  const options = { client, netlink, node: name, secretNamespace: NAMESPACE, claimClassless: false, log };
  const bgp = bgpMethod({ ...options, ...podCidrs, metrics: metrics.bgp, nodeObject: node });
  const loop = announceWhileSelected(
    { client, node: name, log, selection: metrics.bgp.selection, method: bgp.definition },
    () => node().metadata?.labels ?? {},
  );
  return { bgp, loop };
}

/** What GoBGP learned, as prefix → "next hop communities". */
async function learned(router: Router): Promise<Record<string, string>> {
  const routes = [...(await router.routes(4)).values()].sort((a, b) => a.prefix.localeCompare(b.prefix));
  return Object.fromEntries(routes.map((r) => [r.prefix, `${r.nextHop} ${r.communities.join(",")}`.trim()]));
}

test("the agent's BGP method announces what the cluster says, to the peers that select its node", async () => {
  plane = await startControlPlane();
  await installBgpPeerCrd(plane);
  await installPoolCrd(plane);
  net = await createNetwork();
  const password = "s3cret-md5";
  const router = await startGobgp(net, { index: 0, subnet: 253, asn: 64512, peerAsn: 64513, transport: 4, password });
  const admin = plane.admin;
  await new Resource<Namespace>(admin, { group: "", version: "v1", plural: "namespaces" }).create({
    metadata: { name: NAMESPACE },
  });
  await new Resource<Secret>(admin, { ...SECRET_RESOURCE, namespace: NAMESPACE }).create({
    metadata: { name: "tor-password" },
    stringData: { password },
  });
  await new Resource<LoadBalancerIPPool>(admin, POOL_RESOURCE).create({
    ...POOL_TYPE,
    metadata: { name: "blue" },
    spec: { addresses: ["198.51.100.0/24"], bgp: { communities: ["65000:7"] } },
  });
  const peers = new Resource<BGPPeer>(admin, BGP_PEER_RESOURCE);
  await peers.create({
    ...BGP_PEER_TYPE,
    metadata: { name: "tor" },
    spec: {
      peerAddress: router.address[4],
      peerASN: 64512,
      myASN: 64513,
      holdTime: "9s",
      nodeSelector: { matchLabels: { role: "edge" } },
      passwordSecretRef: { name: "tor-password", key: "password" },
    },
  });
  const services = new Resource<Service>(admin, { ...SERVICE_RESOURCE, namespace: NAMESPACE });
  const slices = new Resource<EndpointSlice>(admin, { ...ENDPOINT_SLICE_RESOURCE, namespace: NAMESPACE });
  const createService = async (name: string, cls: string, ip: string, policy: "Cluster" | "Local" = "Cluster") => {
    await services.create({
      metadata: { name, annotations: { [ALLOCATED_FROM_ANNOTATION]: "blue" } },
      spec: {
        type: "LoadBalancer",
        loadBalancerClass: cls,
        externalTrafficPolicy: policy,
        ports: [{ port: 80, nodePort: undefined }],
      },
    });
    await services.patch(name, "merge", { status: { loadBalancer: { ingress: [{ ip, ipMode: "VIP" }] } } }, {
      subresource: "status",
    });
  };

  // This node's Node as the agent's watch would show it: Ready, labelled to be selected.
  let node: Node = {
    metadata: { name: NODE, labels: { role: "edge" } },
    status: { conditions: [{ type: "Ready", status: "True" }] },
  };
  // The Node the agent reports on (its labels and status are the local object's, as the agent's watch would show).
  await new Resource<Node>(admin, NODE_RESOURCE).create({ metadata: { name: NODE } });
  const netlink = openNetlink();
  const metrics = createMetrics();
  const lines: string[] = [];
  const log = createLogger({ verbosity: 0, format: "json", write: (line: string) => void lines.push(line) });
  /** The rules of the agent's "not announcing" lines so far. */
  const notAnnouncing = () =>
    lines
      .map((line) => JSON.parse(line) as { msg: string; rule?: string; service?: string })
      .filter((line) => line.msg.startsWith("BGP: not announcing"))
      .map((line) => `${line.service} ${line.rule}`);
  const { bgp, loop } = agentBgp(admin, NODE, () => node, netlink, metrics, log);
  const setNode = (next: Node) => {
    node = next;
    loop.update();
    bgp.nodeChanged();
  };
  bgp.start(loop.update);
  const ours = router.ours[4];
  const routes = () => learned(router);
  const report = () => reportOn(NODE);
  let routerStopped = false;
  try {
    await createService("web", BGP_CLASS, "198.51.100.7");
    await createService("layer2", L2_CLASS, "198.51.100.8");
    await waitForEqual("GoBGP has the bgp Service's route", routes, { "198.51.100.7/32": `${ours} 65000:7` }, WAIT_MS);
    assert.equal(await router.sessionState(), "established");
    await waitForEqual("the Node reports the session", report, { tor: "Established" }, WAIT_MS);
    const drops = await router.drops();

    setNode({ ...node, metadata: { ...node.metadata, labels: { role: "edge", [EXCLUDE_LABEL]: "true" } } });
    await waitForEqual("withdrawn once the node is excluded", routes, {}, WAIT_MS);
    assert.ok(notAnnouncing().includes(`${NAMESPACE}/web not-eligible`), "the log names the rule");
    setNode({ ...node, metadata: { ...node.metadata, labels: { role: "edge" } } });
    await waitForEqual("back once it is not", routes, { "198.51.100.7/32": `${ours} 65000:7` }, WAIT_MS);

    await createService("local", BGP_CLASS, "198.51.100.9", "Local");
    const slice = (name: string, nodeName: string): EndpointSlice => ({
      metadata: { name, labels: { "kubernetes.io/service-name": "local" } },
      addressType: "IPv4",
      endpoints: [{ addresses: ["10.0.0.1"], nodeName, conditions: { ready: true } }],
      ports: [{ port: 80 }],
    });
    await slices.create(slice("local-elsewhere", "node-b"));
    await slices.create(slice("local-here", NODE));
    const both = { "198.51.100.7/32": `${ours} 65000:7`, "198.51.100.9/32": `${ours} 65000:7` };
    await waitForEqual("Local: announced with a ready endpoint here", routes, both, WAIT_MS);
    await slices.delete("local-here");
    await waitForEqual("Local: withdrawn without one", routes, { "198.51.100.7/32": `${ours} 65000:7` }, WAIT_MS);
    assert.ok(notAnnouncing().includes(`${NAMESPACE}/local no-ready-endpoint`), "the log names the rule");
    assert.ok(!notAnnouncing().some((line) => line.endsWith("other-class")), "other classes are no news");

    // An IPv6 address over the IPv4 session (multiprotocol BGP): its next hop is this node's IPv6 address on the
    // link the session runs over.
    await createService("web6", BGP_CLASS, "2001:db8:100::7");
    const routes6 = async () => Object.fromEntries([...(await router.routes(6))].map(([p, r]) => [p, r.nextHop]));
    await waitForEqual("GoBGP has the IPv6 route", routes6, { "2001:db8:100::7/128": router.ours[6] }, WAIT_MS);
    await services.delete("web6");
    await waitForEqual("and withdrawn", routes6, {}, WAIT_MS);

    // A BGPPeer change that is no session setting (a label): nothing resets.
    await peers.patch("tor", "merge", { metadata: { labels: { team: "net" } } });
    await services.delete("web");
    await waitForEqual("a deleted Service is withdrawn", routes, {}, WAIT_MS);
    assert.equal(await router.drops(), drops, "no session reset through all of this");
    assert.equal(await router.sessionState(), "established");

    await createService("web2", BGP_CLASS, "198.51.100.10");
    await waitForEqual("announced again", routes, { "198.51.100.10/32": `${ours} 65000:7` }, WAIT_MS);
    await peers.patch("tor", "merge", { spec: { nodeSelector: { matchLabels: { role: "core" } } } });
    await waitForEqual("no BGPPeer selects the node: withdrawn", routes, {}, WAIT_MS);
    await waitForEqual("and its report is gone", report, null, WAIT_MS);

    await peers.patch("tor", "merge", { spec: { nodeSelector: { matchLabels: { role: "edge" } } } });
    await waitForEqual("selected again: reported Established", report, { tor: "Established" }, WAIT_MS);
    routerStopped = true;
    await router.stop();
    const down = await waitFor("the router gone: no longer Established", async () => {
      const states = await report();
      return states?.tor !== "Established" && states;
    }, WAIT_MS);
    assert.ok(["Idle", "Connect"].includes(down.tor ?? ""), JSON.stringify(down));
  } finally {
    await loop.stop();
    await bgp.stop();
    netlink.close();
    if (!routerStopped) await router.stop();
  }
});

test("a BGPPeer with bfd: BFD beside its session, untouched by Services; BFD down takes it down", async (t) => {
  assert.ok(plane && net, "after the first test, on its control plane and network");
  const bfdTimers = { minRx: 300, minTx: 300, multiplier: 3 };
  const router = await startFrr(net, {
    index: 1,
    subnet: 253,
    asn: ROUTER_ASN,
    peerAsn: MY_ASN,
    transport: 4,
    holdTime: 90,
    bfd: bfdTimers,
  });
  const admin = plane.admin;
  const name = "node-bfd";
  await new Resource<Node>(admin, NODE_RESOURCE).create({ metadata: { name } });
  const node: Node = {
    metadata: { name, labels: { bfd: "on" } },
    status: { conditions: [{ type: "Ready", status: "True" }] },
  };
  await new Resource<BGPPeer>(admin, BGP_PEER_RESOURCE).create({
    ...BGP_PEER_TYPE,
    metadata: { name: "tor-bfd" },
    spec: {
      peerAddress: router.address[4],
      peerASN: ROUTER_ASN,
      myASN: MY_ASN,
      holdTime: "90s",
      nodeSelector: { matchLabels: { bfd: "on" } },
      bfd: { minRx: "300ms", minTx: "300ms", multiplier: 3 },
    },
  });
  const netlink = openNetlink();
  const metrics = createMetrics();
  const log = createLogger({ verbosity: 2, format: "json", write: () => {} });
  const { bgp, loop } = agentBgp(admin, name, () => node, netlink, metrics, log);
  bgp.start(loop.update);
  const frrPeer = async () => (await router.bfd!.peers()).find((peer) => peer.peer === router.ours[4]);
  const report = () => reportOn(name);
  const services = new Resource<Service>(admin, { ...SERVICE_RESOURCE, namespace: NAMESPACE });
  try {
    await waitForEqual("BGP established, reported", report, { "tor-bfd": "Established" }, WAIT_MS);
    await waitFor("FRR's BFD session with us Up", async () => (await frrPeer())?.status === "up", WAIT_MS);
    // bgpd learns of the BFD session from bfdd a moment after bfdd has it Up.
    await waitForEqual("bgpd's neighbor watched by BFD", () => router.bfd!.bgpStatus(), "Up", WAIT_MS);
    const { id, "remote-id": remoteId } = (await frrPeer())!;
    assert.equal((await frrPeer())!["remote-receive-interval"], bfdTimers.minRx, "our timers, from the BGPPeer");

    // A change of Services: UPDATEs only, BFD left alone (the same session at FRR, never down).
    await services.create({
      metadata: { name: "bfd-web", annotations: { [ALLOCATED_FROM_ANNOTATION]: "blue" } },
      spec: { type: "LoadBalancer", loadBalancerClass: BGP_CLASS, ports: [{ port: 80 }] },
    });
    await services.patch("bfd-web", "merge", { status: { loadBalancer: { ingress: [{ ip: "198.51.100.20" }] } } }, {
      subresource: "status",
    });
    await waitFor("FRR has the route", async () => (await router.routes(4)).has("198.51.100.20/32"), WAIT_MS);
    const after = (await frrPeer())!;
    assert.deepEqual([after.status, after.id, after["remote-id"]], ["up", id, remoteId], "the same BFD session, Up");

    const stoppedAt = Date.now();
    router.bfd!.pause();
    try {
      const established = async () => (await report())?.["tor-bfd"] === "Established";
      await waitFor("BFD down took the BGP session down", async () => !(await established()), WAIT_MS);
      const tookMs = Date.now() - stoppedAt;
      t.diagnostic(`reported down ${tookMs} ms after bfdd stopped`);
      // detection (900 ms) and the report's write (at most a second later), on a loaded machine: far below 90 s
      assert.ok(tookMs < 15_000, `${tookMs} ms: BFD, not the hold time`);
    } finally {
      router.bfd!.resume();
    }
    await waitForEqual("both back", report, { "tor-bfd": "Established" }, WAIT_MS);
    await waitFor("FRR has the route again", async () => (await router.routes(4)).has("198.51.100.20/32"), WAIT_MS);
  } finally {
    await loop.stop();
    await bgp.stop();
    netlink.close();
    await router.stop();
  }
  assert.equal(await report(), null, "the report is removed when the agent stops");
});

/** A client whose first LISTs of Services and EndpointSlices wait until released: an agent whose lists are slow. */
class SlowLists extends KubeClient {
  private readonly gate = Promise.withResolvers<void>();
  held = 0;
  release(): void {
    this.gate.resolve();
  }
  override async request<T>(options: RequestOptions): Promise<T> {
    if (options.verb === "list" && /\/(services|endpointslices)$/.test(options.path)) {
      this.held++;
      await this.gate.promise;
    }
    return super.request<T>(options);
  }
}

test("graceful restart: a new agent's first table is complete; the router never drops a kept route", async () => {
  assert.ok(plane && net, "after the first test, on its control plane and network");
  const admin = plane.admin;
  const { router, session } = await startGracefulGobgp(net, 253, 2);
  const name = "node-gr";
  await new Resource<Node>(admin, NODE_RESOURCE).create({ metadata: { name } });
  const node: Node = {
    metadata: { name, labels: { gr: "on" } },
    status: { conditions: [{ type: "Ready", status: "True" }] },
  };
  await new Resource<BGPPeer>(admin, BGP_PEER_RESOURCE).create({
    ...BGP_PEER_TYPE,
    metadata: { name: "tor-gr" },
    spec: {
      peerAddress: router.address[4],
      peerASN: ROUTER_ASN,
      myASN: MY_ASN,
      nodeSelector: { matchLabels: { gr: "on" } },
      gracefulRestart: { restartTime: `${RESTART_TIME}s` },
    },
  });
  const services = new Resource<Service>(admin, { ...SERVICE_RESOURCE, namespace: NAMESPACE });
  const table = { "gr-web": "198.51.100.30", "gr-local": "198.51.100.31" };
  for (const [service, ip] of Object.entries(table)) {
    await services.create({
      metadata: { name: service, annotations: { [ALLOCATED_FROM_ANNOTATION]: "blue" } },
      spec: {
        type: "LoadBalancer",
        loadBalancerClass: BGP_CLASS,
        externalTrafficPolicy: service === "gr-local" ? "Local" : "Cluster",
        ports: [{ port: 80 }],
      },
    });
    await services.patch(service, "merge", { status: { loadBalancer: { ingress: [{ ip }] } } }, {
      subresource: "status",
    });
  }
  await new Resource<EndpointSlice>(admin, { ...ENDPOINT_SLICE_RESOURCE, namespace: NAMESPACE }).create({
    metadata: { name: "gr-local-here", labels: { "kubernetes.io/service-name": "gr-local" } },
    addressType: "IPv4",
    endpoints: [{ addresses: ["10.0.0.2"], nodeName: name, conditions: { ready: true } }],
    ports: [{ port: 80 }],
  });
  const prefixes = Object.values(table).map((ip) => `${ip}/32`).sort();
  const held = async () => [...(await router.routes(4)).keys()].filter((prefix) => prefixes.includes(prefix)).sort();

  // The agent before its restart: our speaker in a process of its own, killed as at the end of its SIGTERM (graceful
  // restart: no withdrawal, no Cease), its routes kept at GoBGP as stale.
  const before = startSpeaker({
    options: session(false),
    routes: prefixes.map((prefix) => ({ prefix, nextHop: router.ours[4] })),
  });
  const exited = new Promise((resolve) => before.child.once("exit", resolve));
  const netlink = openNetlink();
  const client = new SlowLists(admin.config, { component: "agent-method-test" });
  const lines: string[] = [];
  const log = createLogger({ verbosity: 2, format: "json", write: (line: string) => void lines.push(line) });
  let polling = true;
  let polls = 0;
  const missing: string[][] = [];
  let poll: Promise<void> | undefined;
  const { bgp, loop } = agentBgp(client, name, () => node, netlink, createMetrics(), log);
  try {
    await waitForEqual("GoBGP has the agent's routes before its restart", held, prefixes, WAIT_MS);
    before.child.kill("SIGKILL");
    await exited;
    // GoBGP refuses connections for a few seconds after a peer's loss; the new agent comes once it would accept one.
    await waitForEqual("GoBGP waiting for the restarted agent", () => router.sessionState(), "active", WAIT_MS);
    poll = (async () => {
      while (polling) {
        const seen = await held();
        if (seen.length < prefixes.length) missing.push(seen);
        polls++;
        await sleep(100); // a poll of the router, not a wait for a condition
      }
    })();
    // The new agent, its lists of Services and endpoints slow to come: its sessions wait for them.
    bgp.start(loop.update);
    await waitFor("the agent asked for its lists", () => client.held === 2, WAIT_MS);
    const started = () => lines.some((line) => line.includes("BGP announcing started"));
    await waitFor("the agent's BGP announcing started", started, WAIT_MS);
    // The fault's length: a session connects in milliseconds here, so one that would not wait is up long before.
    await sleep(3000);
    assert.notEqual(await router.sessionState(), "established", "no session before the table is known");
    client.release();
    await waitForEqual("the new session established", () => router.sessionState(), "established", WAIT_MS);
    await waitForEqual("reported Established", () => reportOn(name), { "tor-gr": "Established" }, WAIT_MS);
    // End-of-RIB went with the table, and GoBGP drops what it lacks as it reads it: a second of polls after that.
    const enough = polls + 10;
    await waitFor("ten more polls of the router", () => polls >= enough, WAIT_MS);
  } finally {
    polling = false;
    await poll;
    client.release();
    await loop.stop();
    await bgp.stop();
    netlink.close();
    before.child.kill("SIGKILL");
    await router.stop();
  }
  assert.deepEqual(missing, [], "a kept route was never missing");
});

test("pod CIDRs: its own Node's in both families follow the Node; NetworkUnavailable follows the router", async () => {
  assert.ok(plane && net, "after the first test, on its control plane and network");
  const admin = plane.admin;
  const router = await startGobgp(net, { index: 3, subnet: 253, asn: ROUTER_ASN, peerAsn: MY_ASN, transport: 4 });
  const name = "node-pods";
  const nodes = new Resource<Node>(admin, NODE_RESOURCE);
  await nodes.create({ metadata: { name } });
  let node: Node = {
    metadata: { name, labels: { pods: "on" } },
    spec: { podCIDRs: ["10.244.3.0/24", "fd00:10:244:3::/64"] },
    status: { conditions: [{ type: "Ready", status: "True" }] },
  };
  await new Resource<BGPPeer>(admin, BGP_PEER_RESOURCE).create({
    ...BGP_PEER_TYPE,
    metadata: { name: "tor-pods" },
    spec: {
      peerAddress: router.address[4],
      peerASN: ROUTER_ASN,
      myASN: MY_ASN,
      holdTime: "9s",
      nodeSelector: { matchLabels: { pods: "on" } },
    },
  });
  const netlink = openNetlink();
  const log = createLogger({ verbosity: 0, format: "json", write: () => {} });
  const podCidrs = { advertisePodCidrs: true, networkUnavailableCondition: true };
  const { bgp, loop } = agentBgp(admin, name, () => node, netlink, createMetrics(), log, podCidrs);
  const setNode = (next: Node) => {
    node = next;
    loop.update();
    bgp.nodeChanged();
  };
  // The pod CIDR routes GoBGP holds (the Services' host routes of the earlier tests aside): prefix → next hop.
  const podRoutes = async () => {
    const all = [...(await router.routes(4)).values(), ...(await router.routes(6)).values()];
    const pods = all.filter(({ prefix }) => !prefix.endsWith("/32") && !prefix.endsWith("/128"));
    return Object.fromEntries(pods.map(({ prefix, nextHop }) => [prefix, nextHop]).sort());
  };
  const condition = async () => {
    const found = (await nodes.get(name)).status?.conditions?.find(({ type }) => type === NETWORK_UNAVAILABLE);
    return found && `${found.status} ${found.reason}`;
  };
  const [ours4, ours6] = [router.ours[4], router.ours[6]];
  let routerStopped = false;
  bgp.start(loop.update);
  try {
    const both = { "10.244.3.0/24": ours4, "fd00:10:244:3::/64": ours6 };
    await waitForEqual("GoBGP has both pod CIDRs, next hops this node's", podRoutes, both, WAIT_MS);
    await waitForEqual("NetworkUnavailable False while a peer holds them", condition, "False RouteCreated", WAIT_MS);
    const drops = await router.drops();

    setNode({ ...node, spec: { podCIDRs: ["10.244.7.0/24", "fd00:10:244:3::/64"] } });
    const changed = { "10.244.7.0/24": ours4, "fd00:10:244:3::/64": ours6 };
    await waitForEqual("a new CIDR: the old one withdrawn", podRoutes, changed, WAIT_MS);
    setNode({ ...node, metadata: { ...node.metadata, deletionTimestamp: "2026-11-28T00:00:00Z" } });
    await waitForEqual("the Node being deleted: no pod CIDR", podRoutes, {}, WAIT_MS);
    const { deletionTimestamp: _, ...metadata } = node.metadata ?? {};
    setNode({ ...node, metadata });
    await waitForEqual("back", podRoutes, changed, WAIT_MS);
    assert.equal(await router.drops(), drops, "each change was UPDATEs: no session reset");

    routerStopped = true;
    await router.stop();
    await waitForEqual("NetworkUnavailable True once no peer holds them", condition, "True NoRouteCreated", WAIT_MS);
  } finally {
    await loop.stop();
    await bgp.stop();
    netlink.close();
    if (!routerStopped) await router.stop();
  }
});
