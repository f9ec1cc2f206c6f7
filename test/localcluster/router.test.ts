// The local cluster's router (localcluster/router.ts) against our own BGP speaker: two nodes announce one address
// with themselves as next hop (the speaker as a process in each node's namespace, test/bgp/speaker-fixture.ts, each
// node serving the address on its loopback); the router learns both, installs an ECMP route, and the client host,
// whose default route goes through the router, reaches the address on both nodes; before the route came, the router
// redirected nobody. One node's speaker stopped: the router withdraws that path
// when the hold time passes, and the client is still answered. Stopped, the router leaves nothing.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { onExit } from "../../localcluster/cleanup.ts";
import { type Cluster, type ClusterNode, startCluster } from "../../localcluster/cluster.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import { leftoversOf } from "../../localcluster/slots.ts";
import { run } from "../../localcluster/exec.ts";
import { type ClusterRouter, NODE_ASN, routerLayout, startRouter } from "../../localcluster/router.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { SessionOptions } from "../../src/agent/announcer/bgp/session.ts";

const SPEAKER = path.join(import.meta.dirname, "../bgp/speaker-fixture.ts");
const WAIT_MS = 120_000;
const HOLD_TIME = 3;
const PORT = 8080;

let cluster: Cluster;
let router: ClusterRouter;
let stopped = false;
const children: ChildProcess[] = [];
before(async () => {
  cluster = await startCluster({ nodes: 3, projectImage: false });
  router = await startRouter(cluster);
});
after(async () => {
  for (const child of children) child.kill("SIGKILL");
  if (stopped) return;
  await router?.stop();
  await cluster?.stop();
});

/** A process in `node`'s network namespace that dies with this test. */
function inNode(node: ClusterNode, command: string, args: string[]): ChildProcess {
  const child = spawn("nsenter", [`--net=${node.netns}`, "setpriv", "--pdeathsig", "KILL", "--", command, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  child.once("exit", onExit(() => child.kill("SIGKILL")));
  return child;
}

/** Our speaker on `node`, announcing `address`/32 with the node's public address as next hop. */
function announce(node: ClusterNode, address: string): ChildProcess {
  const options: SessionOptions = {
    config: { myAsn: NODE_ASN, peerAsn: router.asn, routerId: node.publicIP, holdTime: HOLD_TIME, families: [4] },
    peerAddress: router.ip,
    localAddress: node.publicIP,
  };
  const routes = [{ prefix: `${address}/32`, nextHop: node.publicIP }];
  return inNode(node, process.execPath, [SPEAKER, JSON.stringify({ options, routes })]);
}

/** `address` on `node`'s loopback, answering HTTP with the node's name. */
async function serve(node: ClusterNode, address: string): Promise<void> {
  await run("ip", ["-n", path.basename(node.netns), "address", "add", `${address}/32`, "dev", "lo"]);
  const server = `require("node:http").createServer((_, res) => res.end(${JSON.stringify(node.name)}))` +
    `.listen(${PORT}, ${JSON.stringify(address)})`;
  inNode(node, process.execPath, ["-e", server]);
}

/** The router's IPv4 counters (/proc/net/snmp in its namespace): datagrams forwarded, ICMP redirects sent. */
async function routerCounters(): Promise<{ forwarded: number; redirects: number }> {
  const snmp = await run("ip", ["netns", "exec", routerLayout(cluster.slot).netns, "cat", "/proc/net/snmp"]);
  const counter = (protocol: string, name: string) => {
    const [names = "", values = ""] = snmp.split("\n").filter((line) => line.startsWith(`${protocol}:`));
    return Number(values.split(/\s+/)[names.split(/\s+/).indexOf(name)]);
  };
  return { forwarded: counter("Ip", "ForwDatagrams"), redirects: counter("Icmp", "OutRedirects") };
}

/** Which nodes answered `count` requests from the client host, each from a fresh source port. */
async function answering(address: string, count: number): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  for (let i = 0; i < count; i++) {
    const name = await cluster.client
      .exec("curl", ["-sS", "--max-time", "2", `http://${address}:${PORT}/`])
      .catch((err: Error) => `failed: ${err.message}`); // named in the assertion's diff
    seen.set(name, (seen.get(name) ?? 0) + 1);
  }
  return seen;
}

test("two nodes announce one address: the router holds an ECMP route, the client reaches both", async (t) => {
  const address = `198.19.${200 + cluster.slot}.240`; // in no network of the slot: reached only by the route
  const [a, b] = cluster.nodes.slice(1) as [ClusterNode, ClusterNode];
  for (const node of [a, b]) await serve(node, address);
  // Not announced yet: the client's request follows the router's default route (to the slot's blackhole), and the
  // router redirects nobody there: a client that took the redirect kept sending there for minutes after the route
  // came (upstream's e2e.test did).
  await cluster.client.exec("curl", ["-sS", "--max-time", "1", `http://${address}:${PORT}/`]).catch(() => "");
  const counters = await routerCounters();
  assert.ok(counters.forwarded >= 1, "the request went through the router");
  assert.equal(counters.redirects, 0, "ICMP redirects the router sent");
  const speakers = [announce(a, address), announce(b, address)];

  const both = [a.publicIP, b.publicIP].sort();
  await waitFor("the router's ECMP route over both nodes", async () => {
    const route = (await router.routes()).find((r) => r.prefix === `${address}/32`);
    return JSON.stringify(route?.via) === JSON.stringify(both);
  }, WAIT_MS, 250);
  const neighbors = await router.neighbors();
  t.diagnostic(`neighbors: ${[...neighbors].map(([ip, state]) => `${ip} ${state}`).join(", ")}`);
  assert.equal(neighbors.get(a.publicIP), "Established");
  assert.equal(neighbors.get(b.publicIP), "Established");
  const spread = await answering(address, 40);
  t.diagnostic(`40 requests: ${[...spread].map(([name, n]) => `${name} ${n}`).join(", ")}`);
  assert.deepEqual([...spread.keys()].sort(), [a.name, b.name].sort(), "both nodes answer through the router");

  // A node's speaker silent (stopped: no FIN, no keepalive, as after a power loss): the router withdraws its path
  // once the hold time passes.
  speakers[0]?.kill("SIGSTOP");
  const stoppedAt = Date.now();
  await waitFor("the route over the other node alone", async () => {
    const route = (await router.routes()).find((r) => r.prefix === `${address}/32`);
    return JSON.stringify(route?.via) === JSON.stringify([b.publicIP]);
  }, WAIT_MS, 100);
  const took = Date.now() - stoppedAt;
  t.diagnostic(`withdrawn ${took} ms after the stop (hold time ${HOLD_TIME} s)`);
  assert.ok(took >= (HOLD_TIME - 1) * 1000, `withdrawn after ${took} ms: not by the hold timer`);
  assert.deepEqual(await answering(address, 10), new Map([[b.name, 10]]));
});

test("stopped, the router leaves no namespace and no process; the cluster's own teardown would find none", async () => {
  stopped = true;
  await router.stop();
  const namespaces = await run("ip", ["netns", "list"]);
  assert.ok(!namespaces.includes(routerLayout(cluster.slot).netns), namespaces);
  const { publicGateway } = clusterLayout(cluster.slot);
  assert.match(await cluster.client.exec("ip", ["route", "show", "default"]), new RegExp(`via ${publicGateway} `));
  const processes = await run("pgrep", ["-af", path.join(cluster.dir, "router")]).catch(() => "");
  assert.equal(processes, "");
  await cluster.stop();
  assert.deepEqual(leftoversOf(cluster.slot, cluster.dir), []);
});
