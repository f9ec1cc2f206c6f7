// `npm run bench:bgp [-- metallb|metallb-frr|ours]`: LoadBalancer addresses over BGP side by side, MetalLB in BGP
// mode (localcluster/metallb.ts, its own chart: native, its own Go speaker; and FRR, FRR's daemons in each speaker's
// pod, FRR 8.4 from Debian: localcluster/frr-image.ts) and ours (the chart with bgp.enabled), each on a fresh local
// cluster of the same layout with the same peer: the cluster's router (localcluster/router.ts: FRR, eBGP, ECMP hashed
// by ports), through which alone the client host reaches the addresses.
//
// Layout: node-0 the control plane; node-1 runs the netexec backends and announces nothing (labelled
// node.kubernetes.io/exclude-from-external-load-balancers, which both honour); node-2 to node-4 announce. A node lost
// takes no backend with it: a failed request is the route's fault alone.
//
// Per implementation, on one cluster with the audit log on:
// - power loss of an announcing node, as the network sees it: its link down (cluster.setNodeLink), the router left to
//   notice by hold time or BFD. Timed from the cut to the router dropping the node's path (its kernel route, polled
//   every ROUTE_POLL_MS): from then on no new connection goes to the lost node. Requests from the client host, one
//   every PROBE_EVERY_MS, each bounded by 2 s, check it: those started after the drop should all succeed (before it,
//   those ECMP sends to the lost node fail). The link comes back, and the node's path with it, before the next trial. BENCH_BGP_TRIALS (10) trials per peer
//   setting, in turn over the three announcing nodes: hold time 3 s alone, then with BFD (BFD_INTERVAL_MS × 3) beside it.
//   MetalLB's native mode has no BFD; its FRR mode has (a BFDProfile).
// - agent restart (a rollout restart of the announcers' DaemonSet), between the two: requests failed of those sent
//   meanwhile.
// - BENCH_BGP_SERVICES (1,000) Services created, 10 requests in flight: until all are created (the API server alone),
//   until each has an address, and until the router has a route to each; each wait gives up after WAIT_MS and says
//   how far it got, and the run goes on.
// - a second router peered then: until it has a route to each (or how many it had after WAIT_MS).
// - at rest with the second router as second peer and those prefixes: API requests per node and the controller's in
//   BENCH_BGP_REST_SECONDS (60), from the audit log; the announcers' process RSS, and that of the processes beside it
//   in its pod (MetalLB's FRR mode: FRR's daemons, the reloader, frr-metrics).
// Figures, never assertions; the load average is printed beside them (this machine is shared: 2 cores).
import { setTimeout as delay } from "node:timers/promises";
import type { Service } from "kubernetes-types/core/v1.js";
import { netexecBackends } from "../localcluster/agnhost.ts";
import { type Cluster } from "../localcluster/cluster.ts";
import {
  bgpPoolObjects,
  installMetallb,
  METALLB_NAMESPACE,
  metallbBfdProfile,
  metallbBgpPeer,
} from "../localcluster/metallb.ts";
import { NAMESPACE } from "../localcluster/project.ts";
import { type ClusterRouter, NODE_ASN, ROUTER_ASN, routerLayout, routerPeer, startRouter } from "../localcluster/router.ts";
import { METALLB_VERSION } from "../localcluster/versions.ts";
import { waitFor } from "../localcluster/wait.ts";
import { EXCLUDE_LABEL } from "../src/loadbalancer/nodes.ts";
import { UNINITIALIZED_TAINT } from "../src/kube/nodes.ts";
import { BGP_CLASS } from "../src/pools/allocate.ts";
import { POOL_TYPE } from "../src/pools/pool.ts";
import {
  type Announcers,
  applyJson,
  atRest,
  createService,
  ingressIP,
  installOurs,
  latency,
  loadAverage,
  loadBalancer,
  memorySpan,
  METALLB_ANNOUNCERS,
  OUR_ANNOUNCERS,
  perNode,
  pickImplementations,
  type Rest,
  sideBySide,
  startClusterRetrying,
  total,
} from "./loadbalancers.ts";

