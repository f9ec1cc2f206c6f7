// `npm run bench:lb`: the service controller (node-address LoadBalancers) at scale. The bundled
// node-lifecycle-controller as it ships (the Deployment's Node flags, default --controllers, the chart's RBAC),
// with leader election, in a network namespace, against a real control plane holding 5,000 kubelet-like Nodes,
// 2,000 Services (200 LoadBalancer of class local-ccm.io/node-address, half externalTrafficPolicy Local) and
// 20,000 EndpointSlices (endpoints with their nodeName, nine in ten ready). Two runs side by side: without the
// service controller (--controllers=*,-service) and as shipped. Each: memory and CPU over an idle minute and the
// API requests in it (audit log). As shipped also: start → every ingress written; a Service's creation → its
// ingress as a watcher sees it (BENCH_NEW_SERVICES, made at a steady rate); a node's NotReady → it gone from
// every ingress that held it (BENCH_NOT_READY nodes, one at a time, each Ready again before the next). Budgets
// (issue 16): RSS ≤ 150 MiB, created → ingress p99 ≤ 1 s, NotReady → removed p99 ≤ 2 s, no periodic LIST, no
// writes at rest. This machine is shared: the load average is printed beside the figures.
//
// Then a third run in the same world, the controller as the chart runs it with loadBalancer.l2.enabled (the
// service-l2-pools controller beside the rest, bench/l2-world.ts): a LoadBalancerIPPool, an announcer Lease per
// node of which BENCH_RENEWING are renewed every second (renewing all would overload this machine's apiserver), and
// Services of class local-ccm.io/l2, first BENCH_L2_FEWER of them, then BENCH_L2_SERVICES: at each count an idle
// minute (its API requests must not depend on the count); at the second also start → every Service allocated and
// announced by a live node, and a Lease that stops renewing → its Services on other nodes (BENCH_LEASE_STOPS of
// them, one at a time). BENCH_RUNS picks runs: off, shipped, l2 (default all three).
//
// A bench of its own rather than a phase of bench:nlc, whose node-lifecycle and CSR runs already take ~10 min
// and whose figures docs/performance.md keeps: 27,000 more objects in its world would change what those measure.
import { loadavg } from "node:os";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { Namespace, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { bundleProgram } from "../localcluster/bundle.ts";
import { scrapeMetrics } from "../localcluster/metrics.ts";
import { waitFor } from "../localcluster/wait.ts";
import type { KubeClient } from "../src/kube/client.ts";
import { Informer, objectKey } from "../src/kube/informer.ts";
import { Resource } from "../src/kube/resource.ts";
import { SERVICE_NAME_LABEL } from "../src/loadbalancer/endpoints.ts";
import { ANNOUNCER_ANNOTATION } from "../src/pools/announcement.ts";
import { L2_CLASS } from "../src/pools/allocate.ts";
import { NODE_ADDRESS_CLASS } from "../src/service/decide.ts";
import { ENDPOINT_SLICE_RESOURCE, SERVICE_RESOURCE } from "../src/kube/resource.ts";
import { shippedCommand } from "../test/deploy/shipped.ts";
import { auditedRequests, ControllerProcess, setReady, startWorld, type World } from "../test/lifecycle/world.ts";
import { type L2World, POOL_CIDR, startL2World } from "./l2-world.ts";
import { kubeletNode, nodeAddress, nodeName } from "./nodes.ts";
import { cpuSeconds, type ProcessMemory, processMemory } from "./proc.ts";
import { quantile } from "./quantile.ts";

const NODES = Number(process.env.BENCH_NODES ?? 5000);
const SERVICES = Number(process.env.BENCH_SERVICES ?? 2000);
/** One Service in LB_EVERY is a LoadBalancer of ours: 200 of 2,000. */
const LB_EVERY = 10;
const SLICES_PER_SERVICE = 10;
const ENDPOINTS_PER_SLICE = 5;
const NAMESPACES = 20;
const NEW_SERVICES = Number(process.env.BENCH_NEW_SERVICES ?? 100);
const NEW_PER_SECOND = 5;
const NOT_READY = Number(process.env.BENCH_NOT_READY ?? 20);
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60);
const RUNS = new Set((process.env.BENCH_RUNS ?? "off,shipped,l2").split(","));
const L2_SERVICES = Number(process.env.BENCH_L2_SERVICES ?? 2000);
const L2_FEWER = Number(process.env.BENCH_L2_FEWER ?? 200);
/** Announcer Leases renewed every second: nodes 0 to RENEWING - 1. */
const RENEWING = Number(process.env.BENCH_RENEWING ?? 100);
const LEASE_STOPS = Number(process.env.BENCH_LEASE_STOPS ?? 10);
/** Creates in flight at once: the apiserver's pace, not one request's round trip. */
const CREATES_IN_FLIGHT = 32;
const MiB = 1024 * 1024;
const NODE_ARGS =
  process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? shippedCommand("node-lifecycle-controller").nodeArgs;

