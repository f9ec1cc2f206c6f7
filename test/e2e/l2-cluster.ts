// The layer-2 e2e tests' cluster and what they watch from its client host: four real kubelets with kube-proxy in one
// mode (localcluster/), the chart installed with loadBalancer.l2.enabled, the public pool and agnhost netexec
// backends; a Service of class local-ccm.io/l2 and its announcer as the Service names it; an ARP prober on the
// client's link (arp-prober.ts) and what it saw; requests from the client through a fresh ARP resolution each.
import { type ChildProcess, spawn } from "node:child_process";
import type { Service } from "kubernetes-types/core/v1.js";
import { NETEXEC_PORT, netexecBackends } from "../../localcluster/agnhost.ts";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import type { ProxyMode } from "../../localcluster/kube-proxy.ts";
import * as layer2 from "../../localcluster/layer2.ts";
import { helmInstallArgs, initialised, listNodes, publicPool } from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION } from "../../src/pools/announcement.ts";
import { sleep } from "../../src/time/backoff.ts";
import type { ProbeLine } from "./arp-prober.ts";

/** node-0 is the control-plane node (kubeadm's exclusion label): these announce. */
export const WORKERS = ["node-1", "node-2", "node-3"];
/** Generous: the machine runs other tests too. */
export const WAIT_MS = 120_000;
const PROBE_INTERVAL_MS = 200;

/** A LoadBalancer Service of class local-ccm.io/l2 in front of the netexec backends. */
export const l2Service = (name: string, local = false) => netexecService(name, L2_CLASS, local);

/** A LoadBalancer Service of `loadBalancerClass` in front of the netexec backends (test/e2e/bgp.test.ts too). */
export function netexecService(name: string, loadBalancerClass: string, local = false) {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name, namespace: "default" },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass,
      externalTrafficPolicy: local ? "Local" : "Cluster",
      selector: { app: "netexec" },
      ports: [{ port: 80, targetPort: NETEXEC_PORT }],
    },
  };
}

/** A 4-node cluster in `mode` with the chart (L2 on), every Node initialised, the public pool and two backends. */
export const startL2Cluster = (mode: ProxyMode) =>
  startPoolCluster(mode, { "loadBalancer.l2.enabled": "true" }, (slot) => [publicPool(slot)]);

/**
 * A 4-node cluster in `mode` (and `dualStack`, ClusterOptions') with the chart installed with `values`, every Node
 * initialised, `objects(slot)` applied (pools, peers) and two netexec backends.
 */
export async function startPoolCluster(
  mode: ProxyMode,
  values: Record<string, string>,
  objects: (slot: number) => object[],
  { dualStack = false }: { dualStack?: boolean } = {},
): Promise<Cluster> {
  const cluster = await startCluster({ nodes: 4, proxyMode: mode, dualStack });
  try {
    await cluster.helm(helmInstallArgs(values));
    await waitFor(
      "every Node initialised by its agent",
      async () => (await listNodes(cluster)).filter(initialised).length === cluster.nodes.length,
      WAIT_MS,
      500,
    );
    for (const object of [...objects(cluster.slot), netexecBackends(2)])
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(object));
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=180s"]);
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

export async function getService(cluster: Cluster, name: string, namespace = "default"): Promise<Service> {
  return JSON.parse(await cluster.kubectl(["get", "service", name, "--namespace", namespace, "-o", "json"])) as Service;
}

export const announcerOf = (service: Service) => service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];

/** Until the Service has a pool address and an announcer (other than `not`): both. */
export function waitForAnnouncer(cluster: Cluster, name: string, not?: string, namespace = "default") {
  return waitFor(
    `${namespace}/${name}'s pool address and an announcer${not ? ` other than ${not}` : ""}`,
    async () => {
      const service = await getService(cluster, name, namespace);
      const [ip, announcer] = [service.status?.loadBalancer?.ingress?.[0]?.ip, announcerOf(service)];
      return ip !== undefined && announcer !== undefined && announcer !== not && { ip, announcer };
    },
    WAIT_MS,
    100,
  );
}