const TRIALS = Number(process.env.BENCH_BGP_TRIALS ?? 10);
const SERVICES = Number(process.env.BENCH_BGP_SERVICES ?? 1000);
const REST_SECONDS = Number(process.env.BENCH_BGP_REST_SECONDS ?? 60);
const NODES = 5;
const BACKEND_NODE = "node-1";
const PROBE_EVERY_MS = 100;
const ROUTE_POLL_MS = 50;
/** Requests in flight while the Services are created. */
const IN_FLIGHT = 10;
/**
 * BFD's intervals, both ways (detection: 3 × this): at FRR's default of 300 ms, detection alone takes 0.9 s of the
 * 1 s goal, and the router's reaction the rest; 200 ms leaves it 0.4 s.
 */
const BFD_INTERVAL_MS = 200;
/** Generous: the machine runs other work too. */
const WAIT_MS = 300_000;

/** The first pool: the timed Service's address. */
const firstRange = (slot: number) => `198.19.${200 + slot}.240/28`;
/** The second: room for the many Services, in no network of the cluster. */
const manyRange = (slot: number) => `100.${64 + slot}.0.0/22`;
/** The cluster's Service CIDR holds 254 cluster IPs: a second ServiceCIDR gives the many Services theirs. */
const manyClusterIps = (slot: number) => ({
  apiVersion: "networking.k8s.io/v1",
  kind: "ServiceCIDR",
  metadata: { name: "bench-many" },
  spec: { cidrs: [`100.${96 + slot}.0.0/20`] },
});

/** What the bench needs of an implementation; everything else is the same for both. */
interface Implementation extends Announcers {
  label: string;
  /** The project image on the nodes (ours only). */
  projectImage: boolean;
  /** Installs it peering with router 0 (hold time 3 s) and serving `range`. */
  install(cluster: Cluster, range: string): Promise<void>;
  addPool(cluster: Cluster, name: string, range: string): Promise<void>;
  /** Peers with router `index` too. */
  addPeer(cluster: Cluster, index: number): Promise<void>;
  /** BFD (BFD_INTERVAL_MS × 3) towards router 0 beside the hold time; absent: the implementation has none. */
  bfd?: (cluster: Cluster) => Promise<void>;
  service(name: string): Service;
  /** The announcers' DaemonSet, namespace and name. */
  daemonSet: [string, string];
}

const PEER_ROUTER = (cluster: Cluster, index: number) => routerLayout(cluster.slot, index).ip;

/** MetalLB in native mode (its own Go speaker) or, with `frr`, in FRR mode: the same objects, and BFD. */
function metallb(frr: boolean): Implementation {
  const peer = (cluster: Cluster, index: number) => metallbPeer(cluster, index, frr ? FRR_PEER : {});
  return {
    label: `MetalLB ${METALLB_VERSION} (BGP, ${frr ? "FRR" : "native"})`,
    projectImage: false,
    async install(cluster, range) {
      // No cloud controller runs: the admin initialises the Nodes (MetalLB's speakers do not tolerate the taint).
      for (const node of cluster.nodes) await cluster.kubectl(["taint", "node", node.name, `${UNINITIALIZED_TAINT}-`]);
      await installMetallb(cluster, [...bgpPoolObjects("first", [range]), peer(cluster, 0)], { frr });
    },
    async addPool(cluster, name, range) {
      await applyJson(cluster, { apiVersion: "v1", kind: "List", items: bgpPoolObjects(name, [range]) });
    },
    addPeer: async (cluster, index) => void (await applyJson(cluster, peer(cluster, index))),
    ...(frr ? { bfd: metallbBfd } : {}),
    service: (name) => loadBalancer(name),
    daemonSet: [METALLB_NAMESPACE, "metallb-speaker"],
    ...METALLB_ANNOUNCERS,
  };
}

/**
 * FRR mode's peers: FRR waits its connect-retry time, 120 s unless MetalLB's connectTime says, before it tries a peer
 * again, and a node whose link came back stayed apart that long (the native speaker tries again within seconds).
 */
