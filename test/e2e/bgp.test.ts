// BGP pool addresses as users run them: `helm install` of charts/local-ccm with bgp.enabled on four real kubelets
// with kube-proxy (iptables mode), node-0 the control-plane node (kubeadm's exclusion label: not eligible), the
// cluster's FRR router (localcluster/router.ts, dynamic neighbors, ECMP, the client host's default route), a BGPPeer
// for it and a pool outside every network of the slot, so that only the router's routes reach it. The cluster is
// dual-stack (localcluster's dualStack: nodes, pods, client host and router have IPv6 addresses too; Services stay
// IPv4), so each agent's session carries IPv6 as well, over IPv4. From the client:
// - a Service of class local-ccm.io/bgp: the router holds its /32 with one next hop per eligible node, curl answers;
// - `kubectl get bgppeer`: ESTABLISHED equal to NODES, every node peering (node-0 too: excluded from announcing, not
//   from peering), from the agents' reports on their Nodes;
// - a worker labelled excluded: its path is withdrawn, the others stay, no request fails meanwhile;
// - externalTrafficPolicy Local: only the nodes with an endpoint;
// - with gracefulRestart on the BGPPeer, the agents restarted one by one (rollout restart): no request fails, and
//   the router keeps every path;
// - with BFD on the BGPPeer and the router: a worker's link cut, its path goes within BFD's time, not the hold time;
//   its link back, its session and path come back; and a rollout restart with BFD and graceful restart keeps every
//   path, as without BFD;
// - the Service deleted: the route goes;
// - pod CIDRs, both families (bgp.advertisePodCIDRs; the Nodes' spec.podCIDRs, IPv4 and IPv6, written as
//   kube-controller-manager's IPAM would, each its node's CNI ranges): the router holds each node's IPv4 and IPv6 CIDR
//   with that node as next hop (its IPv4, and its IPv6 address on the link); the client host reaches a pod on every
//   node by each of its pod IPs (this machine forwards nothing between the nodes and the client: only the router's
//   routes lead there), and with the nodes' own inter-node pod routes replaced by one route per family to the router,
//   pods on different nodes reach each other through it in both families; a BGPPeer opting out
//   (spec.advertisePodCIDRs false) gets none, and one narrowed by nodeSelector gets only the selected nodes'.
import assert from "node:assert/strict";
import { after, before, type TestContext, test } from "node:test";
import type { Cluster, ClusterNode } from "../../localcluster/cluster.ts";
import * as layer2 from "../../localcluster/layer2.ts";
import { AGNHOST_IMAGE, NETEXEC_PORT } from "../../localcluster/agnhost.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import { NAMESPACE } from "../../localcluster/project.ts";
import { type ClusterRouter, routedPool, routerPeer, startRouter } from "../../localcluster/router.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { EXCLUDE_LABEL } from "../../src/loadbalancer/nodes.ts";
import { hostPort, ipFamily } from "../../src/net/ip.ts";
import { BGP_CLASS } from "../../src/pools/allocate.ts";
import { sleep } from "../../src/time/backoff.ts";
import { netexecService, startPoolCluster } from "./l2-cluster.ts";

const WAIT_MS = 180_000;
const WORKERS = ["node-1", "node-2", "node-3"];
const INGRESS_IP = "{.status.loadBalancer.ingress[0].ip}";
let cluster: Cluster;
let router: ClusterRouter;
before(async () => {
  const values = { "bgp.enabled": "true", "bgp.advertisePodCIDRs": "true" };
  const objects = (slot: number) => [routerPeer(slot), routedPool(slot)];
  cluster = await startPoolCluster("iptables", values, objects, { dualStack: true });
  router = await startRouter(cluster);
});
after(async () => {
  await router?.stop();
  await cluster?.stop();
});

const bgpService = (name: string, local = false) => netexecService(name, BGP_CLASS, local);

async function ingressIp(name: string): Promise<string> {
  return waitFor(
    `${name}'s address`,
    async () => (await cluster.kubectl(["get", "service", name, "-o", `jsonpath=${INGRESS_IP}`])) || undefined,
    WAIT_MS,
    500,
  );
}

/** Node names by public address, both families: what the router's next hops are. */
const nodesByIp = () =>
  new Map(cluster.nodes.flatMap((node) => [node.publicIP, node.publicIP6].map((ip) => [ip, node.name] as const)));

