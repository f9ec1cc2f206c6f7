// `npm run bench:l2 [-- metallb|ours]`: layer-2 announcement of LoadBalancer addresses side by side, MetalLB in L2
// mode (localcluster/metallb.ts: the anchor, built from its pinned module, its own chart) and ours (the chart with
// loadBalancer.l2.enabled: the pool controller assigns each Service's address to one agent, which answers ARP for
// it while its announcer Lease is live; src/pools/announcement.ts), each on fresh local clusters of the same layout:
// node-0 the control-plane node, workers beside it, agnhost netexec backends on the workers, a pool at .240-.250
// of the nodes' public /24 (as test/e2e/metallb.e2e.ts), the same Services, the same kills.
//
// Per implementation:
// - Service created → its address answers the client host (curl /hostname succeeds): BENCH_L2_SERVICES (10)
//   Services, one at a time, on a 4-node cluster started with the audit log on;
// - API requests in a minute at rest, by ServiceAccount and node (audit log), with those 10 Services and then with
//   BENCH_L2_REST_SERVICES (200; the 190 more from a second pool at .20-.239); the announcers' process RSS;
// - announcer killed (cluster.killNode: power loss) → the client reaches the address again: BENCH_L2_TRIALS (10)
//   kills. A killed node never comes back, so the trials run on fresh clusters of BENCH_L2_FAILOVER_NODES (6:
//   node-0 and five workers), each with the 10 Services; each kill powers off the node announcing the first
//   Service, as long as a worker survives it (four per cluster).
// "Answers" is timed by a curl from the client host started every PROBE_EVERY_MS, each bounded by 2 s: the first to
// succeed ends the wait (a backend on a killed node still takes some connections until its endpoint goes). Figures,
// never assertions; the load average is printed beside them (this machine is shared: 2 cores).
import { setTimeout as delay } from "node:timers/promises";
import type { Service } from "kubernetes-types/core/v1.js";
import { netexecBackends } from "../localcluster/agnhost.ts";
import { type Cluster } from "../localcluster/cluster.ts";
import { clusterLayout } from "../localcluster/layout.ts";
import { installMetallb, l2PoolObjects, METALLB_NAMESPACE } from "../localcluster/metallb.ts";
import { METALLB_VERSION } from "../localcluster/versions.ts";
import { waitFor } from "../localcluster/wait.ts";
import { UNINITIALIZED_TAINT } from "../src/kube/nodes.ts";
import { L2_CLASS } from "../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION } from "../src/pools/announcement.ts";
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
  mib,
  OUR_ANNOUNCERS,
  perNode,
  pickImplementations,
  type Rest,
  sideBySide,
  SKIPPED_REST,
  startClusterRetrying,
  total,
} from "./loadbalancers.ts";

const SERVICES = Number(process.env.BENCH_L2_SERVICES ?? 10);
const REST_SERVICES = Number(process.env.BENCH_L2_REST_SERVICES ?? 200);
const TRIALS = Number(process.env.BENCH_L2_TRIALS ?? 10);
const FAILOVER_NODES = Number(process.env.BENCH_L2_FAILOVER_NODES ?? 6);
const REST_SECONDS = Number(process.env.BENCH_L2_REST_SECONDS ?? 60);
/**
 * Both phases at once, on two clusters: half the time, more load (printed beside the figures). With other clusters
 * on the machine, ten nodes of ours can exhaust the inotify instances (128 per user here: kubelet then exits,
 * "inotify_init: too many open files").
 */
const PARALLEL = process.env.BENCH_L2_PARALLEL === "1";
/** Which phases run: "rest" (created → answers, at rest), "failover" (the kills); default both. */
const PHASES = (process.env.BENCH_L2_PHASES ?? "rest,failover").split(",");
const NODES = 4;
const PROBE_EVERY_MS = 100;
/** Generous: the machine runs other work too. */
const WAIT_MS = 180_000;

/** An address range of the slot's public /24 (nodes are .10 and up, the client .2, the gateway .1). */
const publicRange = (cluster: Cluster, first: number, last: number) => {
  const prefix = clusterLayout(cluster.slot).publicGateway.replace(/\.1$/, "");
  return `${prefix}.${first}-${prefix}.${last}`;
};
const poolRange = (cluster: Cluster) => publicRange(cluster, 240, 250);
/** The second pool of the rest phase: 200 Services need more than .240-.250. */
const restRange = (cluster: Cluster) => publicRange(cluster, 20, 239);