const FRR_PEER = { connectTime: "5s" };

function metallbPeer(cluster: Cluster, index: number, more: { connectTime?: string; bfdProfile?: string }) {
  const spec = { myASN: NODE_ASN, peerASN: ROUTER_ASN, peerAddress: PEER_ROUTER(cluster, index), holdTime: "3s" };
  return metallbBgpPeer(index ? `router-${index}` : "router", { ...spec, ...more });
}

/** A BFDProfile of BFD_INTERVAL_MS × 3 and router 0's peer naming it. */
async function metallbBfd(cluster: Cluster): Promise<void> {
  const intervals = { receiveInterval: BFD_INTERVAL_MS, transmitInterval: BFD_INTERVAL_MS, detectMultiplier: 3 };
  const profile = metallbBfdProfile("bench", intervals);
  const peer = metallbPeer(cluster, 0, { ...FRR_PEER, bfdProfile: "bench" });
  await applyJson(cluster, { apiVersion: "v1", kind: "List", items: [profile, peer] });
}

const ourPeer = (cluster: Cluster, index: number, spec: object = { holdTime: "3s" }) => {
  const peer = routerPeer(cluster.slot, index);
  return { ...peer, spec: { ...peer.spec, ...spec } };
};

const ours: Implementation = {
  label: "local-ccm (BGP)",
  projectImage: true,
  async install(cluster, range) {
    await installOurs(cluster, { "bgp.enabled": "true" });
    await this.addPool(cluster, "first", range);
    await applyJson(cluster, ourPeer(cluster, 0));
  },
  async addPool(cluster, name, range) {
    await applyJson(cluster, { ...POOL_TYPE, metadata: { name }, spec: { addresses: [range] } });
  },
  addPeer: async (cluster, index) => void (await applyJson(cluster, ourPeer(cluster, index))),
  // BFD added alone leaves the BGP sessions be (a session restarted at once can lose its BFD at FRR 8.4, which
  // sometimes deregisters the old neighbor's after registering the new one's)
  bfd: async (cluster) => {
    const bfd = { minRx: `${BFD_INTERVAL_MS}ms`, minTx: `${BFD_INTERVAL_MS}ms`, multiplier: 3 };
    await applyJson(cluster, ourPeer(cluster, 0, { holdTime: "3s", bfd }));
  },
  service: (name) => loadBalancer(name, { loadBalancerClass: BGP_CLASS }),
  daemonSet: [NAMESPACE, "local-ccm"],
  ...OUR_ANNOUNCERS,
};

const IMPLEMENTATIONS: Record<string, Implementation> = { metallb: metallb(false), "metallb-frr": metallb(true), ours };

/** The next hops the router has for `ip`, sorted. */
async function hops(router: ClusterRouter, ip: string): Promise<string[]> {
  return (await router.routes()).find((route) => route.prefix === `${ip}/32`)?.via ?? [];
}

/** Once the router has a path to `ip` over each of `announcers` (a session may be coming up): its next hops. */
async function everyPath(cluster: Cluster, router: ClusterRouter, ip: string, announcers: string[]) {
  const wanted = announcers.map((name) => cluster.node(name).publicIP);
  return waitFor("a path over every announcing node", async () => {
    const via = await hops(router, ip);
    return wanted.every((hop) => via.includes(hop)) && via;
  }, WAIT_MS, 250);
}

interface Probe {
  start: number;
  ok: boolean;
  reason?: string;
}

/**
 * Requests to `ip` from the client host, one every PROBE_EVERY_MS, each bounded by 2 s, until stopped; a failure
 * keeps curl's reason.
 */