/** Until the client, asking afresh, resolves `ip` to `node`'s MAC. */
export async function waitForClientAt(cluster: Cluster, ip: string, node: string): Promise<void> {
  const mac = await layer2.nodeMac(cluster, node);
  await waitFor(
    `the client resolving ${ip} to ${node}`,
    async () => {
      await cluster.client.exec("ip", ["neigh", "flush", "to", ip, "dev", "eth0"]);
      await layer2.getFromClient(cluster, ip, "/hostname").catch(() => "");
      return (await layer2.clientMac(cluster, ip)) === mac;
    },
    WAIT_MS,
    250,
  );
}

/** The MACs that answered the prober or announced the address to it, in the order they first did. */
export const answeringMacs = (lines: readonly ProbeLine[]) => [
  ...new Set(lines.flatMap((line) => (line.kind === "request" ? [] : [line.mac]))),
];

/** What a prober saw: requests answered by more than one MAC, and MACs that answered again after another did. */
export function probeFindings(lines: readonly ProbeLine[]): { dualAnswers: string[]; returns: string[] } {
  const byRequest = new Map<number, Set<string>>();
  const sequence: string[] = [];
  for (const line of lines) {
    if (line.kind === "request") continue;
    if (line.kind === "reply") byRequest.set(line.request, (byRequest.get(line.request) ?? new Set()).add(line.mac));
    if (sequence.at(-1) !== line.mac) sequence.push(line.mac);
  }
  const dualAnswers = [...byRequest]
    .filter(([, macs]) => macs.size > 1)
    .map(([request, macs]) => `request ${request}: ${[...macs].join(", ")}`);
  const returns = sequence.filter((mac, i) => sequence.indexOf(mac) < i);
  return { dualAnswers, returns };
}

/** The prober in the client host's namespace: lines() it printed so far; stop() ends it and gives every line. */
export function startProber(cluster: Cluster, ip: string): { lines(): ProbeLine[]; stop(): Promise<ProbeLine[]> } {
  const prober: ChildProcess = spawn(
    "ip",
    ["netns", "exec", clusterLayout(cluster.slot).clientNetns, process.execPath,
      new URL("arp-prober.ts", import.meta.url).pathname, "eth0", ip, String(PROBE_INTERVAL_MS)],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let output = "";
  prober.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = new Promise((resolve) => prober.once("exit", resolve));
  // Whole lines only: the last may be cut mid-write.
  const lines = () => output.split("\n").slice(0, -1).filter(Boolean).map((line) => JSON.parse(line) as ProbeLine);
  return {
    lines,
    async stop() {
      prober.kill("SIGTERM");
      await exited;
      return lines();
    },
  };
}

/** One HTTP GET from the client: when it started and ended (Date.now()), and its error if it failed. */
export interface ClientRequest {
  startedMs: number;
  endedMs: number;
  error?: string;
}

/**
 * The client's neighbour entry for `ip` flushed, then a GET of /hostname (so each request resolves the address
 * afresh), one a second until stopped: every request, in order.
 */
export function startRequests(cluster: Cluster, ip: string): { stop(): Promise<ClientRequest[]> } {
  const requests: ClientRequest[] = [];
  let on = true;
  const loop = (async () => {
    while (on) {
      const startedMs = Date.now();
      const error = await cluster.client
        .exec("ip", ["neigh", "flush", "to", ip, "dev", "eth0"])
        .then(() => layer2.getFromClient(cluster, ip, "/hostname"))
        .then(
          () => undefined,
          (err: unknown) => (err as Error).message.split("\n")[0],
        );
      requests.push({ startedMs, endedMs: Date.now(), ...(error !== undefined && { error }) });
      await sleep(Math.max(0, 1000 - (Date.now() - startedMs)));
    }
  })();
  return {
    async stop() {
      on = false;
      await loop;
      return requests;
    },
  };
}

/**
 * The longest time the client went unanswered: from the end of the last answered request before a run of failed
 * ones to the end of the first answered one after it (0 when none failed; to the last request when none came after).
 */
export function longestUnanswered(requests: readonly ClientRequest[]): number {
  let longest = 0;
  let answeredMs: number | undefined;
  let failing = false;
  for (const request of requests) {
    if (request.error !== undefined) {
      failing = true;
      longest = Math.max(longest, request.endedMs - (answeredMs ?? request.startedMs));
    } else {
      if (failing) longest = Math.max(longest, request.endedMs - (answeredMs ?? request.startedMs));
      [answeredMs, failing] = [request.endedMs, false];
    }
  }
  return longest;
}