/** The router's next hops for `ip`/32, as node names, sorted; [] without a route. */
async function nextHops(ip: string): Promise<string[]> {
  const route = (await router.routes()).find((r) => r.prefix === `${ip}/32`);
  const byIp = nodesByIp();
  return (route?.via ?? []).map((via) => byIp.get(via) ?? via).sort();
}

const waitForHops = (ip: string, expected: string[], what: string) =>
  waitFor(what, async () => JSON.stringify(await nextHops(ip)) === JSON.stringify(expected), WAIT_MS, 250).catch(
    async (err: unknown) => {
      throw new Error(`${(err as Error).message}: the router has ${JSON.stringify(await nextHops(ip))}`);
    },
  );

/** `host`: an IP, or hostPort()'s "ip:port" / "[ipv6]:port" (--globoff: curl reads no brackets as a pattern). */
const get = (host: string, path: string) =>
  cluster.client.exec("curl", ["-sS", "--globoff", "--max-time", "3", `http://${host}${path}`]);

/** Requests from the client to `ip`, one after another until stopped: how many went, and which failed. */
function requestsTo(ip: string) {
  const failures: string[] = [];
  let sent = 0;
  let on = true;
  const loop = (async () => {
    while (on) {
      sent++;
      await get(ip, "/hostname").catch((err: Error) => failures.push(err.message));
    }
  })();
  return {
    sent: () => sent,
    async stop() {
      on = false;
      await loop;
      return { sent, failures };
    },
  };
}

let ip: string;

test("a bgp Service: the router has its /32 over every eligible node (ECMP), and the client is answered", async () => {
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(bgpService("web")));
  ip = await ingressIp("web");
  await waitForHops(ip, WORKERS, "an ECMP route over the three workers (node-0 is excluded)");
  const answered = () => get(ip, "/hostname").catch(() => undefined);
  const answer = await waitFor(`${ip} answering the client`, answered, WAIT_MS);
  assert.ok((await layer2.backendNodes(cluster)).has(answer), `${ip} answered ${answer}`);
});

test("kubectl get bgppeer: every node peers, and ESTABLISHED says so", async () => {
  const columns = async () => {
    const [header = "", row = ""] = (await cluster.kubectl(["get", "bgppeer", "router"])).trim().split("\n");
    // Read at each heading's offset: kubectl aligns columns left, and some headings have a space ("PEER ASN").
    const column = (heading: string) => row.slice(header.indexOf(heading)).split(/\s+/)[0];
    return { established: column("ESTABLISHED"), nodes: column("NODES") };
  };
  const all = String(cluster.nodes.length);
  let last: unknown;
  await waitFor("ESTABLISHED = NODES = every node", async () => {
    last = await columns();
    return JSON.stringify(last) === JSON.stringify({ established: all, nodes: all });
  }, WAIT_MS, 500).catch(async (err: unknown) => {
    const status = await cluster.kubectl(["get", "bgppeer", "router", "-o", "jsonpath={.status}"]).catch(String);
    const logs = await cluster
      .kubectl(["logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=node-lifecycle-controller", "--tail=-1"])
      .catch(String);
    const peerLines = logs.split("\n").filter((line) => /bgppeer|BGPPeer|leader|controller/i.test(line));
    throw new Error(`${(err as Error).message}: kubectl shows ${JSON.stringify(last)}, status ${status}\n` +
      peerLines.slice(-40).join("\n"));
  });
  const reports = await cluster.kubectl([
    "get",
    "nodes",
    "-o",
    "jsonpath={range .items[*]}{.metadata.annotations.local-ccm\\.io/bgp-sessions}{\"\\n\"}{end}",
  ]);
  const each = cluster.nodes.map(() => '{"router":"Established"}');
  assert.deepEqual(reports.trim().split("\n"), each, "each Node's report");
});

test("a worker labelled excluded: its path is withdrawn, the others stay, no request fails", async () => {
  const requests = requestsTo(ip);
  try {
    await cluster.kubectl(["label", "node", "node-1", `${EXCLUDE_LABEL}=true`]);
    await waitForHops(ip, ["node-2", "node-3"], "node-1's path withdrawn");
    const more = requests.sent() + 10;
    await waitFor("ten more requests", () => requests.sent() >= more, WAIT_MS, 100);
  } finally {
    await requests.stop();
    await cluster.kubectl(["label", "node", "node-1", `${EXCLUDE_LABEL}-`]);
  }
  const { sent, failures } = await requests.stop();
  assert.deepEqual(failures, [], `${failures.length} of ${sent} requests failed`);
  await waitForHops(ip, WORKERS, "node-1 back");
});