function probe(cluster: Cluster, ip: string) {
  const probes: Promise<Probe>[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const start = performance.now();
      probes.push(
        cluster.client
          .exec("curl", ["--silent", "--show-error", "--fail", "--max-time", "2", `http://${ip}/hostname`])
          .then(
            () => ({ start, ok: true }),
            (err: Error) => ({ start, ok: false, reason: err.message.split(": ").at(-1)?.trim() }),
          ),
      );
      await delay(PROBE_EVERY_MS);
    }
  })();
  return {
    async stop(): Promise<Probe[]> {
      running = false;
      await loop;
      return Promise.all(probes);
    },
  };
}

interface Failover {
  /** Cut → the router dropped the node's path, seconds, one per trial: from then on no new connection goes there. */
  withdrawn: number[];
  /** Requests started once the path was dropped: how many, and how many of them failed (each should succeed). */
  after: { sent: number; failed: number };
  load: string;
}

/** TRIALS power losses, in turn over `announcers`; each node's link back and its path too before the next. */
async function failovers(
  cluster: Cluster,
  router: ClusterRouter,
  impl: Implementation,
  setting: string,
  ip: string,
  announcers: string[],
): Promise<Failover> {
  const baseline = await everyPath(cluster, router, ip, announcers);
  const withdrawn: number[] = [];
  const after = { sent: 0, failed: 0 };
  for (let trial = 0; trial < TRIALS; trial++) {
    const victim = announcers[trial % announcers.length] as string;
    const victimIp = cluster.node(victim).publicIP;
    const requests = probe(cluster, ip);
    await delay(500); // requests before the cut: the path works
    const cut = performance.now();
    await cluster.setNodeLink(victim, "down");
    let results: Probe[];
    let gone: number;
    try {
      gone = await waitFor(`${victim}'s path dropped`, async () => {
        const now = performance.now();
        return !(await hops(router, ip)).includes(victimIp) && now;
      }, WAIT_MS, ROUTE_POLL_MS);
      withdrawn.push((gone - cut) / 1000);
      await delay(3000); // requests after the drop, and the earlier ones end (2 s each at most)
    } finally {
      results = await requests.stop();
      await cluster.setNodeLink(victim, "up");
    }
    const late = results.filter((r) => r.start >= gone);
    const lateFailures = late.filter((r) => !r.ok);
    after.sent += late.length;
    after.failed += lateFailures.length;
    // A request before the drop fails when ECMP sent it to the lost node (its SYN retried there too, 1 s later).
    const failed = results.filter((r) => !r.ok).map((r) => ((r.start - cut) / 1000).toFixed(1));
    const reasons = [...new Set(lateFailures.map((r) => r.reason))].join("; ");
    console.error(
      `${impl.label}, ${setting}: ${victim} cut: path dropped after ${withdrawn.at(-1)!.toFixed(2)} s; ` +
        `${failed.length} of ${results.length} requests failed, started at ${failed.join(" ") || "-"} s` +
        (reasons ? ` (after the drop: ${reasons})` : ""),
    );
    await waitFor(`${victim}'s path back`, async () =>
      JSON.stringify(await hops(router, ip)) === JSON.stringify(baseline), WAIT_MS, 250);
  }
  return { withdrawn: withdrawn.sort((a, b) => a - b), after, load: loadAverage() };
}

/** The announcers' DaemonSet restarted: requests failed of those sent, until every path is back. */
async function restart(cluster: Cluster, router: ClusterRouter, impl: Implementation, ip: string, announcers: string[]) {
  const baseline = await everyPath(cluster, router, ip, announcers);
  const requests = probe(cluster, ip);
  const [namespace, name] = impl.daemonSet;
  let results: Probe[];
  try {
    await cluster.kubectl(["rollout", "restart", `daemonset/${name}`, "-n", namespace]);
    await cluster.kubectl(["rollout", "status", `daemonset/${name}`, "-n", namespace, "--timeout=300s"]);
    await waitFor("every path back", async () =>
      JSON.stringify(await hops(router, ip)) === JSON.stringify(baseline), WAIT_MS, 250);
  } finally {
    results = await requests.stop();
  }
  const failures = results.filter((r) => !r.ok);
  const reasons = [...new Set(failures.map((r) => r.reason))].join("; ");
  console.error(`${impl.label}: restarted: ${failures.length} of ${results.length} requests failed ${reasons}`);
  return { failed: failures.length, sent: results.length };
}

