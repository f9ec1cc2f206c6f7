// The peer suite: upstream's load-balancer e2e tests (test/e2e/network/loadbalancer.go of the pinned Kubernetes
// module, label Feature:LoadBalancer) against our load balancers, the way cloud-provider-kind validates itself. A
// local cluster (one control-plane node, two workers, kube-proxy in either mode, DNS) runs the chart with class-less
// Services claimed by one mode: node-address (the nodes' own addresses), l2 (pool addresses announced by the
// agents, from a LoadBalancerIPPool inside the nodes' public /24) or bgp (pool addresses outside every network of
// the slot, announced by every node to the cluster's router, through which alone the client reaches them);
// e2e.test runs from the client host (e2e-suite.ts).
//
//   npm run e2e:upstream [-- [--mode node-address|l2|bgp] [--proxy-mode iptables|nftables] [<ginkgo focus>]]
//
// Every spec must pass, except those in the mode's NOT_APPLICABLE list: each says why it cannot apply to that
// mode's addresses. docs/development.md's "Upstream load-balancer tests" lists the same entries.
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { PROXY_MODES, type ProxyMode } from "../../localcluster/kube-proxy.ts";
import { helmInstallArgs, initialised, listNodes, publicPool } from "../../localcluster/project.ts";
import { routedPool, routerPeer, startRouter } from "../../localcluster/router.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { runE2ESuite, type SpecResult } from "./e2e-suite.ts";

export const LABEL_FILTER = "Feature: containsAny LoadBalancer";

/** Which of our load balancers claims the suite's Services (they have no loadBalancerClass). */
export type PeerMode = "node-address" | "l2" | "bgp";
export const PEER_MODES: readonly PeerMode[] = ["node-address", "l2", "bgp"];

/** The chart's values for each mode: one mode claims class-less Services, never two. */
export const PEER_VALUES: Record<PeerMode, Record<string, string>> = {
  "node-address": { "loadBalancer.claimClassless": "true" },
  l2: { "loadBalancer.l2.enabled": "true", "loadBalancer.l2.pools.claimClassless": "true" },
  bgp: { "bgp.enabled": "true", "bgp.claimClassless": "true" },
};

/** What each mode needs in the cluster before the suite: its Services find a pool (and a router) from the start. */
const PEER_OBJECTS: Record<PeerMode, (slot: number) => object[]> = {
  "node-address": () => [],
  l2: (slot) => [publicPool(slot)],
  bgp: (slot) => [routedPool(slot), routerPeer(slot)],
};

export interface NotApplicable {
  /** A literal part of the spec's name that names it alone (ginkgo skips it). */
  spec: string;
  reason: string;
}

/**
 * The upstream specs that cannot apply to a node-address load balancer, and why. Most come down to one thing: with
 * externalTrafficPolicy Local, a node's address serves only the endpoints on that node, so which address a client
 * holds decides whether it is served; a cloud load balancer's one address follows the endpoints by health-checking
 * every node's healthCheckNodePort. Our own end-to-end cases prove what Local does promise here: only nodes with a
 * ready endpoint are listed, and the backend sees the client's own address.
 */
const NODE_ADDRESS_NOT_APPLICABLE: NotApplicable[] = [
  {
    spec: "ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work for type=LoadBalancer",
    reason:
      "it reads the first ingress address before its only endpoint is ready and keeps it; that is the endpoint's " +
      "node only by chance (Local: the other node's address refuses), where a cloud load balancer's address does " +
      "not depend on where endpoints run. (Where it is, the backend sees the client host's own address, but the " +
      "spec counts any client in the first worker's /16 as rewritten, and the local cluster's client host is in " +
      "198.19.0.0/16 like the nodes.)",
  },
  {
    spec: "should only target nodes with endpoints",
    reason:
      "it moves the only endpoint from node to node while sending to the first ingress address throughout; with " +
      "Local that address serves only while its own node holds the endpoint (the ingress list follows the " +
      "endpoint, but the spec never reads it again)",
  },
  {
    spec: "should not have connectivity disruption during rolling update with externalTrafficPolicy=Local",
    reason:
      "it sends to the first ingress address throughout while that node's only endpoint is replaced; a cloud " +
      "load balancer stops sending there by health-checking, a client of node addresses does not (the controller " +
      "drops the node from the ingress list, which this client never reads again)",
  },
  {
    spec: "should be able to switch session affinity for LoadBalancer service with Local traffic policy",
    reason:
      "with affinity off it waits for answers from several of its three pods at the first ingress address; with " +
      "Local a node's address reaches only that node's own pods, so it passes only when the scheduler put two of " +
      "them on the first address's node (it did in the nftables run, and in the iptables run it waited on one pod " +
      "until stopped)",
  },
];