const namespaceOf = (i: number) => `bench-${i % NAMESPACES}`;
const serviceName = (i: number) => `svc-${String(i).padStart(4, "0")}`;

/** Service i: a LoadBalancer of ours (every other one Local) when `lb` is its number among those, else ClusterIP. */
function serviceObject(i: number, lb: number | undefined): Service {
  const name = serviceName(i);
  const http = { name: "http", protocol: "TCP", port: 80, targetPort: 8080 };
  const metadata = { name, namespace: namespaceOf(i), labels: { app: name, team: `team-${i % 8}` } };
  if (lb === undefined) return { metadata, spec: { type: "ClusterIP", selector: { app: name }, ports: [http] } };
  return {
    metadata,
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: NODE_ADDRESS_CLASS,
      externalTrafficPolicy: lb % 2 ? "Local" : "Cluster",
      selector: { app: name },
      // One port per Service: on node addresses two Services on one port would conflict (the newer refused).
      ports: [{ ...http, port: 20_000 + lb }],
    },
  };
}

const l2ServiceName = (i: number) => `l2-${String(i).padStart(4, "0")}`;

/** Service i of class local-ccm.io/l2 (externalTrafficPolicy Cluster: any live announcer on the segment may take it). */
function l2ServiceObject(i: number): Service {
  const name = l2ServiceName(i);
  return {
    metadata: { name, namespace: namespaceOf(i), labels: { app: name, team: `team-${i % 8}` } },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: L2_CLASS,
      selector: { app: name },
      ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }],
    },
  };
}

const podIP = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;

/** Slice k of Service i, as the EndpointSlice controller writes it: endpoints spread over the nodes. */
function sliceObject(i: number, k: number): EndpointSlice {
  const service = serviceName(i);
  const endpoints = Array.from({ length: ENDPOINTS_PER_SLICE }, (_, e) => {
    const n = (i * SLICES_PER_SERVICE + k) * ENDPOINTS_PER_SLICE + e;
    const node = (i * 7919 + k * 613 + e * 104_729) % NODES;
    const ready = n % 10 !== 0;
    return {
      addresses: [podIP(n)],
      conditions: { ready, serving: ready, terminating: !ready },
      nodeName: nodeName(node),
      zone: `eu-west-1${"abc"[node % 3]}`,
      targetRef: { kind: "Pod", namespace: namespaceOf(i), name: `${service}-${k}-${e}` },
    };
  });
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: `${service}-${k}`,
      namespace: namespaceOf(i),
      labels: {
        [SERVICE_NAME_LABEL]: service,
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
      },
    },
    addressType: "IPv4",
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints,
  };
}

/** Calls `each` on every item, CREATES_IN_FLIGHT at a time. */
async function inPool<T>(items: Iterable<T>, each: (item: T) => Promise<unknown>): Promise<void> {
  const iterator = items[Symbol.iterator]();
  const worker = async () => {
    for (let next = iterator.next(); !next.done; next = iterator.next()) await each(next.value);
  };
  await Promise.all(Array.from({ length: CREATES_IN_FLIGHT }, worker));
}

function* range(from: number, to: number): Generator<number> {
  for (let i = from; i < to; i++) yield i;
}

function* slicesOf(services: Iterable<number>): Generator<EndpointSlice> {
  for (const i of services) for (let k = 0; k < SLICES_PER_SERVICE; k++) yield sliceObject(i, k);
}

const services = (client: KubeClient, namespace: string) =>
  new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace });
const createSlice = (client: KubeClient, slice: EndpointSlice) =>
  new Resource<EndpointSlice>(client, { ...ENDPOINT_SLICE_RESOURCE, namespace: slice.metadata?.namespace }).create(
    slice,
  );