const serviceName = (i: number) => `l2-${String(i).padStart(3, "0")}`;

/** What the bench needs of an implementation; everything else is the same for both. */
interface Implementation extends Announcers {
  label: string;
  /** The project image on the nodes (ours only). */
  projectImage: boolean;
  /** Installs it with a pool of `range` and waits until it serves. */
  install(cluster: Cluster, range: string): Promise<void>;
  addPool(cluster: Cluster, name: string, range: string): Promise<void>;
  /** A LoadBalancer Service in "default" for the netexec backends that it serves. */
  service(name: string): Service;
  /** The node announcing the Service's address, as the implementation records it; never one of `dead`. */
  announcer(cluster: Cluster, name: string, dead: ReadonlySet<string>): Promise<string | undefined>;
}


const metallb: Implementation = {
  label: `MetalLB ${METALLB_VERSION} (L2)`,
  projectImage: false,
  async install(cluster, range) {
    // No cloud controller runs: the admin initialises the Nodes (MetalLB's speakers do not tolerate the taint).
    for (const node of cluster.nodes) await cluster.kubectl(["taint", "node", node.name, `${UNINITIALIZED_TAINT}-`]);
    await installMetallb(cluster, l2PoolObjects("l2", [range]));
  },
  async addPool(cluster, name, range) {
    await applyJson(cluster, { apiVersion: "v1", kind: "List", items: l2PoolObjects(name, [range]) });
  },
  service: (name) => loadBalancer(name),
  async announcer(cluster, name, dead) {
    // The ServiceL2Status a powered-off node's speaker wrote stays until its pod is deleted: skip those.
    const list = await cluster.admin.request<{ items: { status?: { node?: string; serviceName?: string } }[] }>({
      method: "GET",
      path: `/apis/metallb.io/v1beta1/namespaces/${METALLB_NAMESPACE}/servicel2statuses`,
    });
    return list.items
      .map(({ status }) => status)
      .find((status) => status?.serviceName === name && status.node && !dead.has(status.node))?.node;
  },
  ...METALLB_ANNOUNCERS,
};

const ours: Implementation = {
  label: "local-ccm (L2)",
  projectImage: true,
  async install(cluster, range) {
    await installOurs(cluster, { "loadBalancer.l2.enabled": "true" });
    await this.addPool(cluster, "l2", range);
  },
  async addPool(cluster, name, range) {
    await applyJson(cluster, { ...POOL_TYPE, metadata: { name }, spec: { addresses: [range] } });
  },
  service: (name) => loadBalancer(name, { loadBalancerClass: L2_CLASS }),
  async announcer(cluster, name, dead) {
    const service = await cluster.admin.request<Service>({
      method: "GET",
      path: `/api/v1/namespaces/default/services/${name}`,
    });
    const node = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
    return node && !dead.has(node) ? node : undefined;
  },
  ...OUR_ANNOUNCERS,
};

const IMPLEMENTATIONS: Record<string, Implementation> = { metallb, ours };


/**
 * When (performance.now()) `ip` first answered /hostname from the client host: a curl every PROBE_EVERY_MS, each
 * bounded, the first success ends it. Waits for the probes still running before it returns.
 */
async function firstAnswer(cluster: Cluster, ip: string): Promise<number> {
  const deadline = performance.now() + WAIT_MS;
  const running = new Set<Promise<unknown>>();
  let answered: number | undefined;
  while (answered === undefined && performance.now() < deadline) {
    const probe = cluster.client
      .exec("curl", ["--silent", "--fail", "--max-time", "2", `http://${ip}/hostname`])
      .then(() => {
        answered ??= performance.now();
      })
      .catch(() => {});
    running.add(probe);
    void probe.finally(() => running.delete(probe));
    await delay(PROBE_EVERY_MS);
  }
  await Promise.allSettled([...running]);
  if (answered === undefined) throw new Error(`${ip} never answered the client host in ${WAIT_MS} ms`);
  return answered;
}

