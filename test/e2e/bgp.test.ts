// BGP pool addresses as users run them: `helm install` of charts/local-ccm with bgp.enabled on four real kubelets
// with kube-proxy (iptables mode), node-0 the control-plane node (kubeadm's exclusion label: not eligible), the
// cluster's FRR router (localcluster/router.ts, dynamic neighbors, ECMP, the client host's default route), a BGPPeer
// for it and a pool outside every network of the slot, so that only the router's routes reach it. From the client:
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
// - the Service deleted: the route goes.
import assert from "node:assert/strict";
import { after, before, type TestContext, test } from "node:test";
import type { Cluster } from "../../localcluster/cluster.ts";
import * as layer2 from "../../localcluster/layer2.ts";
import { NAMESPACE } from "../../localcluster/project.ts";
import { type ClusterRouter, routedPool, routerPeer, startRouter } from "../../localcluster/router.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { EXCLUDE_LABEL } from "../../src/loadbalancer/nodes.ts";
import { BGP_CLASS } from "../../src/pools/allocate.ts";
import { sleep } from "../../src/time/backoff.ts";
import { netexecService, startPoolCluster } from "./l2-cluster.ts";

const WAIT_MS = 180_000;
const WORKERS = ["node-1", "node-2", "node-3"];
const INGRESS_IP = "{.status.loadBalancer.ingress[0].ip}";
let cluster: Cluster;
let router: ClusterRouter;
before(async () => {
  cluster = await startPoolCluster("iptables", { "bgp.enabled": "true" }, (slot) => [routerPeer(slot), routedPool(slot)]);
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

/** The router's next hops for `ip`/32, as node names, sorted; [] without a route. */
async function nextHops(ip: string): Promise<string[]> {
  const route = (await router.routes()).find((r) => r.prefix === `${ip}/32`);
  const byIp = new Map(cluster.nodes.map((node) => [node.publicIP, node.name]));
  return (route?.via ?? []).map((via) => byIp.get(via) ?? via).sort();
}

const waitForHops = (ip: string, expected: string[], what: string) =>
  waitFor(what, async () => JSON.stringify(await nextHops(ip)) === JSON.stringify(expected), WAIT_MS, 250).catch(
    async (err: unknown) => {
      throw new Error(`${(err as Error).message}: the router has ${JSON.stringify(await nextHops(ip))}`);
    },
  );

const get = (ip: string, path: string) =>
  cluster.client.exec("curl", ["-sS", "--max-time", "3", `http://${ip}${path}`]);

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