/** Nodes, namespaces, Services and their slices; the seconds each kind took. */
async function populate(world: World): Promise<{ nodesS: number; servicesS: number; slicesS: number }> {
  const { admin } = world.plane;
  const timed = async (work: () => Promise<void>) => {
    const started = performance.now();
    await work();
    return (performance.now() - started) / 1000;
  };
  const nodesS = await timed(() => inPool(range(0, NODES), (i) => world.nodes.create(kubeletNode(i))));
  const namespaces = new Resource<Namespace>(admin, { group: "", version: "v1", plural: "namespaces" });
  await inPool(range(0, NAMESPACES), (i) => namespaces.create({ metadata: { name: namespaceOf(i) } }));
  const servicesS = await timed(() =>
    inPool(range(0, SERVICES), (i) => {
      const lb = i % LB_EVERY === 0 ? i / LB_EVERY : undefined;
      return services(admin, namespaceOf(i)).create(serviceObject(i, lb));
    }),
  );
  const slicesS = await timed(() => inPool(slicesOf(range(0, SERVICES)), (slice) => createSlice(admin, slice)));
  return { nodesS, servicesS, slicesS };
}

/** Every LoadBalancer Service's ingress IPs as a watcher (this process) sees them, and when they changed. */
interface IngressWatch {
  ingress: Map<string, string[]>;
  /** When each Service was first seen with an ingress. */
  firstIngress: Map<string, number>;
  /** Its announcer annotation (class local-ccm.io/l2), and when that last changed. */
  announcer: Map<string, { node: string | undefined; at: number }>;
  /** When each Service was first seen with an announcer, live or not. */
  firstAnnounced: Map<string, number>;
  /** When each IP last left some Service's ingress. */
  removed: Map<string, number>;
  /** How many ingresses hold the IP. */
  holders(ip: string): number;
  stop(): Promise<void>;
}

async function watchIngress(client: KubeClient): Promise<IngressWatch> {
  const ingress = new Map<string, string[]>();
  const firstIngress = new Map<string, number>();
  const announcer: IngressWatch["announcer"] = new Map();
  const firstAnnounced = new Map<string, number>();
  const removed = new Map<string, number>();
  const informer = new Informer(new Resource<Service>(client, SERVICE_RESOURCE));
  const seen = (service: Service) => {
    if (service.spec?.type !== "LoadBalancer") return;
    const now = performance.now();
    const key = objectKey(service);
    const ips = (service.status?.loadBalancer?.ingress ?? []).flatMap(({ ip }) => ip ?? []);
    for (const ip of ingress.get(key) ?? []) if (!ips.includes(ip)) removed.set(ip, now);
    if (ips.length && !firstIngress.has(key)) firstIngress.set(key, now);
    ingress.set(key, ips);
    const node = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
    if (announcer.get(key)?.node !== node) announcer.set(key, { node, at: now });
    if (node && !firstAnnounced.has(key)) firstAnnounced.set(key, now);
  };
  informer.addHandlers({ onAdd: seen, onUpdate: (_, service) => seen(service) });
  informer.start();
  await informer.waitForSync();
  return {
    ingress,
    firstIngress,
    announcer,
    firstAnnounced,
    removed,
    holders: (ip) => [...ingress.values()].filter((ips) => ips.includes(ip)).length,
    stop: () => informer.stop(),
  };
}

const loadAverage = () =>
  loadavg()
    .map((load) => load.toFixed(1))
    .join(" / ");

interface Rest {
  memory: ProcessMemory;
  cpuS: number;
  requests: Map<string, number>;
  load: string;
}

/** An idle minute of the program: its CPU, its memory after, and its API requests meanwhile. */
async function rest(world: World, program: ControllerProcess): Promise<Rest> {
  await delay(10_000); // start-up allocations and Events settle
  const from = new Date();
  const cpuBefore = cpuSeconds(program.pid);
  await delay(IDLE_SECONDS * 1000);
  const cpuS = cpuSeconds(program.pid) - cpuBefore;
  const load = loadAverage();
  return { memory: processMemory(program.pid), cpuS, requests: await auditedRequests(world, from, new Date()), load };
}

/** The program as the Deployment runs it, plus where to reach it from this bench. */
async function startProgram(world: World, entry: string, extra: string[]): Promise<ControllerProcess> {
  const args = [
    `--kubeconfig=${world.kubeconfig}`,
    "--leader-elect-resource-namespace=kube-system",
    "--v=2",
    `--health-bind-address=${world.proberIP}:0`,
    `--metrics-bind-address=${world.proberIP}:0`,
    "--secure-metrics=false",
    ...extra,
  ];
  const program = new ControllerProcess(world, args, { entry, nodeArgs: NODE_ARGS });
  await program.waitForLog("caches synced", {}, 180_000);
  await program.waitForLog("started leading", {}, 60_000);
  return program;
}