const secondsSince = (start: number) => `${((performance.now() - start) / 1000).toFixed(1)} s`;

/**
 * Seconds since `start` until `count()` reaches `of`, or how far it got in WAIT_MS: an implementation that does not
 * get there is a figure of the table, not the end of the run (the others still run).
 */
async function until(what: string, of: number, count: () => Promise<number>, start = performance.now()): Promise<string> {
  let reached = 0;
  try {
    await waitFor(what, async () => (reached = await count()) >= of, WAIT_MS, 500);
    return secondsSince(start);
  } catch {
    console.error(`timed out waiting for ${what}: ${reached} of ${of}`);
    return `not in ${WAIT_MS / 1000} s (${reached} of ${of})`;
  }
}

/** SERVICES Services created, IN_FLIGHT at a time: until each has an address, and until each is routed. */
async function many(cluster: Cluster, router: ClusterRouter, impl: Implementation) {
  const names = Array.from({ length: SERVICES }, (_, i) => `many-${String(i).padStart(4, "0")}`);
  const start = performance.now();
  const queue = [...names];
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      for (let name = queue.shift(); name; name = queue.shift()) await createService(cluster, impl.service(name));
    }),
  );
  const created = secondsSince(start);
  let addresses: string[] = [];
  const addressed = await until(`${SERVICES} Services with an address`, SERVICES, async () => {
    const list = await cluster.admin.request<{ items: Service[] }>({
      method: "GET",
      path: "/api/v1/namespaces/default/services",
    });
    addresses = list.items
      .filter((s) => s.metadata?.name?.startsWith("many-"))
      .map((s) => s.status?.loadBalancer?.ingress?.[0]?.ip)
      .filter((ip) => ip !== undefined);
    return addresses.length;
  }, start);
  const routed = await until(`a route to each of ${SERVICES} addresses`, SERVICES, async () => {
    const routes = new Set((await router.routes()).map((route) => route.prefix));
    return addresses.filter((ip) => routes.has(`${ip}/32`)).length;
  }, start);
  console.error(`${impl.label}: ${SERVICES} Services: created after ${created}, addresses after ${addressed}, routed after ${routed}`);
  return { created, addressed, routed, load: loadAverage() };
}

interface Figures {
  hold: Failover;
  bfd?: Failover;
  restart: { failed: number; sent: number };
  many: { created: string; addressed: string; routed: string; load: string };
  /** The second router's routes to the many Services before the rest: when all came, or how many. */
  secondRouter: string;
  rest: Rest;
}

async function run(impl: Implementation): Promise<Figures> {
  const cluster = await startClusterRetrying(impl.label, { nodes: NODES, audit: true, projectImage: impl.projectImage });
  try {
    const router = await startRouter(cluster);
    await applyJson(cluster, netexecBackends(1, { "kubernetes.io/hostname": BACKEND_NODE }));
    await cluster.kubectl(["label", "node", BACKEND_NODE, `${EXCLUDE_LABEL}=true`]);
    await impl.install(cluster, firstRange(cluster.slot));
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=300s"]);
    await createService(cluster, impl.service("timed"));
    const ip = await waitFor("the timed Service's address", () => ingressIP(cluster, "timed"), WAIT_MS, 250);
    const announcers = cluster.nodes.map((node) => node.name).filter((name) => name >= "node-2");
    const announcerIps = announcers.map((name) => cluster.node(name).publicIP);
    console.error(`${impl.label}: ${ip} via ${(await everyPath(cluster, router, ip, announcers)).join(", ")}`);
    const hold = await failovers(cluster, router, impl, "hold time 3 s", ip, announcers);
    // Before BFD, so that the restart row compares like with like: MetalLB's native mode has no BFD.
    const restarted = await restart(cluster, router, impl, ip, announcers);
    let bfd: Failover | undefined;
    if (impl.bfd) {
      await router.setBfd(true, BFD_INTERVAL_MS);
      await impl.bfd(cluster);
      await waitFor("BFD up with every announcing node", async () => {
        const peers = await router.vtysh<Record<string, unknown>[]>("show bfd peers json");
        const up = peers.filter((peer) => peer.status === "up").map((peer) => peer.peer);
        return announcerIps.every((hop) => up.includes(hop));
      }, WAIT_MS, 500);
      bfd = await failovers(cluster, router, impl, "BFD", ip, announcers);
    }
    await applyJson(cluster, manyClusterIps(cluster.slot));
    await impl.addPool(cluster, "many", manyRange(cluster.slot));
    const created = await many(cluster, router, impl);
    const second = await startRouter(cluster, { index: 1 });
    await impl.addPeer(cluster, 1);
    const secondRouter = await until(`router 1 with a route to each of ${SERVICES} addresses`, SERVICES,
      async () => (await second.routes()).length);
    console.error(`${impl.label}: ${REST_SECONDS} s at rest, 2 peers, ${SERVICES + 1} prefixes`);
    const rest = await atRest(cluster, impl, REST_SECONDS);
    return { hold, ...(bfd ? { bfd } : {}), restart: restarted, many: created, secondRouter, rest };
  } finally {
    await cluster.stop();
  }
}