/** Creates the Service and times it to its address answering the client; its address. */
async function createTimed(cluster: Cluster, impl: Implementation, name: string) {
  const sent = performance.now();
  await createService(cluster, impl.service(name));
  const ip = await waitFor(`${name}'s ingress address`, () => ingressIP(cluster, name), WAIT_MS, PROBE_EVERY_MS);
  const seconds = ((await firstAnswer(cluster, ip)) - sent) / 1000;
  return { ip, seconds };
}

/** A cluster of `nodes` with the backends and the implementation installed; stopped if that fails. */
async function clusterWith(impl: Implementation, nodes: number, audit: boolean): Promise<Cluster> {
  const cluster = await startClusterRetrying(impl.label, { nodes, audit, projectImage: impl.projectImage });
  try {
    await applyJson(cluster, netexecBackends(nodes - 1));
    await impl.install(cluster, poolRange(cluster));
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=300s"]);
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}


interface Figures {
  created: number[];
  createdLoad: string;
  rest10: Rest;
  rest200: Rest;
  /** Announcer killed → the first Service answers again, seconds, one per kill. */
  failover: number[];
  /** The same for every Service the killed node announced. */
  failoverAll: number[];
  failoverLoad: string;
  failoverClusters: number;
}

/** What a rest phase found, as it ends (a later failure loses no figure). */
function logRest(impl: Implementation, services: number, rest: Rest): void {
  const rss = rest.memory.map((m) => `${mib(m.rss)}/${mib(m.anon)}`).join(", ");
  console.error(
    `${impl.label}, ${services} Services at rest: announcers ${perNode(rest.byUser.get(impl.users.announcer), NODES)}; ` +
      `controller ${total(rest.byUser.get(impl.users.controller))}; RSS/anonymous MiB ${rss}; load ${rest.load}`,
  );
}

/** Create phase and both rest phases on one 4-node cluster with the audit log. */
async function createAndRest(impl: Implementation): Promise<Pick<Figures, "created" | "createdLoad" | "rest10" | "rest200">> {
  const cluster = await clusterWith(impl, NODES, true);
  try {
    const created: number[] = [];
    for (let i = 0; i < SERVICES; i++) {
      const { ip, seconds } = await createTimed(cluster, impl, serviceName(i));
      console.error(`${impl.label}: ${serviceName(i)} ${ip} answered after ${seconds.toFixed(2)} s`);
      created.push(seconds);
    }
    const createdLoad = loadAverage();
    console.error(`${impl.label}: ${REST_SECONDS} s at rest with ${SERVICES} Services`);
    const rest10 = await atRest(cluster, impl, REST_SECONDS);
    logRest(impl, SERVICES, rest10);
    await impl.addPool(cluster, "rest", restRange(cluster));
    for (let i = SERVICES; i < REST_SERVICES; i++) await createService(cluster, impl.service(serviceName(i)));
    await waitFor(`${REST_SERVICES} Services with an address and an announcer`, async () => {
      const list = await cluster.admin.request<{ items: Service[] }>({
        method: "GET",
        path: "/api/v1/namespaces/default/services",
      });
      const served = list.items.filter((s) => s.status?.loadBalancer?.ingress?.length);
      return served.length >= REST_SERVICES;
    }, WAIT_MS, 1000);
    // Every address answers before the minute at rest starts.
    const ips = await Promise.all(
      Array.from({ length: REST_SERVICES }, (_, i) => ingressIP(cluster, serviceName(i)) as Promise<string>),
    );
    for (const ip of ips) await firstAnswer(cluster, ip);
    console.error(`${impl.label}: ${REST_SECONDS} s at rest with ${REST_SERVICES} Services`);
    const rest200 = await atRest(cluster, impl, REST_SECONDS);
    logRest(impl, REST_SERVICES, rest200);
    return { created: created.sort((a, b) => a - b), createdLoad, rest10, rest200 };
  } finally {
    await cluster.stop();
  }
}

/** TRIALS kills over fresh clusters of FAILOVER_NODES, each with SERVICES Services. */
async function failovers(impl: Implementation): Promise<Pick<Figures, "failover" | "failoverAll" | "failoverLoad" | "failoverClusters">> {
  const failover: number[] = [];
  const failoverAll: number[] = [];
  let failoverClusters = 0;
  let failoverLoad = "";
  while (failover.length < TRIALS) {
    const cluster = await clusterWith(impl, FAILOVER_NODES, false);
    failoverClusters++;
    try {
      const ips = new Map<string, string>();
      for (let i = 0; i < SERVICES; i++) ips.set(serviceName(i), (await createTimed(cluster, impl, serviceName(i))).ip);
      const workers = cluster.nodes.filter((node) => !node.controlPlane).map((node) => node.name);
      const killed = new Set<string>();
      // A worker must survive each kill to take the addresses over.
      while (killed.size < workers.length - 1 && failover.length < TRIALS) {
        const first = serviceName(0);
        const victim = await waitFor(`${first}'s announcer`, () => impl.announcer(cluster, first, killed), WAIT_MS, 250);
        const announced: string[] = [];
        for (const name of ips.keys()) if ((await impl.announcer(cluster, name, killed)) === victim) announced.push(name);
        const at = performance.now();
        await cluster.killNode(victim);
        killed.add(victim);
        const times = await Promise.all(
          announced.map(async (name) => ((await firstAnswer(cluster, ips.get(name) as string)) - at) / 1000),
        );
        failoverLoad = loadAverage();
        failover.push(times[announced.indexOf(first)] as number);
        failoverAll.push(...times);
        console.error(
          `${impl.label}: killed ${victim} (announced ${announced.length}): ${first} again after ` +
            `${(times[announced.indexOf(first)] as number).toFixed(2)} s, the last after ${Math.max(...times).toFixed(2)} s`,
        );
      }
    } finally {
      await cluster.stop();
    }
  }
  return {
    failover: failover.sort((a, b) => a - b),
    failoverAll: failoverAll.sort((a, b) => a - b),
    failoverLoad,
    failoverClusters,
  };
}


/** Both results; when one fails, its error once the other has ended too (and stopped its cluster). */
async function bothSettled<A, B>(a: Promise<A>, b: Promise<B>): Promise<[A, B]> {
  const [first, second] = await Promise.allSettled([a, b]);
  if (first.status === "rejected") throw first.reason;
  if (second.status === "rejected") throw second.reason;
  return [first.value, second.value];
}

const skipRest = async () => ({ created: [], createdLoad: "not run", rest10: SKIPPED_REST, rest200: SKIPPED_REST });
const skipFailover = async () => ({ failover: [], failoverAll: [], failoverLoad: "not run", failoverClusters: 0 });

async function main(): Promise<void> {
  const runs: [Implementation, Figures][] = [];
  for (const impl of pickImplementations(IMPLEMENTATIONS)) {
    const rest = () => (PHASES.includes("rest") ? createAndRest(impl) : skipRest());
    const failover = () => (PHASES.includes("failover") ? failovers(impl) : skipFailover());
    const [created, failed] = PARALLEL ? await bothSettled(rest(), failover()) : [await rest(), await failover()];
    runs.push([impl, { ...created, ...failed }]);
  }
  const phases = PARALLEL ? "both phases at once" : "one phase after the other";
  console.log(`\nL2 announcement, ${NODES} nodes (node-0 control plane), ${REST_SECONDS} s at rest, ${phases}\n`);
  const row = sideBySide(runs);
  row(`Service created → answers the client, p50 / p99 (${SERVICES})`, (f) => latency(f.created));
  row("load average then", (f) => f.createdLoad);
  row(
    `announcer killed → the first Service answers again, p50 / p99 (${TRIALS} kills)`,
    (f) => latency(f.failover),
    "budget: p99 ≤ 5 s",
  );
  row("… every address the killed node announced, p50 / p99", (f) => `${latency(f.failoverAll)} (${f.failoverAll.length})`);
  row("load average then; fresh clusters for the kills", (f) => `${f.failoverLoad}; ${f.failoverClusters}`);
  for (const [label, rest, services] of [["10", "rest10", SERVICES], ["200", "rest200", REST_SERVICES]] as const) {
    row(
      `announcer requests per node in ${REST_SECONDS} s at rest, ${services} Services`,
      (f, impl) => perNode(f[rest].byUser.get(impl.users.announcer), NODES),
      label === "200" ? "must not grow with Services" : "",
    );
    row(`controller requests in ${REST_SECONDS} s at rest, ${services} Services`, (f, impl) =>
      total(f[rest].byUser.get(impl.users.controller)),
    );
    row(`announcer process RSS (anonymous), ${services} Services`, (f) => memorySpan(f[rest]));
    row(`load average at rest, ${services} Services`, (f) => f[rest].load);
  }
}

await main();