interface Latencies {
  /** Seconds, sorted. */
  seconds: number[];
  load: string;
  /** Created only: the create requests' own round trips, seconds, sorted (the apiserver's share). */
  answers?: number[];
  /** Created only: the controller's own time from queued to written, as its histogram's bounds for p50 and p99. */
  controller?: { p50: string; p99: string };
}

const WRITE_BUCKET = "node_lifecycle_controller_service_ingress_write_seconds_bucket";

/** The bound under which a quantile of the program's ingress writes between two scrapes fell. */
function writeBounds(before: Map<string, number>, after: Map<string, number>): { p50: string; p99: string } {
  const buckets = [...after]
    .filter(([series]) => series.startsWith(WRITE_BUCKET))
    .map(([series, count]) => ({ le: /le="([^"]+)"/.exec(series)?.[1], count: count - (before.get(series) ?? 0) }));
  const total = buckets.at(-1)?.count ?? 0;
  const bound = (q: number) => buckets.find(({ count }) => count >= q * total)?.le ?? "?";
  return { p50: bound(0.5), p99: bound(0.99) };
}

/** NEW_SERVICES LoadBalancers of ours, NEW_PER_SECOND a second (the Local ones' slices first): created → ingress. */
async function creationLatencies(
  world: World,
  watch: IngressWatch,
  scrape: () => Promise<Map<string, number>>,
): Promise<Latencies> {
  const { admin } = world.plane;
  const first = SERVICES;
  const lbNumber = (i: number) => SERVICES / LB_EVERY + i - first;
  const localOnes = [...range(first, first + NEW_SERVICES)].filter((i) => lbNumber(i) % 2);
  await inPool(slicesOf(localOnes), (slice) => createSlice(admin, slice));
  const metricsBefore = await scrape();
  const sent = new Map<string, number>();
  const creates: Promise<number>[] = [];
  for (let i = first; i < first + NEW_SERVICES; i++) {
    const tick = delay(1000 / NEW_PER_SECOND);
    const service = serviceObject(i, lbNumber(i));
    const at = performance.now();
    sent.set(`${namespaceOf(i)}/${serviceName(i)}`, at);
    creates.push(services(admin, namespaceOf(i)).create(service).then(() => (performance.now() - at) / 1000));
    await tick;
  }
  const answers = (await Promise.all(creates)).sort((a, b) => a - b);
  const load = loadAverage();
  await waitFor(
    `an ingress on all ${NEW_SERVICES} new Services`,
    () => [...sent.keys()].every((key) => watch.firstIngress.has(key)),
    120_000,
  );
  const seconds = [...sent].map(([key, at]) => ((watch.firstIngress.get(key) as number) - at) / 1000);
  const controller = writeBounds(metricsBefore, await scrape());
  return { seconds: seconds.sort((a, b) => a - b), load, answers, controller };
}

/**
 * NOT_READY nodes, those in the most ingresses, one at a time: Ready=False → gone from every ingress; then
 * Ready=True and every ingress back as it was before the next. Also the most ingresses one of them was in.
 */
async function notReadyLatencies(world: World, watch: IngressWatch): Promise<Latencies & { mostHeld: number }> {
  const nodes = [...range(0, NODES)]
    .map((i) => ({ name: nodeName(i), ip: nodeAddress(i), held: watch.holders(nodeAddress(i)) }))
    .sort((a, b) => b.held - a.held)
    .slice(0, NOT_READY);
  const seconds: number[] = [];
  const snapshot = () => JSON.stringify([...watch.ingress].sort());
  let load = "";
  for (const { name, ip } of nodes) {
    const before = snapshot();
    watch.removed.delete(ip);
    const sent = performance.now();
    await setReady(world, name, "False");
    await waitFor(`${name} (${ip}) out of every ingress`, () => watch.holders(ip) === 0, 60_000);
    seconds.push(((watch.removed.get(ip) as number) - sent) / 1000);
    load = loadAverage();
    await setReady(world, name, "True");
    await waitFor(`${name} back in the ingresses that held it`, () => snapshot() === before, 60_000);
  }
  return { seconds: seconds.sort((a, b) => a - b), load, mostHeld: nodes[0]?.held ?? 0 };
}

interface Figures {
  syncS: number;
  rest: Rest;
  after: ProcessMemory;
  /** As shipped only. */
  service?: {
    allIngressS: number;
    created: Latencies;
    notReady: Latencies & { mostHeld: number };
    planMeanMs: number;
    plans: number;
  };
  /** The layer-2 run only; `rest` above is at L2_SERVICES Services. */
  l2?: {
    /** Start → every Service with an address and an announcer, any: the first assignment. */
    firstAnnouncedS: number;
    /** Start → every Service with an address and a renewing announcer. */
    allAnnouncedS: number;
    fewerRest: Rest;
    failover: Latencies & { mostHeld: number };
    failedRenewals: number;
  };
}

async function measure(world: World, entry: string, watch: IngressWatch | undefined): Promise<Figures> {
  const started = performance.now();
  const program = await startProgram(world, entry, watch ? [] : ["--controllers=*,-service"]);
  try {
    const syncS = (performance.now() - started) / 1000;
    if (!watch) return { syncS, rest: await rest(world, program), after: processMemory(program.pid) };
    const lbs = SERVICES / LB_EVERY;
    await waitFor(`an ingress on all ${lbs} LoadBalancers`, () => watch.firstIngress.size === lbs, 180_000);
    const allIngressS = (Math.max(...watch.firstIngress.values()) - started) / 1000;
    const idle = await rest(world, program);
    const serving = await program.waitForLog("serving /healthz, /readyz and /metrics");
    const scrape = () => scrapeMetrics(String(serving.address));
    const created = await creationLatencies(world, watch, scrape);
    const notReady = await notReadyLatencies(world, watch);
    const metrics = await scrape();
    const plan = (part: string) => metrics.get(`node_lifecycle_controller_service_plan_seconds_${part}`) ?? Number.NaN;
    return {
      syncS,
      rest: idle,
      after: processMemory(program.pid),
      service: {
        allIngressS,
        created,
        notReady,
        planMeanMs: (plan("sum") / plan("count")) * 1000,
        plans: plan("count"),
      },
    };
  } finally {
    await program.stop();
  }
}

/** Every one of `keys` with an address and an announcer among `live`, as the watch sees them; when it was so. */
async function allAnnounced(watch: IngressWatch, keys: string[], live: Set<string>): Promise<number> {
  const done = () =>
    keys.every((key) => watch.firstIngress.has(key) && live.has(watch.announcer.get(key)?.node ?? ""));
  await waitFor(`an address and a live announcer on all ${keys.length} Services of class ${L2_CLASS}`, done, 300_000);
  return Math.max(...keys.map((key) => Math.max(watch.firstIngress.get(key) ?? 0, watch.announcer.get(key)?.at ?? 0)));
}

/**
 * LEASE_STOPS renewed Leases, of the nodes announcing the most Services, one at a time: its renewals stop → none of
 * its Services names it (seconds from its last renewal's answer to the last of them moved); then it renews again.
 */
async function leaseFailover(
  watch: IngressWatch,
  l2: L2World,
  live: string[],
): Promise<Latencies & { mostHeld: number }> {
  const held = (node: string) => [...watch.announcer].filter(([, announcer]) => announcer.node === node);
  const nodes = live
    .map((node) => ({ node, held: held(node).length }))
    .sort((a, b) => b.held - a.held)
    .slice(0, LEASE_STOPS);
  const seconds: number[] = [];
  let load = "";
  for (const { node } of nodes) {
    const keys = held(node).map(([key]) => key);
    const lastRenewed = await l2.stopRenewing(node);
    await waitFor(`${node}'s Services on other announcers`, () => held(node).length === 0, 60_000);
    const moved = Math.max(...keys.map((key) => watch.announcer.get(key)?.at ?? 0));
    seconds.push((moved - lastRenewed) / 1000);
    load = loadAverage();
    l2.renew([node]);
  }
  return { seconds: seconds.sort((a, b) => a - b), load, mostHeld: nodes[0]?.held ?? 0 };
}

/**
 * The controller with the chart's loadBalancer.l2.enabled flags: L2_FEWER Services of class local-ccm.io/l2 and an
 * idle minute; stopped, Services up to L2_SERVICES, started again: start → all announced, an idle minute, and the
 * Leases' failover.
 */
async function measureL2(world: World, entry: string, watch: IngressWatch, l2: L2World): Promise<Figures> {
  const live = [...range(0, Math.min(RENEWING, NODES))].map(nodeName);
  const liveSet = new Set(live);
  l2.renew(live);
  const create = (i: number) => services(world.plane.admin, namespaceOf(i)).create(l2ServiceObject(i));
  const keys = (count: number) => [...range(0, count)].map((i) => `${namespaceOf(i)}/${l2ServiceName(i)}`);
  await inPool(range(0, L2_FEWER), create);
  let program = await startProgram(world, entry, l2.args);
  let fewerRest: Rest;
  try {
    await allAnnounced(watch, keys(L2_FEWER), liveSet);
    fewerRest = await rest(world, program);
  } finally {
    await program.stop();
  }
  await inPool(range(L2_FEWER, L2_SERVICES), create);
  const started = performance.now();
  program = await startProgram(world, entry, l2.args);
  try {
    const syncS = (performance.now() - started) / 1000;
    const all = keys(L2_SERVICES);
    const allAnnouncedS = ((await allAnnounced(watch, all, liveSet)) - started) / 1000;
    const firstAnnouncedS = (Math.max(...all.map((key) => watch.firstAnnounced.get(key) ?? 0)) - started) / 1000;
    const idle = await rest(world, program);
    const failover = await leaseFailover(watch, l2, live);
    return {
      syncS,
      rest: idle,
      after: processMemory(program.pid),
      l2: { firstAnnouncedS, allAnnouncedS, fewerRest, failover, failedRenewals: l2.failedRenewals() },
    };
  } finally {
    await program.stop();
  }
}

const entry = await bundleProgram("node-lifecycle-controller", path.join(import.meta.dirname, "../.cache/bench-lb"));
const loadAtStart = loadAverage();
const world = await startWorld({ subnet: 248, audit: true, serviceCIDR: "10.96.0.0/16" });
let watch: IngressWatch | undefined;
let l2: L2World | undefined;
try {
  const populated = await populate(world);
  watch = await watchIngress(world.plane.admin);
  const runs: [string, Figures][] = [];
  if (RUNS.has("off")) runs.push(["without the service controller", await measure(world, entry, undefined)]);
  if (RUNS.has("shipped")) runs.push(["as shipped (service controller on)", await measure(world, entry, watch)]);
  if (RUNS.has("l2")) {
    l2 = await startL2World(world, [...range(0, NODES)].map(nodeName), inPool);
    runs.push(["with loadBalancer.l2.enabled", await measureL2(world, entry, watch, l2)]);
  }

  const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
  const s = (seconds: number) => `${seconds.toFixed(1)} s`;
  const requests = (counts: Map<string, number>) =>
    [...counts].map(([request, count]) => `${request} ×${count}`).join(", ") || "none";
  const row = (label: string, value: (f: Figures) => string, note = "") =>
    console.log(`  ${label.padEnd(44)}${runs.map(([, f]) => value(f).padEnd(50)).join("")}${note}`);
  const service = (value: (f: NonNullable<Figures["service"]>) => string) => (f: Figures) =>
    f.service ? value(f.service) : "-";
  const layer2 = (value: (f: NonNullable<Figures["l2"]>) => string) => (f: Figures) => (f.l2 ? value(f.l2) : "-");
  const percentiles = (sorted: number[]) =>
    `p50 ${quantile(sorted, 0.5).toFixed(3)} s, p99 ${quantile(sorted, 0.99).toFixed(3)} s`;
  const latency = ({ seconds, load }: Latencies) => `${percentiles(seconds)} (load ${load})`;
  const count = (counts: Map<string, number>, which: (request: string) => boolean) =>
    [...counts].reduce((sum, [request, n]) => sum + (which(request) ? n : 0), 0);
  const isList = (request: string) => request.startsWith("list ");
  const isWrite = (request: string) => !/^(get|list|watch) /.test(request) && !request.endsWith(" leases");

  console.log(`node-lifecycle-controller (bundled, node ${NODE_ARGS.join(" ")}), Node ${process.version}`);
  console.log(
    `  ${NODES} kubelet-like Nodes in ${s(populated.nodesS)}; ${SERVICES} Services (${SERVICES / LB_EVERY}` +
      ` LoadBalancer of class ${NODE_ADDRESS_CLASS}, half Local) in ${s(populated.servicesS)};` +
      ` ${SERVICES * SLICES_PER_SERVICE} EndpointSlices of ${ENDPOINTS_PER_SLICE} endpoints in` +
      ` ${s(populated.slicesS)} (${CREATES_IN_FLIGHT} creates in flight)`,
  );
  if (l2)
    console.log(
      `  layer 2: the chart's ${l2.args.join(" ")}; a pool ${POOL_CIDR}; ${NODES} announcer Leases of which` +
        ` ${Math.min(RENEWING, NODES)} renewed every second (${runs.at(-1)?.[1].l2?.failedRenewals} renewals` +
        ` failed); ${L2_FEWER}, then ${L2_SERVICES} Services of class ${L2_CLASS} (the RSS, CPU and API rows: at` +
        ` ${L2_SERVICES})`,
    );
  console.log(`  load average (1 / 5 / 15 min): ${loadAtStart} at the start, ${loadAverage()} at the end`);
  console.log(`  ${"".padEnd(44)}${runs.map(([label]) => label.padEnd(50)).join("")}`);
  row("start → synced and leading", (f) => s(f.syncS));
  row("start → every LoadBalancer's ingress", service((f) => s(f.allIngressS)));
  row(`start → all ${L2_SERVICES} l2 addressed, announcer`, layer2((f) => s(f.firstAnnouncedS)), "the first assignment");
  const renewing = "the non-renewed Leases expired (3 s after first seen)";
  row(`start → all ${L2_SERVICES} on a renewing node`, layer2((f) => s(f.allAnnouncedS)), renewing);
  const memory = ({ rss, anon }: ProcessMemory) => `${mib(rss)} / ${mib(anon)}`;
  row("RSS / RssAnon after an idle minute", (f) => memory(f.rest.memory), "budget: RSS ≤ 150 MiB");
  row("peak RSS (VmHWM) at the end", (f) => mib(f.after.peak));
  row("RSS / RssAnon at the end", (f) => memory(f.after));
  const share = (cpu: number) => `${cpu.toFixed(2)} s = ${((cpu / IDLE_SECONDS) * 100).toFixed(2)}%`;
  row(`CPU over the idle ${IDLE_SECONDS} s`, (f) => share(f.rest.cpuS));
  row("load average in the idle minute", (f) => f.rest.load);
  const created = `created → ingress (${NEW_SERVICES}, ${NEW_PER_SECOND}/s)`;
  row(created, service((f) => latency(f.created)), "budget: p99 ≤ 1 s");
  row("  of which the create request", service((f) => percentiles(f.created.answers ?? [])), "the apiserver's share");
  const own = ({ controller }: Latencies) => `p50 ≤ ${controller?.p50} s, p99 ≤ ${controller?.p99} s`;
  row("  the controller's own: queued → written", service((f) => own(f.created)), "its histogram's bucket bounds");
  row(`NotReady → out of every ingress (${NOT_READY})`, service((f) => latency(f.notReady)), "budget: p99 ≤ 2 s");
  row("most ingresses one of those nodes was in", service((f) => String(f.notReady.mostHeld)));
  row("plans over all Services: count, mean", service((f) => `${f.plans}, ${f.planMeanMs.toFixed(1)} ms`));
  const atRest = ({ requests }: Rest) => `${count(requests, isList)} / ${count(requests, isWrite)}`;
  row("LISTs / writes in the idle minute", (f) => atRest(f.rest), "budget: 0 / 0 (Lease renewals aside)");
  row(`  the same at ${L2_FEWER} l2 Services`, layer2((f) => atRest(f.fewerRest)));
  row(`  CPU at ${L2_FEWER} l2 Services`, layer2((f) => share(f.fewerRest.cpuS)));
  row(`  RSS / RssAnon at ${L2_FEWER} l2 Services`, layer2((f) => memory(f.fewerRest.memory)));
  const failover = `Lease stops → Services moved (${LEASE_STOPS})`;
  row(failover, layer2((f) => latency(f.failover)), "from its last renewal's answer; Lease 3 s");
  row("most Services one of those nodes announced", layer2((f) => String(f.failover.mostHeld)));
  for (const [label, f] of runs) {
    console.log(`  API requests in the idle ${IDLE_SECONDS} s, ${label}: ${requests(f.rest.requests)}`);
    if (f.l2) console.log(`    the same at ${L2_FEWER} l2 Services: ${requests(f.l2.fewerRest.requests)}`);
  }
} finally {
  l2?.stop();
  await watch?.stop();
  await world.stop();
}