async function main(): Promise<void> {
  const runs: [Implementation, Figures][] = [];
  for (const impl of pickImplementations(IMPLEMENTATIONS)) runs.push([impl, await run(impl)]);
  console.log(`\nBGP announcement, ${NODES} nodes (node-0 control plane, ${BACKEND_NODE} the backends, 3 announcing), ` +
    `FRR as the router, ${REST_SECONDS} s at rest\n`);
  const row = sideBySide(runs);
  const noBfd = "no BFD in this mode";
  const lateFailed = (f?: Failover) => (f ? `${f.after.failed} of ${f.after.sent}` : noBfd);
  row(`power loss, hold time 3 s → the router drops the path, p50 / p99 (${TRIALS})`, (f) => latency(f.hold.withdrawn),
    "goal: p99 ≤ 4 s");
  row("… requests started after the drop that failed", (f) => lateFailed(f.hold), "goal: 0");
  row(`power loss, hold time 3 s and BFD ${BFD_INTERVAL_MS} ms × 3 → the router drops the path, p50 / p99 (${TRIALS})`, (f) =>
    f.bfd ? latency(f.bfd.withdrawn) : noBfd, "goal: p99 ≤ 1 s");
  row("… requests started after the drop that failed", (f) => lateFailed(f.bfd), "goal: 0");
  row("load average then", (f) => [f.hold.load, f.bfd?.load].filter(Boolean).join("; "));
  row("announcers restarted (rollout) → requests failed", (f) => `${f.restart.failed} of ${f.restart.sent}`, "goal: 0");
  row(`${SERVICES} Services, ${IN_FLIGHT} creates in flight → all created / addresses / all routed`, (f) =>
    `${f.many.created} / ${f.many.addressed} / ${f.many.routed} (load ${f.many.load})`);
  row(`a second router peered then → all ${SERVICES} routes there`, (f) => f.secondRouter);
  row(`announcer requests per node in ${REST_SECONDS} s at rest, 2 peers, ${SERVICES + 1} prefixes`, (f, impl) =>
    perNode(f.rest.byUser.get(impl.users.announcer), NODES));
  row(`controller requests in ${REST_SECONDS} s at rest`, (f, impl) => total(f.rest.byUser.get(impl.users.controller)));
  row("announcer process RSS (anonymous)", (f) => memorySpan(f.rest), "budget: ≤ 32 MiB");
  row("… the processes beside it in its pod, summed", (f) =>
    f.rest.besides.some((m) => m.rss > 0) ? memorySpan(f.rest, f.rest.besides) : "none");
  row("announcer pods' containers restarted during the run", (f) => f.rest.restarts, "goal: 0");
  row("load average at rest", (f) => f.rest.load);
}

await main();
