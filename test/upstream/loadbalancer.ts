// The peer suite: upstream's load-balancer e2e tests (test/e2e/network/loadbalancer.go of the pinned Kubernetes
// module, label Feature:LoadBalancer) against node-address load balancers, the way cloud-provider-kind validates
// itself. A local cluster (one control-plane node, two workers, kube-proxy in either mode, DNS) runs the chart as
// shipped with class-less Services claimed; e2e.test runs from the client host (e2e-suite.ts).
//
//   npm run e2e:upstream [-- [--proxy-mode iptables|nftables] [<ginkgo focus>]]
//
// Every spec must pass, except those in NOT_APPLICABLE: each says why it cannot apply to a load balancer whose
// addresses are the nodes' own. The README's "Upstream load-balancer tests" lists the same entries.
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { PROXY_MODES, type ProxyMode } from "../../localcluster/kube-proxy.ts";
import { helmInstallArgs, initialised, listNodes } from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { runE2ESuite, type SpecResult } from "./e2e-suite.ts";

export const LABEL_FILTER = "Feature: containsAny LoadBalancer";

/** The chart's values for the suite: its Services have no loadBalancerClass. */
export const PEER_VALUES = { "loadBalancer.claimClassless": "true" };

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
export const NOT_APPLICABLE: NotApplicable[] = [
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

/** A few specs for `npm test`, a couple of minutes together: the cleanup finalizer's lifecycle, and session
 * affinity through node addresses with Local (endpoints exist before the Service asks for an address). */
export const FAST_FOCUS = [
  "should handle load balancer cleanup finalizer for service",
  "should have session affinity work for LoadBalancer service with Local traffic policy",
].join("|");

/** Nodes: the control-plane node is excluded from load balancers (kubeadm's label); the specs need two workers. */
const NODES = 3;
/** The chart's pods start and the agents initialise every Node. */
const INITIALISED_TIMEOUT_MS = 180_000;

/** A cluster with the chart installed for the peer suite and every Node initialised by its agent. */
export async function startPeerCluster(proxyMode: ProxyMode, log?: (line: string) => void): Promise<Cluster> {
  // DNS: the specs reach Services by name from pods.
  const cluster = await startCluster({ nodes: NODES, proxyMode, dns: true, log });
  try {
    await cluster.helm(helmInstallArgs(PEER_VALUES));
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

/** Runs the load-balancer specs (optionally narrowed by `focus`) but those NOT_APPLICABLE. */
export function runPeerSuite(
  cluster: Cluster,
  options: { focus?: string; reportDir: string; echo?: boolean },
): Promise<SpecResult[]> {
  return runE2ESuite(cluster, { ...options, labelFilter: LABEL_FILTER, skip: NOT_APPLICABLE.map((n) => n.spec) });
}

/** NOT_APPLICABLE as the README's table (`npm run readme`). */
export function notApplicableMarkdown(): string {
  const rows = NOT_APPLICABLE.map(({ spec, reason }) => `| ${spec} | ${reason} |`);
  return ["| upstream spec (skipped) | why it cannot apply to node addresses |", "|---|---|", ...rows].join("\n");
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

const USAGE = "usage: npm run e2e:upstream -- [--proxy-mode iptables|nftables] [<ginkgo focus>]";

async function main(): Promise<number> {
  let values: { "proxy-mode"?: string };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({ options: { "proxy-mode": { type: "string" } }, allowPositionals: true }));
  } catch (err) {
    console.error(`e2e:upstream: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const proxyMode = (values["proxy-mode"] ?? "iptables") as ProxyMode;
  if (!PROXY_MODES.includes(proxyMode) || positionals.length > 1) {
    const problem = positionals.length > 1 ? "one focus at most" : `unknown proxy mode ${proxyMode}`;
    console.error(`e2e:upstream: ${problem}\n${USAGE}`);
    return 2;
  }
  const reportDir = path.join(os.tmpdir(), `local-ccm-e2e-upstream-${proxyMode}-${Date.now()}`);
  const cluster = await startPeerCluster(proxyMode, (line) => console.error(`e2e:upstream: ${line}`));
  try {
    console.error(`e2e:upstream: running e2e.test from the client host; reports in ${reportDir}`);
    const results = await runPeerSuite(cluster, { focus: positionals[0], reportDir, echo: true });
    console.log(`\nkube-proxy ${proxyMode}:\n${formatResults(results)}`);
    for (const { spec, reason } of NOT_APPLICABLE) console.log(`n/a     ${spec}\n    ${reason}`);
    return results.some((r) => r.state !== "passed") ? 1 : 0;
  } finally {
    await cluster.stop();
  }
}

if (import.meta.main) process.exit(await main());
