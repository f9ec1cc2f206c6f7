// The BGP method as the announcing loop runs it (../method.ts), built from the cluster. The BGPPeers are watched
// while the agent runs (cluster-scoped, a handful, trimmed to their spec): a node speaks BGP while one selects it.
// Running, the method also watches the LoadBalancerIPPools (their spec.bgp: the routes' attributes) and the
// EndpointSlices, trimmed at the informer to those with an endpoint on this node (externalTrafficPolicy Local),
// and brings the sessions in line with the selected peers whenever a peer, a Secret read or a route changes
// (method.ts restarts only the sessions whose settings changed). The decisions are decide.ts's. While it runs it
// reports its sessions on its own Node (report.ts), and runs a BFD session beside each BGP session whose peer has
// `bfd` (one BFD endpoint per local address, shared by its peers); the report goes when the method stops.
// With --bgp-advertise-pod-cidrs it also announces its own Node's pod CIDRs (podcidrs.ts decides them from each Node
// object the agent's watch shows) to the peers that take them, and with --bgp-network-unavailable-condition keeps its
// Node's NetworkUnavailable condition in line with whether a peer holds them (condition.ts), running or not.
import type { Node, Secret, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { type BGPPeer, BGP_PEER_RESOURCE, type PeerFacts, peerFacts } from "../../../bgppeers/peer.ts";
import { SESSIONS_ANNOTATION } from "../../../bgppeers/sessions.ts";
import type { Logger } from "../../../cli/log.ts";
import type { KubeClient } from "../../../kube/client.ts";
import { Informer, objectKey } from "../../../kube/informer.ts";
import { ENDPOINT_SLICE_RESOURCE, NODE_RESOURCE, Resource, SECRET_RESOURCE } from "../../../kube/resource.ts";
import { endpointSliceFacts, ReadyEndpoints, SERVICE_NAME_LABEL } from "../../../loadbalancer/endpoints.ts";
import { type LoadBalancerNode, loadBalancerNode } from "../../../loadbalancer/nodes.ts";
import { hashString } from "../../../loadbalancer/rendezvous.ts";
import type { Netlink } from "../../../net/netlink.ts";
import { ALLOCATED_FROM_ANNOTATION } from "../../../pools/allocate.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE } from "../../../pools/pool.ts";
import type { BgpMetrics } from "../../metrics.ts";
import { type BfdEndpoint, type BfdSession, openBfdEndpoint } from "../bfd/session.ts";
import { newSkips } from "../desired.ts";
import type { AnnouncementMethod, MethodDefinition, ServiceView } from "../method.ts";
import {
  BGP_SELECTION_RULES,
  bgpRefusal,
  type BgpRefusalRule,
  decideBgpSelection,
  nextHopsFor,
  peerSession,
  poolAttributes,
  selectedPeers,
} from "./decide.ts";
import type { Phase } from "./fsm.ts";
import { type BgpPeer, startBgpMethod } from "./method.ts";
import { networkConditionWriter } from "./condition.ts";
import { decideNetworkCondition, decidePodCidrs, networkCondition } from "./podcidrs.ts";
import { sessionReport, sessionReportWriter } from "./report.ts";

export interface BgpOptions {
  client: KubeClient;
  netlink: Netlink;
  node: string;
  /** Where the Secrets of the BGPPeers' passwordSecretRef live (the release namespace). */
  secretNamespace: string;
  /** Services without a loadBalancerClass are announced too (--bgp-claim-classless). */
  claimClassless: boolean;
  /** This node's pod CIDRs are announced to the peers that take them (--bgp-advertise-pod-cidrs). */
  advertisePodCidrs?: boolean;
  /** The Node's NetworkUnavailable condition follows its pod CIDRs' routes (--bgp-network-unavailable-condition). */
  networkUnavailableCondition?: boolean;
  log: Logger;
  metrics: BgpMetrics;
  /** This node's Node from the agent's watch; undefined while it is not known. */
  nodeObject(): Node | undefined;
}

export interface Bgp {
  definition: MethodDefinition<BgpRefusalRule>;
  /** Watches the BGPPeers; `onChange` follows each change (the loop decides its selection again). */
  start(onChange: () => void): void;
  /** The Node changed: its eligibility and pod CIDRs are decided again while the method runs. */
  nodeChanged(): void;
  stop(): Promise<void>;
}

/** What a BFD session decides several times a second while up: logged only at -v=6. */
const ROUTINE_BFD_RULES = new Set(["tx", "keep", "stale-timer"]);

/** Netlink events come in bursts (an address add brings routes with it): one look at the next hops per burst. */
const NETLINK_DEBOUNCE_MS = 200;

/**
 * How long after its BGP starts the agent may take to peer before it calls its pod CIDRs unrouted (NetworkUnavailable
 * True): a restarting agent's peers still hold its routes (graceful restart), and its sessions take a few seconds.
 */
export const CONDITION_GRACE_MS = 30_000;

/** What the agent keeps of a BGPPeer: its spec (peerFacts reads nothing else). */
const trimPeer = (peer: BGPPeer): BGPPeer => ({
  metadata: { name: peer.metadata?.name, resourceVersion: peer.metadata?.resourceVersion },
  spec: peer.spec,
});

export function bgpMethod(options: BgpOptions): Bgp {
  const { client, node, log } = options;
  const nodeHash = hashString(node);
  const peers = new Informer(new Resource<BGPPeer>(client, BGP_PEER_RESOURCE), {
    transform: trimPeer,
    onError: (err) => log.error("BGP: watching the BGPPeers failed", { err }),
  });
  /** Problems of unsound peers, logged once each. */
  const reported = new Map<string, string>();
  const facts = (): PeerFacts[] => {
    const all = peers.list().map(peerFacts);
    for (const peer of all) {
      if (peer.problem && reported.get(peer.name) !== peer.problem)
        log.warn(`BGP: BGPPeer ${peer.name} is not peered with: ${peer.problem}`, { rule: "peer-invalid" });
      if (peer.problem) reported.set(peer.name, peer.problem);
      else reported.delete(peer.name);
    }
    return all;
  };
  const labels = () => {
    const object = options.nodeObject();
    return object && (object.metadata?.labels ?? {});
  };
  /** The Node as the LoadBalancer rules see it, computed once per Node object. */
  let nodeFacts: { object: Node; facts: LoadBalancerNode } | undefined;
  const lbNode = () => {
    const object = options.nodeObject();
    if (!object) return undefined;
    if (nodeFacts?.object !== object) nodeFacts = { object, facts: loadBalancerNode(object, undefined) };
    return nodeFacts.facts;
  };
  let running: Running | undefined;

  /** The NetworkUnavailable condition, while the agent keeps it (until SIGTERM). */
  const condition = options.networkUnavailableCondition
    ? networkConditionWriter({ ...reportOptions(options), current: networkCondition(options.nodeObject()) })
    : undefined;
  let conditionSince = Date.now();
  let everHeld = false;
  let conditionStopped = false;
  let graceTimer: NodeJS.Timeout | undefined;
  const conditionChanged = () => {
    if (!condition || conditionStopped) return;
    const held = running?.podCidrsHeld() ?? new Map<string, string[]>();
    if ([...held.values()].some((cidrs) => cidrs.length > 0)) everHeld = true;
    const settled = everHeld || Date.now() - conditionSince >= CONDITION_GRACE_MS;
    const decision = decideNetworkCondition({ pod: decidePodCidrs(options.nodeObject()), held, settled });
    log.v(4)?.(`BGP: ${decision.rule}: ${decision.message || decision.reason}`, { rule: decision.rule });
    condition.set(decision);
  };

  const definition: MethodDefinition<BgpRefusalRule> = {
    name: "BGP",
    // Every Service: nothing narrower exists on the server for a class (see docs/bgp.md, "API load"); the loop
    // trims each to the few fields read.
    watch: { annotations: [ALLOCATED_FROM_ANNOTATION] },
    refuse: (service) => {
      const view = { node: lbNode(), readyHere: (key: string) => running?.ready.readyNodes(key).has(node) ?? false };
      return bgpRefusal(service, view, options.claimClassless);
    },
    select: (nodeLabels) => decideBgpSelection(facts(), nodeLabels),
    selectionRules: BGP_SELECTION_RULES,
    async start(services, redecide) {
      const selected = () => selectedPeers(facts(), labels());
      running = startRunning({ ...options, nodeHash, peers: selected, onSessions: conditionChanged }, services, redecide);
      const method = running;
      return {
        apply: (desired) => method.apply(desired),
        async stop(shutdown) {
          if (running === method) running = undefined;
          if (shutdown) conditionStopped = true; // the next agent decides it, within seconds of its sessions
          // A node shutting down (kubelet's graceful node shutdown marks it NotReady before it stops the pods),
          // drained out or excluded withdraws its Services' addresses at SIGTERM too: graceful restart is for an
          // agent coming back. Its pod CIDRs stay with graceful restart while the Node is not being deleted: its
          // pods are where they were (podcidrs.ts), and the router drops them after restartTime if no agent returns.
          const eligible = lbNode()?.ineligible === undefined && lbNode() !== undefined;
          const keepPodCidrs = method.holdsPodCidrs();
          if (shutdown && !eligible) {
            const what = keepPodCidrs ? "the Services' addresses (keeping the pod CIDRs)" : "everything";
            log.info(`BGP: stopping on a node no longer eligible: withdrawing ${what}`);
            if (keepPodCidrs) method.withdrawServices();
          }
          await method.stop(shutdown && (eligible || keepPodCidrs));
          conditionChanged();
        },
      };
    },
    // A BGP session ends with its process; its report does not: an agent killed while it peered left one.
    async clearLeftovers() {
      const current = options.nodeObject()?.metadata?.annotations?.[SESSIONS_ANNOTATION];
      if (current !== undefined) await sessionReportWriter({ ...reportOptions(options), current }).remove();
    },
  };
  return {
    definition,
    start(onChange) {
      const changed = () => {
        onChange();
        running?.peersChanged();
      };
      peers.addHandlers({ onAdd: changed, onUpdate: changed, onDelete: changed });
      peers.start();
      if (condition) {
        conditionSince = Date.now();
        graceTimer = setTimeout(conditionChanged, CONDITION_GRACE_MS);
        graceTimer.unref();
        conditionChanged();
      }
    },
    nodeChanged() {
      running?.redecide();
      running?.podCidrsChanged();
      conditionChanged();
    },
    async stop() {
      conditionStopped = true;
      clearTimeout(graceTimer);
      await Promise.all([peers.stop(), condition?.stop()]);
    },
  };
}

const reportOptions = ({ client, node, log, nodeObject }: BgpOptions) => ({
  nodes: new Resource<Node>(client, NODE_RESOURCE),
  node,
  log,
  current: nodeObject()?.metadata?.annotations?.[SESSIONS_ANNOTATION],
});

interface Running extends AnnouncementMethod<BgpRefusalRule> {
  ready: ReadyEndpoints;
  /** The selected peers (or what they need: a next hop, a Secret) may have changed. */
  peersChanged(): void;
  redecide(): void;
  /** The Node changed: its pod CIDRs are decided again (podcidrs.ts). */
  podCidrsChanged(): void;
  /** By peer name, of the sessions Established now: the pod CIDRs they were sent. */
  podCidrsHeld(): Map<string, string[]>;
  /** Whether this node announces pod CIDRs now (to a peer that takes them or not). */
  holdsPodCidrs(): boolean;
  /** Withdraws the Services' addresses from every peer, keeping the pod CIDRs (before a stop at SIGTERM). */
  withdrawServices(): void;
}

/** What the EndpointSlice watch keeps: only this node's endpoints, and only slices that have one. */
function trimSlice(node: string): (slice: EndpointSlice) => EndpointSlice | undefined {
  return (slice) => {
    const endpoints = (slice.endpoints ?? [])
      .filter((endpoint) => endpoint.nodeName === node)
      .map(({ nodeName, conditions }) => ({ addresses: [], nodeName, conditions: { ready: conditions?.ready } }));
    if (endpoints.length === 0) return undefined;
    const { namespace, name, resourceVersion, labels } = slice.metadata ?? {};
    const service = labels?.[SERVICE_NAME_LABEL];
    const kept: Record<string, string> = service === undefined ? {} : { [SERVICE_NAME_LABEL]: service };
    return { addressType: slice.addressType, metadata: { namespace, name, resourceVersion, labels: kept }, endpoints };
  };
}

/** What a pool's routes carry: its spec.bgp only. */
const trimPool = (pool: LoadBalancerIPPool): LoadBalancerIPPool => ({
  metadata: { name: pool.metadata?.name, resourceVersion: pool.metadata?.resourceVersion },
  spec: pool.spec?.bgp ? { bgp: pool.spec.bgp } : {},
});

function startRunning(
  options: BgpOptions & { nodeHash: number; peers: () => PeerFacts[]; onSessions: () => void },
  services: ServiceView,
  redecide: () => void,
): Running {
  const { client, netlink, node, secretNamespace, metrics, nodeHash } = options;
  const log = options.log.with({ node });
  const secrets = new Resource<Secret>(client, { ...SECRET_RESOURCE, namespace: secretNamespace });
  const ready = new ReadyEndpoints();
  const slices = new Informer(new Resource<EndpointSlice>(client, ENDPOINT_SLICE_RESOURCE), {
    transform: trimSlice(node),
    onError: (err) => log.error("BGP: watching the EndpointSlices failed", { err }),
  });
  const take = (slice: EndpointSlice, deleted: boolean) => {
    if (ready.update(endpointSliceFacts(slice), deleted).length > 0) redecide();
  };
  slices.addHandlers({
    onAdd: (slice) => take(slice, false),
    onUpdate: (_, slice) => take(slice, false),
    onDelete: (slice) => take(slice, true),
  });
  const pools = new Informer(new Resource<LoadBalancerIPPool>(client, POOL_RESOURCE), {
    transform: trimPool,
    onError: (err) => log.error("BGP: watching the LoadBalancerIPPools failed", { err }),
  });
  pools.addHandlers({ onAdd: redecide, onUpdate: redecide, onDelete: redecide });
  /** The Services of the loop's watch by key, as of the last apply (the attributes' lookup). */
  let byKey = new Map<string, Service>();
  const report = sessionReportWriter(reportOptions(options));
  /** The selected peers that have no session (left out by wantedPeers): Idle in the report. */
  let withoutSession: string[] = [];
  /** A session's phase may have changed: the gauge, and the report (written when its text changed). */
  const sessionsChanged = () => {
    if (stopped) return;
    const phases = method.phases();
    const counts = new Map<string, number>();
    for (const phase of phases.values()) counts.set(phase, (counts.get(phase) ?? 0) + 1);
    for (const phase of SESSION_PHASES) metrics.sessions.with({ state: phase }).set(counts.get(phase) ?? 0);
    report.set(sessionReport(phases, withoutSession));
    options.onSessions();
  };
  const bfd = bfdEndpoints(log);
  const method = startBgpMethod({
    peers: [],
    log,
    attributes: (entry) => poolAttributes(byKey.get(entry.services[0] ?? ""), entry.address, (name) => pools.get(name)),
    onRoutes: (peer, routes) => metrics.routes.with({ peer }).set(routes),
    startBfd: bfd.session,
  });
  /** The Services left out (besides other classes): each logged once, when it is. */
  const unlogged = newSkips();
  /** Why a selected peer has no session, logged once per change. */
  let lastLeftOut = "";

  /** The sessions the selected peers need now: next hops over netlink, passwords from their Secrets. */
  async function wantedPeers(): Promise<BgpPeer[]> {
    const wanted: BgpPeer[] = [];
    const leftOut: { peer: string; rule: string; reason: string }[] = [];
    const selected = options.peers();
    const addresses = selected.length > 0 ? await netlink.listAddresses() : [];
    for (const peer of selected) {
      const nextHop = peer.sourceAddress ?? (await netlink.routeSource(peer.peerAddress));
      if (nextHop === undefined) {
        const reason = `no route from this node to ${peer.peerAddress}`;
        leftOut.push({ peer: peer.name, rule: "no-next-hop", reason });
        continue;
      }
      let password: string | undefined;
      if (peer.password) {
        const { secret, key } = peer.password;
        try {
          const data = (await secrets.get(secret)).data?.[key];
          if (data === undefined) throw new Error(`the Secret has no key ${key}`);
          password = Buffer.from(data, "base64").toString();
        } catch (err) {
          const reason = `passwordSecretRef ${secretNamespace}/${secret}: ${(err as Error).message}`;
          leftOut.push({ peer: peer.name, rule: "no-password", reason });
          continue;
        }
      }
      const nextHops = nextHopsFor(nextHop, addresses);
      const session = { ...peerSession(peer, nextHops, password, nodeHash), onDecision: sessionsChanged };
      const timers = peer.bfd && { minRx: peer.bfd.minRxMs, minTx: peer.bfd.minTxMs, multiplier: peer.bfd.multiplier };
      const podCidrs = options.advertisePodCidrs === true && peer.advertisePodCidrs;
      wanted.push({ name: peer.name, session, nextHops, podCidrs, ...(timers ? { bfd: timers } : {}) });
    }
    const text = JSON.stringify(leftOut);
    if (text !== lastLeftOut)
      for (const { peer, rule, reason } of leftOut) log.warn(`BGP: BGPPeer ${peer}: no session: ${reason}`, { rule });
    lastLeftOut = text;
    withoutSession = leftOut.map(({ peer }) => peer);
    return wanted;
  }

  let stopped = false;
  /**
   * Whether the table is known: an apply() came with the Services, this node's endpoints and the pools all listed.
   * Until then no session starts: its first table is final for the peer (End-of-RIB), and one sent early is short
   * (graceful restart: the router drops the restarting agent's kept routes that it lacks).
   */
  let tableKnown = false;
  /** One look at the peers at a time; a change meanwhile asks for one more. */
  let refreshing: Promise<void> | undefined;
  let again = false;
  const refresh = () => {
    if (stopped || !tableKnown) return;
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = (async () => {
      do {
        again = false;
        try {
          const wanted = await wantedPeers();
          if (!stopped) method.setPeers(wanted);
          sessionsChanged();
        } catch (err) {
          log.error("BGP: bringing the sessions in line with the BGPPeers failed", { err });
        }
      } while (again && !stopped);
      refreshing = undefined;
    })();
  };
  /** This node's pod CIDRs, decided from each Node object: their rule and each refused entry logged once. */
  let podRule = "";
  const unloggedPodCidrs = newSkips();
  let podCidrs: string[] = [];
  const podCidrsChanged = () => {
    if (!options.advertisePodCidrs || stopped) return;
    const decision = decidePodCidrs(options.nodeObject());
    if (decision.rule !== podRule) log.info(`BGP: pod CIDRs: ${decision.reason}`, { rule: decision.rule });
    podRule = decision.rule;
    for (const { address, rule, reason } of unloggedPodCidrs(decision.refused))
      log.warn(`BGP: not announcing pod CIDR: ${reason}`, { podCIDR: address, rule });
    podCidrs = decision.cidrs;
    method.setPodCidrs(podCidrs);
  };
  podCidrsChanged(); // before any session starts: its first table has them
  const changes = netlink.watchChanges(refresh, NETLINK_DEBOUNCE_MS);
  slices.start();
  pools.start();
  // A node with no endpoints and no pools hears no event from their lists: their sync asks for the table itself.
  void Promise.all([slices.waitForSync(), pools.waitForSync()]).then(redecide);
  log.info("BGP announcing started");

  return {
    ready,
    peersChanged: refresh,
    redecide,
    podCidrsChanged() {
      podCidrsChanged();
      options.onSessions();
    },
    podCidrsHeld: () => method.podCidrsHeld(),
    holdsPodCidrs: () => podCidrs.length > 0,
    withdrawServices: () => method.apply({ addresses: [], skipped: [] }),
    apply(desired) {
      byKey = new Map(services.list().map((service) => [objectKey(service), service]));
      // Services of other classes are no news: every other Service is one.
      const skipped = desired.skipped.filter((skip) => skip.rule !== "other-class");
      for (const { service, address, rule, reason } of unlogged(skipped))
        log.info(`BGP: not announcing: ${reason}`, { service, address, rule });
      method.apply(desired);
      if (tableKnown || !slices.hasSynced() || !pools.hasSynced()) return;
      tableKnown = true;
      log.info("BGP: the table is known: starting the sessions", { routes: desired.addresses.length });
      refresh();
    },
    async stop(shutdown) {
      stopped = true;
      changes.close();
      await refreshing;
      await method.stop(shutdown);
      bfd.close();
      for (const phase of SESSION_PHASES) metrics.sessions.with({ state: phase }).set(0);
      // Removed at SIGTERM too, graceful restart or not: the sessions end with the process, and a report must not
      // outlive its writer (a stale Established of an agent gone for good). The next agent reports within seconds.
      await Promise.all([report.remove(), slices.stop(), pools.stop()]);
    },
  };
}

const SESSION_PHASES = [
  "idle",
  "connecting",
  "open-sent",
  "open-confirm",
  "established",
  "stopped",
] as const satisfies Phase[];

/**
 * The BFD sessions beside the BGP sessions: one endpoint (port 3784 and a sender) per local address, opened with its
 * first session and closed with its last. An endpoint that cannot be had (the address gone, port 3784 taken) leaves
 * that peer's BGP session without BFD, logged: its hold time still detects a dead peer, only slower.
 */
function bfdEndpoints(log: Logger) {
  const endpoints = new Map<string, { endpoint: BfdEndpoint; sessions: number }>();
  return {
    session(peer: BgpPeer, client: { bfd(up: boolean): void }): BfdSession | undefined {
      const { bfd: config, session } = peer;
      const local = session.localAddress;
      if (!config || local === undefined) return undefined;
      let entry = endpoints.get(local);
      if (!entry) {
        try {
          entry = { endpoint: openBfdEndpoint(local), sessions: 0 };
        } catch (err) {
          const reason = `no BFD endpoint on ${local}: ${(err as Error).message}`;
          log.warn(`BGP: BGPPeer ${peer.name}: running without BFD: ${reason}`, { rule: "bfd-unavailable" });
          return undefined;
        }
        endpoints.set(local, entry);
      }
      const held = entry;
      held.sessions++;
      const bfdLog = log.with({ peer: peer.name });
      const bfd = held.endpoint.session({
        peerAddress: session.peerAddress,
        config,
        client,
        onDecision: ({ rule, reason }) =>
          bfdLog.v(ROUTINE_BFD_RULES.has(rule) ? 6 : 2)?.(`BFD: ${rule}${reason ? `: ${reason}` : ""}`, { rule }),
      });
      return {
        ...bfd,
        stop() {
          bfd.stop();
          if (--held.sessions > 0) return;
          held.endpoint.close();
          endpoints.delete(local);
        },
      };
    },
    close() {
      for (const { endpoint } of endpoints.values()) endpoint.close();
      endpoints.clear();
    },
  };
}