test("externalTrafficPolicy Local: only the nodes with a ready endpoint announce", async () => {
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(bgpService("local", true)));
  const local = await ingressIp("local");
  const withEndpoint = [...new Set((await layer2.backendNodes(cluster)).values())].sort();
  assert.ok(withEndpoint.length >= 1 && withEndpoint.length < WORKERS.length + 1, JSON.stringify(withEndpoint));
  await waitForHops(local, withEndpoint, "a route over the backends' nodes only");
  await waitFor(`${local} answering`, () => get(local, "/hostname").catch(() => undefined), WAIT_MS);
});

/**
 * The agents restarted one by one (rollout restart), requests flowing: none fails, and the router, polled, held every
 * worker's path throughout. With graceful restart it keeps a restarting node's path (stale) until the new agent's
 * End-of-RIB, so no path ever goes; without it, each agent withdraws at SIGTERM.
 */
async function rolloutKeepsEveryPath(t: TestContext) {
  const requests = requestsTo(ip);
  const seen = new Set<string>();
  let watching = true;
  const watch = (async () => {
    while (watching) {
      seen.add(JSON.stringify(await nextHops(ip)));
      await sleep(200); // a poll of the router, not a wait for a condition
    }
  })();
  try {
    await cluster.kubectl(["rollout", "restart", "daemonset/local-ccm", "--namespace", NAMESPACE]);
    await cluster.kubectl(["rollout", "status", "daemonset/local-ccm", "--namespace", NAMESPACE, "--timeout=300s"]);
    await waitForHops(ip, WORKERS, "every worker's path after the restart");
  } finally {
    watching = false;
    await Promise.all([requests.stop(), watch]);
  }
  const { sent, failures } = await requests.stop();
  t.diagnostic(`${sent} requests through the restart`);
  assert.deepEqual(failures, [], `${failures.length} of ${sent} requests failed; the router's paths: ${[...seen].join(" ")}`);
  assert.deepEqual([...seen], [JSON.stringify(WORKERS)], "the router kept every worker's path throughout");
}

test("graceful restart: a rollout restart of the agents fails no request; the router keeps each path", (t) =>
  rolloutKeepsEveryPath(t));

test("BFD: a worker's link cut, the router drops its path in BFD's time; back, its session and path return", async (t) => {
  await router.setBfd(true);
  const peer = routerPeer(cluster.slot);
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify({ ...peer, spec: { ...peer.spec, bfd: {} } }));
  const workerIps = WORKERS.map((name) => cluster.node(name).publicIP);
  await waitFor("the router's BFD sessions Up with every worker", async () => {
    const peers = await router.vtysh<{ peer: string; status: string }[]>("show bfd peers json");
    const up = new Set(peers.filter((p) => p.status === "up").map((p) => p.peer));
    return workerIps.every((address) => up.has(address));
  }, WAIT_MS, 500);
  await waitForHops(ip, WORKERS, "every worker's path, with BFD");
  const cutAt = Date.now();
  await cluster.setNodeLink("node-2", "down");
  try {
    await waitForHops(ip, ["node-1", "node-3"], "node-2's path dropped");
    const tookMs = Date.now() - cutAt;
    t.diagnostic(`dropped ${tookMs} ms after the cut`);
    // BFD's 0.9 s and the router's route update, on a loaded machine: below the hold time (9 s) it is BFD's doing
    assert.ok(tookMs < 8000, `${tookMs} ms: the hold time, not BFD`);
  } finally {
    await cluster.setNodeLink("node-2", "up");
  }
  // The router runs BFD for a dynamic neighbor only while its session lives: an agent that waited for BFD before
  // connecting again would never come back.
  await waitForHops(ip, WORKERS, "node-2's path back with its link");
});

// At SIGTERM the agent closes its connection without Cease, then its BFD falls silent (no AdminDown): the router
// detects BFD down once it is helping the restart, and keeps the routes. An AdminDown first, while the session lived,
// made FRR 8.4 drop them (this case failed so).
test("graceful restart with BFD: a rollout restart fails no request; the router keeps each path", async (t) => {
  await waitFor("the router's BFD sessions Up with every worker", async () => {
    const peers = await router.vtysh<{ peer: string; status: string }[]>("show bfd peers json");
    const up = new Set(peers.filter((p) => p.status === "up").map((p) => p.peer));
    return WORKERS.every((name) => up.has(cluster.node(name).publicIP));
  }, WAIT_MS, 500);
  await rolloutKeepsEveryPath(t);
});