/**
 * The upstream specs that cannot apply to a layer-2 pool address, and why. One address for the Service, announced by
 * one node at a time and, with externalTrafficPolicy Local, by a node with a ready endpoint: it follows the endpoints
 * as a cloud load balancer's address does.
 */
const L2_NOT_APPLICABLE: NotApplicable[] = [
  {
    spec: "ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work for type=LoadBalancer",
    reason:
      "the backend does see the client host's own address (198.19.138.2 in the nftables run), but the spec counts " +
      "any client in the first node's InternalIP /16 as rewritten; a client of a layer-2 address shares the " +
      "announcer's segment, the nodes' public /24, which on the local cluster lies in 198.19.0.0/16 with the " +
      "InternalIPs",
  },
  {
    spec: "should be able to switch session affinity for LoadBalancer service with Local traffic policy",
    reason:
      "with affinity off it waits for answers from several of its three pods at the address; with Local, traffic " +
      "enters at the one announcing node and reaches only that node's pods (as in MetalLB's layer-2 mode), where a " +
      "cloud load balancer spreads over every node with an endpoint. In the nftables run the announcer node-1 held " +
      "one pod and node-2 two: it waited on that one pod; in the iptables run it passed after 248 s only because " +
      "the announcer's (one pod) Lease lapsed under the machine's load and the node with two took over",
  },
];

/**
 * The upstream specs that cannot apply to a pool address announced over BGP, and why: session affinity. Every node
 * with an endpoint announces the address, the router spreads connections over them by a hash of addresses and ports
 * (as data-centre routers do; localcluster/router.ts), so one client's connections enter at different nodes, and
 * kube-proxy keeps ClientIP affinity on each node apart. A router hashing by addresses alone keeps a client on one
 * node, and its affinity with it. And the source-address check, which counts the local cluster's client host as
 * rewritten (as in the other modes).
 */
const AFFINITY_OVER_ECMP =
  "one client's connections enter at different nodes (the router's ECMP hashes ports too), and each node's " +
  "kube-proxy keeps ClientIP affinity apart";
const BGP_NOT_APPLICABLE: NotApplicable[] = [
  {
    spec: "ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work for type=LoadBalancer",
    reason:
      "the backend does see the client host's own address (198.19.136.2 in the iptables run, 2026-11-28), but the " +
      "spec counts any client in the first node's InternalIP /16 as rewritten, and the local cluster's client host " +
      "lies in 198.19.0.0/16 with the nodes",
  },
  {
    spec: "should have session affinity work for LoadBalancer service with Cluster traffic policy",
    reason: `${AFFINITY_OVER_ECMP}: two pods answered one client throughout (iptables run, 2026-11-28)`,
  },
  {
    spec: "should have session affinity work for LoadBalancer service with Local traffic policy",
    reason: `${AFFINITY_OVER_ECMP}: the pods of both nodes with an endpoint answered one client (iptables run)`,
  },
  {
    spec: "should be able to switch session affinity for LoadBalancer service with Cluster traffic policy",
    reason: `${AFFINITY_OVER_ECMP}, once the spec turns affinity on (as in the spec above)`,
  },
  {
    spec: "should be able to switch session affinity for LoadBalancer service with Local traffic policy",
    reason: `${AFFINITY_OVER_ECMP}, once the spec turns affinity on (as in the spec above)`,
  },
];

/** Each mode's specs that cannot apply (ginkgo skips them). */
export const NOT_APPLICABLE: Record<PeerMode, NotApplicable[]> = {
  "node-address": NODE_ADDRESS_NOT_APPLICABLE,
  l2: L2_NOT_APPLICABLE,
  bgp: BGP_NOT_APPLICABLE,
};

/**
 * A few specs per mode for `npm test`, a couple of minutes together: the cleanup finalizer's lifecycle, and one that
 * reaches the address with Local: session affinity (endpoints exist before the Service asks for an address), or over
 * BGP, where affinity cannot apply (NOT_APPLICABLE.bgp), every node with an endpoint reached through the router.
 */
const FINALIZER = "should handle load balancer cleanup finalizer for service";
const AFFINITY_LOCAL = "should have session affinity work for LoadBalancer service with Local traffic policy";
export const FAST_FOCUS: Record<PeerMode, string> = {
  "node-address": `${FINALIZER}|${AFFINITY_LOCAL}`,
  l2: `${FINALIZER}|${AFFINITY_LOCAL}`,
  bgp: `${FINALIZER}|should target all nodes with endpoints`,
};

/** Nodes: the control-plane node is excluded from load balancers (kubeadm's label); the specs need two workers. */
const NODES = 3;
/** The chart's pods start and the agents initialise every Node. */
const INITIALISED_TIMEOUT_MS = 180_000;

/** A cluster with the chart installed for the peer suite in `mode` and every Node initialised by its agent. */
export async function startPeerCluster(
  mode: PeerMode,
  proxyMode: ProxyMode,
  log?: (line: string) => void,
): Promise<Cluster> {
  // DNS: the specs reach Services by name from pods.
  const cluster = await startCluster({ nodes: NODES, proxyMode, dns: true, log });
  try {
    await cluster.helm(helmInstallArgs(PEER_VALUES[mode]));
    for (const object of PEER_OBJECTS[mode](cluster.slot))
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(object));
    if (mode === "bgp") await startRouter(cluster); // removed with the cluster (router.ts)
    await waitFor(
      "every Node initialised by the agent",
      async () => (await listNodes(cluster)).every(initialised),
      INITIALISED_TIMEOUT_MS,
      500,
    );
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

/** Runs the load-balancer specs (optionally narrowed by `focus`) but those NOT_APPLICABLE to `mode`. */
export function runPeerSuite(
  cluster: Cluster,
  mode: PeerMode,
  options: { focus?: string; reportDir: string; echo?: boolean },
): Promise<SpecResult[]> {
  const skip = NOT_APPLICABLE[mode].map((n) => n.spec);
  return runE2ESuite(cluster, { ...options, labelFilter: LABEL_FILTER, skip });
}

const ADDRESSES: Record<PeerMode, string> = {
  "node-address": "node addresses",
  l2: "a layer-2 pool address",
  bgp: "a pool address announced over BGP",
};

/** A mode's NOT_APPLICABLE as docs/development.md's table (`npm run readme`). */
export function notApplicableMarkdown(mode: PeerMode): string {
  const rows = NOT_APPLICABLE[mode].map(({ spec, reason }) => `| ${spec} | ${reason} |`);
  if (rows.length === 0) return "None: every spec runs.";
  return [`| upstream spec (skipped) | why it cannot apply to ${ADDRESSES[mode]} |`, "|---|---|", ...rows].join("\n");
}

/** One line per spec: state, seconds, name, and a failure's message. */
export function formatResults(results: SpecResult[]): string {
  return results
    .map((r) => {
      const line = `${r.state.padEnd(11)} ${String(r.seconds).padStart(4)}s  ${r.name}`;
      return r.failure ? `${line}\n    ${r.failure}` : line;
    })
    .join("\n");
}

const USAGE =
  "usage: npm run e2e:upstream -- [--mode node-address|l2|bgp] [--proxy-mode iptables|nftables] [<ginkgo focus>]";

async function main(): Promise<number> {
  let values: { mode?: string; "proxy-mode"?: string };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      options: { mode: { type: "string" }, "proxy-mode": { type: "string" } },
      allowPositionals: true,
    }));
  } catch (err) {
    console.error(`e2e:upstream: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const mode = (values.mode ?? "node-address") as PeerMode;
  const proxyMode = (values["proxy-mode"] ?? "iptables") as ProxyMode;
  const problem = !PEER_MODES.includes(mode)
    ? `unknown mode ${mode}`
    : !PROXY_MODES.includes(proxyMode)
      ? `unknown proxy mode ${proxyMode}`
      : positionals.length > 1
        ? "one focus at most"
        : undefined;
  if (problem) {
    console.error(`e2e:upstream: ${problem}\n${USAGE}`);
    return 2;
  }
  const reportDir = path.join(os.tmpdir(), `local-ccm-e2e-upstream-${mode}-${proxyMode}-${Date.now()}`);
  const cluster = await startPeerCluster(mode, proxyMode, (line) => console.error(`e2e:upstream: ${line}`));
  try {
    console.error(`e2e:upstream: running e2e.test from the client host; reports in ${reportDir}`);
    const results = await runPeerSuite(cluster, mode, { focus: positionals[0], reportDir, echo: true });
    console.log(`\n${mode}, kube-proxy ${proxyMode}:\n${formatResults(results)}`);
    for (const { spec, reason } of NOT_APPLICABLE[mode]) console.log(`n/a     ${spec}\n    ${reason}`);
    // No result at all (a BeforeSuite that failed) is a failure too.
    return results.length === 0 || results.some((r) => r.state !== "passed") ? 1 : 0;
  } finally {
    await cluster.stop();
  }
}

if (import.meta.main) process.exit(await main());