test("the Service deleted: the route goes", async () => {
  await cluster.kubectl(["delete", "service", "web"]);
  await waitForHops(ip, [], "the route withdrawn");
});

// The local cluster's CNI gives each node a fixed range per family (layout.ts) and no IPAM writes them on the Node:
// written here once, as kube-controller-manager's --allocate-node-cidrs would (a Node's pod CIDRs are set once, never
// changed; spec.podCIDR is the first).
async function writePodCidrs(): Promise<void> {
  for (const node of cluster.nodes) {
    const spec = { podCIDR: node.podCIDR, podCIDRs: node.podCIDRs };
    await cluster.kubectl(["patch", "node", node.name, "--type", "merge", "-p", JSON.stringify({ spec })]);
  }
}

/** The router's routes to the nodes' pod CIDRs, both families: prefix → next hops as node names. */
async function podRoutes(): Promise<Record<string, string[]>> {
  const byIp = nodesByIp();
  const podCidrs = new Set(cluster.nodes.flatMap((node) => node.podCIDRs));
  const routes = (await router.routes()).filter((route) => podCidrs.has(route.prefix));
  return Object.fromEntries(routes.map((route) => [route.prefix, route.via.map((via) => byIp.get(via) ?? via)]));
}

const podRoutesOf = (names: readonly string[]) =>
  Object.fromEntries(
    cluster.nodes.filter((n) => names.includes(n.name)).flatMap((n) => n.podCIDRs.map((cidr) => [cidr, [n.name]])),
  );

async function waitForPodRoutes(names: readonly string[], what: string): Promise<void> {
  const expected = JSON.stringify(podRoutesOf(names), Object.keys(podRoutesOf(names)).sort());
  let last: Record<string, string[]> = {};
  await waitFor(what, async () => {
    last = await podRoutes();
    return JSON.stringify(last, Object.keys(last).sort()) === expected;
  }, WAIT_MS, 500).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: the router has ${JSON.stringify(last)}`);
  });
}

const ALL_NODES = () => cluster.nodes.map((node) => node.name);

/** A netexec pod on every node, the control-plane node too: its pod IPs (status.podIPs: IPv4, IPv6) by node name. */
async function podOnEveryNode(): Promise<Map<string, string[]>> {
  const labels = { app: "pod-routes" };
  const daemonSet = {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: { name: "pod-routes", namespace: "default" },
    spec: {
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          tolerations: [{ operator: "Exists" }],
          containers: [{ name: "netexec", image: AGNHOST_IMAGE, args: ["netexec", `--http-port=${NETEXEC_PORT}`] }],
        },
      },
    },
  };
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(daemonSet));
  await cluster.kubectl(["rollout", "status", "daemonset/pod-routes", "--timeout=180s"]);
  const pods = JSON.parse(await cluster.kubectl(["get", "pods", "-l", "app=pod-routes", "-o", "json"])) as {
    items: { spec: { nodeName: string }; status: { podIPs?: { ip: string }[] } }[];
  };
  return new Map(pods.items.map((pod) => [pod.spec.nodeName, (pod.status.podIPs ?? []).map(({ ip }) => ip)]));
}

/**
 * A node's own routes to `other`'s pod CIDRs (localcluster/node-network.ts): the IPv4 one via its InternalIP, the IPv6
 * one via its public IPv6 address.
 */
const routesTo = (other: ClusterNode) => [
  { cidr: other.podCIDR, via: other.ip },
  { cidr: other.podCIDRs[1] as string, via: other.publicIP6 as string },
];

test("pod CIDRs, both families: the router holds each node's; the client reaches a pod on every node, pods reach each other through it", async (t) => {
  const pods = await podOnEveryNode();
  assert.equal(pods.size, cluster.nodes.length, `a pod on every node: ${JSON.stringify([...pods])}`);
  for (const [node, ips] of pods) assert.deepEqual(ips.map(ipFamily), [4, 6], `${node}'s pod's IPs ${ips.join(", ")}`);
  const hostname = (podIp: string) => get(hostPort(podIp, NETEXEC_PORT), "/hostname");
  // Before the router has a route, the client reaches no pod: no other path leads there.
  for (const podIp of pods.get("node-1") ?? []) {
    const unreached = await hostname(podIp).then((answer) => `answered ${answer}`, () => "none");
    assert.equal(unreached, "none", `node-1's pod answered the client at ${podIp} before the router had its pod CIDR`);
  }
  await writePodCidrs();
  await waitForPodRoutes(ALL_NODES(), "a route to each node's pod CIDRs, next hop that node (node-0 too)");
  for (const [node, ips] of pods) {
    for (const podIp of ips) {
      const answered = () => hostname(podIp).catch(() => undefined);
      const answer = await waitFor(`the client answered by ${node}'s pod at ${podIp}`, answered, WAIT_MS);
      assert.match(answer, /^pod-routes-/);
    }
  }
  // Each node's own routes to the other nodes' pod CIDRs go; one route per family to the router takes their place.
  const { podNetwork, podNetwork6 } = clusterLayout(cluster.slot);
  const toRouter = [
    { cidr: podNetwork, via: router.ip },
    { cidr: podNetwork6, via: router.ip6 as string },
  ];
  const removed: { node: string; cidr: string; via: string }[] = [];
  try {
    for (const node of cluster.nodes) {
      for (const route of cluster.nodes.filter((n) => n.name !== node.name).flatMap(routesTo)) {
        await node.exec("ip", ["route", "del", route.cidr, "via", route.via]);
        removed.push({ node: node.name, ...route });
      }
      for (const { cidr, via } of toRouter) await node.exec("ip", ["route", "add", cidr, "via", via]);
    }
    const dial = (from: string, to: string) =>
      get(hostPort(from, NETEXEC_PORT), `/dial?request=hostname&protocol=http&host=${to}&port=${NETEXEC_PORT}&tries=1`);
    for (const family of [4, 6]) {
      const podIp = (node: string) => pods.get(node)?.find((ip) => ipFamily(ip) === family) ?? "";
      for (const [fromNode, toNode] of [["node-1", "node-3"], ["node-3", "node-0"]]) {
        const [from, to] = [podIp(fromNode as string), podIp(toNode as string)];
        const answer = await waitFor(`${fromNode}'s pod dialling ${toNode}'s at ${to} through the router`, async () => {
          const text = await dial(from, to).catch(() => "");
          return (JSON.parse(text || "{}") as { responses?: string[] }).responses?.[0];
        }, WAIT_MS);
        assert.match(answer, /^pod-routes-/, `${fromNode} → ${toNode} at ${to}`);
        t.diagnostic(`${fromNode}'s pod reached ${toNode}'s at ${to} (${answer}) through the router`);
      }
    }
  } finally {
    for (const node of cluster.nodes)
      for (const { cidr, via } of toRouter) await node.exec("ip", ["route", "del", cidr, "via", via]).catch(() => "");
    for (const { node, cidr, via } of removed) await cluster.node(node).exec("ip", ["route", "add", cidr, "via", via]);
  }
});

test("pod CIDRs, both families: a BGPPeer that opts out gets none; one narrowed by nodeSelector gets only its nodes'", async () => {
  const patchPeer = (spec: object) =>
    cluster.kubectl(["patch", "bgppeer", "router", "--type", "merge", "-p", JSON.stringify({ spec })]);
  await waitForPodRoutes(ALL_NODES(), "every node's pod CIDR");
  await patchPeer({ advertisePodCIDRs: false });
  await waitForPodRoutes([], "no pod CIDR at the router: its BGPPeer opts out");
  await patchPeer({ advertisePodCIDRs: null });
  await waitForPodRoutes(ALL_NODES(), "every node's pod CIDR back");
  const selected = ["node-1", "node-2"];
  for (const name of selected) await cluster.kubectl(["label", "node", name, "pod-routes-test=yes"]);
  try {
    await patchPeer({ nodeSelector: { matchLabels: { "pod-routes-test": "yes" } } });
    await waitForPodRoutes(selected, "only the selected nodes' pod CIDRs");
  } finally {
    await patchPeer({ nodeSelector: null });
    for (const name of selected) await cluster.kubectl(["label", "node", name, "pod-routes-test-"]);
  }
  await waitForPodRoutes(ALL_NODES(), "every node's pod CIDR once the selector is gone");
});
