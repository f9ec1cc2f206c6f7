// Layer-2 pool addresses against hostile actors, each acting as itself on the real local cluster (l2-cluster.ts: the
// chart as shipped with loadBalancer.l2.enabled, real kubelets, containerd and kube-proxy in the nodes' namespaces),
// one cluster, the cases in order, each removing what it made:
// - a foreign host on the nodes' public segment (a namespace of its own on the cluster's bridge, like the client
//   host) that already answers ARP for a pool address when a Service asks for it: the Service gets the Warning
//   AddressInUseOnNetwork, the pool's status.conflicts lists it, the announcer's Node the Warning AddressConflict, its
//   agent refuses it again at each reprobe, and no node answers for it until the host lets it go;
// - the foreign host claiming (gratuitous ARP) an address a node announces: reported (AddressClaimed about the Node,
//   once, the agent's conflicts metric, AddressInUseOnNetwork on the Service), never fought over (no gratuitous ARP
//   back from the node, which keeps answering, and nothing moves);
// - a namespace editor (RBAC `edit`, its own ServiceAccount token) asking a pool that covers the whole segment and
//   part of the Service CIDR (an operator's slip) for the segment's gateway, network and broadcast addresses, a
//   node's address and the `kubernetes` Service's ClusterIP: each refused by its rule in an Event the editor reads,
//   no address written, and no node answers ARP for any of them but the node whose address it is;
// - a tenant's pod flooding the agent's and the controller's secure /metrics with made-up bearer tokens while
//   Prometheus scrapes as the chart's ServiceMonitor does (its ServiceAccount bound to local-ccm-metrics-reader, the
//   chart's CA and the program's name verified): every scrape answered, a rotated token too;
// - the editor setting, changing or removing `local-ccm.io/announcer` (label or annotation) on its own Service:
//   refused by the chart's ValidatingAdmissionPolicy, and only the node the controller chose ever answers.
// A prober on the client host's link (arp-prober.ts) asks for each address five times a second and records every
// answer and gratuitous ARP by MAC. kube-proxy runs in iptables mode only: none of these paths crosses its rules (ARP
// is answered by the agent's packet socket, the metrics servers listen in the host network or a pod's, admission is
// the API server's), so the nftables mode would test nothing more.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { after, before, describe, test } from "node:test";
import type { Event, Pod, Service } from "kubernetes-types/core/v1.js";
import { AGNHOST_IMAGE } from "../../localcluster/agnhost.ts";
import type { Cluster } from "../../localcluster/cluster.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import { editorClient, namespaceEditor } from "../../localcluster/editor.ts";
import { run } from "../../localcluster/exec.ts";
import { nodeMac } from "../../localcluster/layer2.ts";
import { metricsScraperToken, parseMetrics, scrapeSecure } from "../../localcluster/metrics.ts";
import { CONTROLLER_APP, listPods, NAMESPACE, podReady } from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { TAKEOVER_SCHEDULE_MS } from "../../src/agent/announcer/arp-ndp/decide.ts";
import type { KubeClient } from "../../src/kube/client.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { L2_CLASS, REQUESTED_IPS_ANNOTATION } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION, ANNOUNCER_LABEL } from "../../src/pools/announcement.ts";
import { inUseLine } from "../../src/pools/inuse.ts";
import { sleep } from "../../src/time/backoff.ts";
import { denial } from "../deploy/refused.ts";
import { fixtureTool } from "../netns/fixture-tool.ts";
import { createNetwork, type Host, type Network } from "../netns/netns.ts";
import type { ProbeLine } from "./arp-prober.ts";
import {
  announcerOf,
  answeringMacs,
  getService,
  l2Service,
  probeFindings,
  startL2Cluster,
  startProber,
  WAIT_MS,
  waitForAnnouncer,
  waitForClientAt,
  WORKERS,
} from "./l2-cluster.ts";

const TENANT = "tenant-a";
/** The programs' secure metrics as the chart serves them: port, the name in the chart's certificate, prefix. */
const AGENT_METRICS = { port: 10265, servername: `local-ccm-metrics.${NAMESPACE}.svc`, prefix: "local_ccm" };
const CONTROLLER_METRICS = {
  port: 10266,
  servername: `${CONTROLLER_APP}-metrics.${NAMESPACE}.svc`,
  prefix: "node_lifecycle_controller",
};
/** Prometheus's ServiceAccount (localcluster/metrics.ts makes it in "monitoring"). */
const PROMETHEUS = "prometheus";

/**
 * The tenant's flood: four loops, each sending a new made-up bearer token to every URL as fast as answers come
 * (curl from agnhost's image, as upstream's e2e tests use it); one line per request, "<url> <HTTP status>".
 */
const FLOOD_SCRIPT = `
for worker in 1 2 3 4; do
  ( i=0
    while :; do
      i=$((i+1))
      for url in $URLS; do
        echo "$url $(curl -k -s -o /dev/null -m 5 -w '%{http_code}' -H "Authorization: Bearer $SEED.$worker.$i" "$url")"
      done
    done ) &
done
wait`;

/** The Events of `type` Warning about `name` with `reason` (a Node's are in "default"), as `client` reads them. */
async function warnings(client: KubeClient, namespace: string, name: string, reason: string): Promise<Event[]> {
  const selector = encodeURIComponent(`involvedObject.name=${name},reason=${reason},type=Warning`);
  const path = `/api/v1/namespaces/${namespace}/events?fieldSelector=${selector}`;
  return (await client.request<{ items: Event[] }>({ method: "GET", path })).items;
}

/** l2Service `name` asking for `ip` by annotation. */
function requesting(name: string, ip: string) {
  const service = l2Service(name);
  return { ...service, metadata: { ...service.metadata, annotations: { [REQUESTED_IPS_ANNOTATION]: ip } } };
}

/** A Service of the L2 class in the tenant's namespace, with no backends (no ARP answer needs one). */
const tenantService = (name: string, metadata: Service["metadata"] = {}, spec: Service["spec"] = {}): Service => ({
  metadata: { ...metadata, name },
  spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port: 80, protocol: "TCP" }], ...spec },
});

/** The gratuitous ARPs (announcements) of `mac` a prober heard. */
const announcedBy = (lines: readonly ProbeLine[], mac: string) =>
  lines.filter((line) => line.kind === "announcement" && line.mac === mac);

describe("layer-2 pool addresses against a foreign host, a namespace editor and a token flood (iptables mode)", () => {
  let cluster: Cluster;
  let net: Network;
  /** The foreign host: its namespace, its link on the cluster's bridge, that link's MAC. */
  let foreign: { host: Host; link: string; mac: string };
  let tenant: KubeClient;
  let tenantServices: Resource<Service>;
  /** Prometheus's token and the chart's CA, as the chart's ServiceMonitor scrapes. */
  let scraper: { token: string; ca: string };
  /** Probers and fixture tools, stopped here too when a case failed before stopping its own. */
  const running: { stop(): Promise<unknown> }[] = [];

  /** The first three octets of the public segment, where the pool, the client and the foreign host are. */
  const segment = () => clusterLayout(cluster.slot).publicGateway.replace(/\.1$/, "");

  before(async () => {
    cluster = await startL2Cluster("iptables");
    net = await createNetwork();
    const host = await net.host();
    // .3: no node's (.10 up), the client's (.2) or the pool's (.240-.250).
    const link = await net.link("root", host, { addressesB: [`${segment()}.3/24`] });
    await run("ip", ["link", "set", link.nameA, "master", clusterLayout(cluster.slot).bridge]);
    const [shown] = JSON.parse(await host.ip("-json", "link", "show", link.nameB)) as { address: string }[];
    foreign = { host, link: link.nameB, mac: shown?.address ?? "" };
    tenant = await editorClient(await namespaceEditor(cluster.controlPlane, TENANT), { maxRetries: 0 });
    tenantServices = new Resource<Service>(tenant, { ...SERVICE_RESOURCE, namespace: TENANT });
    const token = await metricsScraperToken(cluster.controlPlane, PROMETHEUS, { granted: true });
    const secret = JSON.parse(
      await cluster.kubectl(["get", "secret", "local-ccm-metrics-tls", "--namespace", NAMESPACE, "-o", "json"]),
    ) as { data: Record<string, string> };
    scraper = { token, ca: Buffer.from(secret.data["ca.crt"] ?? "", "base64").toString("utf8") };
  });

  after(async () => {
    for (const each of running.splice(0)) await each.stop();
    tenant?.close();
    await net?.remove();
    await cluster?.stop();
  });

  /** A prober on the client's link asking for `ip`. */
  const probe = (ip: string) => {
    const prober = startProber(cluster, ip);
    running.push(prober);
    return prober;
  };
  /** Until `prober` has asked `count` more times from now: what was heard meanwhile is in its lines. */
  const askedAgain = async (prober: ReturnType<typeof startProber>, count = 10) => {
    const asked = () => prober.lines().filter((line) => line.kind === "request").length;
    const from = asked();
    await waitFor(`${count} more ARP requests`, () => asked() >= from + count, WAIT_MS, 100);
  };
  const macOf = async (node: string) => (await nodeMac(cluster, node)) as string;
  const poolConflicts = async (pool: string) => {
    const read = JSON.parse(await cluster.kubectl(["get", "loadbalancerippool", pool, "-o", "json"])) as {
      status?: { conflicts?: string[] };
    };
    return read.status?.conflicts ?? [];
  };
  /** GET a program's /metrics as the chart's ServiceMonitor does: the chart's CA, the program's name, a token. */
  const scrape = (url: string, servername: string, token = scraper.token) =>
    scrapeSecure(url, token, { ca: scraper.ca, servername });
  /** What the agent on `node` counted of another MAC claiming an address, before announcing it or after. */
  const conflictsCounted = async (node: string, phase: "probing" | "announced") => {
    const url = `https://${cluster.node(node).ip}:${AGENT_METRICS.port}/metrics`;
    const { status, body } = await scrape(url, AGENT_METRICS.servername);
    assert.equal(status, 200, body);
    return parseMetrics(body).get(`local_ccm_l2_address_conflicts_total{phase="${phase}",rule="arp-sender"}`) ?? 0;
  };
  /**
   * Until there are Warnings `reason` about `name` whose message `matches`, as `reader` reads them (a Node's are in
   * "default"): those.
   */
  const waitForWarning = (
    name: string,
    reason: string,
    matches: (message: string) => boolean,
    reader = { client: cluster.admin, namespace: "default" },
  ) =>
    waitFor(
      `the Warning ${reason} about ${name}`,
      async () => {
        const events = await warnings(reader.client, reader.namespace, name, reason);
        const found = events.filter((event) => matches(event.message ?? ""));
        return found.length > 0 && found;
      },
      WAIT_MS,
      250,
    );
  const naming = (...parts: string[]) => (message: string) => parts.every((part) => message.includes(part));

  test("a foreign host holding a pool address: the Service told, the pool lists it, no node answers", async (t) => {
    const held = `${segment()}.250`;
    const device = ["dev", foreign.link];
    await foreign.host.ip("address", "add", `${held}/24`, ...device);
    let holding = true;
    try {
      const prober = probe(held);
      const heard = () => answeringMacs(prober.lines()).includes(foreign.mac);
      await waitFor(`the prober hearing the foreign host at ${held}`, heard, WAIT_MS, 100);
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(requesting("held", held)));
      const { ip, announcer } = await waitForAnnouncer(cluster, "held");
      assert.equal(ip, held);
      const answered = `another host (${foreign.mac}) answers for ${held} on the segment of node ${announcer}`;
      await waitForWarning("held", "AddressInUseOnNetwork", naming(answered));
      const line = inUseLine({ service: "default/held", address: held, mac: foreign.mac, node: announcer });
      await waitFor("the pool's conflicts listing it", async () => (await poolConflicts("public")).includes(line),
        WAIT_MS, 250);
      const conflict = naming(`${held} `, foreign.mac, "default/held");
      const [event] = await waitForWarning(announcer, "AddressConflict", conflict);
      t.diagnostic(`${announcer}: ${event?.message}`);
      // Refused again at each reprobe: never announced in between.
      const refusals = await conflictsCounted(announcer, "probing");
      assert.ok(refusals > 0, "the refusal counted");
      await waitFor("a reprobe refused", async () => (await conflictsCounted(announcer, "probing")) > refusals,
        WAIT_MS, 500);
      const lines = await prober.stop();
      t.diagnostic(`${lines.filter((l) => l.kind === "request").length} ARP requests, answered by ` +
        `${answeringMacs(lines).join(", ")} (the foreign host: ${foreign.mac})`);
      assert.deepEqual(answeringMacs(lines), [foreign.mac], "only the foreign host answered");

      // It lets go: the announcer's next probe finds nobody, it announces, and the pool's line goes.
      await foreign.host.ip("address", "del", `${held}/24`, ...device);
      holding = false;
      await waitForClientAt(cluster, held, announcer);
      await waitFor("the pool's line gone", async () => !(await poolConflicts("public")).includes(line), WAIT_MS, 250);
    } finally {
      if (holding) await foreign.host.ip("address", "del", `${held}/24`, ...device);
      await cluster.kubectl(["delete", "service", "held", "--ignore-not-found"]);
    }
  });

  test("a foreign host claiming an announced address: reported (Warnings, metric), never fought over", async (t) => {
    const claimed = `${segment()}.249`;
    // Asking from before the Service: it hears every takeover announcement of the node.
    const prober = probe(claimed);
    const claimer = fixtureTool(foreign.host.name, "claimer", foreign.link);
    running.push(claimer);
    try {
      await claimer.ready();
      await askedAgain(prober, 1);
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(requesting("claimed", claimed)));
      const { ip, announcer } = await waitForAnnouncer(cluster, "claimed");
      assert.equal(ip, claimed);
      const mac = await macOf(announcer);
      const all = TAKEOVER_SCHEDULE_MS.length;
      await waitFor(`${announcer}'s ${all} takeover announcements`,
        () => announcedBy(prober.lines(), mac).length >= all, WAIT_MS, 100);
      const counted = await conflictsCounted(announcer, "announced");
      const claimedAt = Date.now();
      const claims = 3;
      for (let i = 0; i < claims; i++) await claimer.send(`claim ${claimed}`);
      const countedAll = async () => (await conflictsCounted(announcer, "announced")) >= counted + claims;
      await waitFor("the claims counted", countedAll, WAIT_MS, 500);
      // Told once a minute per address and MAC however many claims: one Event, about the announcer's Node.
      const [event, ...more] = await waitForWarning(announcer, "AddressClaimed", naming(`${claimed} `, foreign.mac));
      assert.deepEqual([event?.count, more], [1, []]);
      t.diagnostic(`${announcer}: ${event?.message}`);
      const answered = `another host (${foreign.mac}) answers for ${claimed} on the segment of node ${announcer}`;
      await waitForWarning("claimed", "AddressInUseOnNetwork", naming(answered));
      const line = inUseLine({ service: "default/claimed", address: claimed, mac: foreign.mac, node: announcer });
      await waitFor("the pool's conflicts listing it", async () => (await poolConflicts("public")).includes(line),
        WAIT_MS, 250);

      // The node's frames reach the client in the order sent: once it answered requests asked after the reports,
      // anything it sent back at the claims would be there too.
      await askedAgain(prober);
      const lines = await prober.stop();
      const since = lines.filter((each) => each.atMs >= claimedAt);
      t.diagnostic(`after the claims: ${announcedBy(since, foreign.mac).length} gratuitous ARPs of the foreign host, ` +
        `${announcedBy(since, mac).length} of ${announcer}, ${since.filter((l) => l.kind === "reply").length} replies`);
      assert.equal(announcedBy(since, foreign.mac).length, claims, "the prober heard the claims");
      assert.deepEqual(announcedBy(since, mac), [], `${announcer} sent no gratuitous ARP back`);
      const replies = since.filter((each) => each.kind === "reply");
      assert.ok(replies.length > 0, "requests answered after the claims");
      assert.deepEqual(answeringMacs(replies), [mac], `only ${announcer} answers requests`);
      assert.deepEqual(probeFindings(lines).dualAnswers, []);
      assert.equal(announcerOf(await getService(cluster, "claimed")), announcer, "nothing moved");
    } finally {
      await claimer.stop();
      await prober.stop();
      await cluster.kubectl(["delete", "service", "claimed", "--ignore-not-found"]);
    }
  });

  test("a namespace editor asking for addresses the network uses: refused by their rules, none announced", async (t) => {
    const layout = clusterLayout(cluster.slot);
    const prefix = segment();
    const clusterIP = layout.serviceNetwork.replace(/\.0\/24$/, ".1"); // the `kubernetes` Service's
    const node = WORKERS[0] as string;
    const nodeIP = cluster.node(node).publicIP;
    const of = `segment ${prefix}.0/24 (node `;
    const [bridgeMac, nodeMacs] = [
      (await readFile(`/sys/class/net/${layout.bridge}/address`, "utf8")).trim(),
      await Promise.all(cluster.nodes.map(({ name }) => macOf(name))),
    ];
    // Each ask, the start of the refusal it must get, and who really holds the address (must be heard, alone).
    const asks = [
      { name: "gateway", ip: `${prefix}.1`, holder: bridgeMac,
        refusal: `refused (gateway): ${prefix}.1 is the default gateway of ${of}` },
      { name: "network", ip: `${prefix}.0`,
        refusal: `refused (network-address): ${prefix}.0 is the network address of ${of}` },
      { name: "broadcast", ip: `${prefix}.255`, byField: true,
        refusal: `refused (broadcast-address): ${prefix}.255 is the broadcast address of ${of}` },
      { name: "node", ip: nodeIP, holder: await macOf(node),
        refusal: `refused (node-address): ${nodeIP} is an address of node ${node}` },
      { name: "cluster-ip", ip: clusterIP,
        refusal: `refused (service-cidr): ${clusterIP} is in Service CIDR ${layout.serviceNetwork} (ServiceCIDR ` +
          "kubernetes)" },
    ];
    // An operator's slip: a pool over the whole segment and a part of the Service CIDR.
    const slip = {
      apiVersion: "local-ccm.io/v1alpha1",
      kind: "LoadBalancerIPPool",
      metadata: { name: "slip" },
      spec: { addresses: [`${prefix}.0/24`, layout.serviceNetwork.replace(/\.0\/24$/, ".0/28")] },
    };
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(slip));
    const probers = asks.map(({ ip }) => probe(ip));
    try {
      // As the editor itself: by annotation, and by spec.loadBalancerIP (deprecated, still read).
      for (const { name, ip, byField } of asks)
        await tenantServices.create(
          byField
            ? tenantService(name, {}, { loadBalancerIP: ip })
            : tenantService(name, { annotations: { [REQUESTED_IPS_ANNOTATION]: ip } }),
        );
      for (const { name, refusal } of asks) {
        // The editor reads its own Events.
        const reader = { client: tenant, namespace: TENANT };
        const refused = (message: string) => message.startsWith(refusal);
        const [event] = await waitForWarning(name, "AllocationFailed", refused, reader);
        t.diagnostic(`${name}: ${event?.message}`);
        const service = await tenantServices.get(name);
        assert.deepEqual(service.status?.loadBalancer?.ingress ?? [], [], `${name} got no address`);
        assert.equal(announcerOf(service), undefined, `${name} has no announcer`);
      }
      for (const prober of probers) await askedAgain(prober);
      for (const [index, { name, ip, holder }] of asks.entries()) {
        const lines = await (probers[index] as ReturnType<typeof startProber>).stop();
        const macs = answeringMacs(lines);
        t.diagnostic(`${name} ${ip}: answered by ${macs.join(", ") || "nobody"}`);
        if (holder !== undefined) assert.ok(macs.includes(holder), `${ip}: its holder ${holder} heard`);
        const nodesAnswering = macs.filter((mac) => nodeMacs.includes(mac) && mac !== holder);
        assert.deepEqual(nodesAnswering, [], `${ip}: no node answers but its holder`);
      }
    } finally {
      for (const prober of probers) await prober.stop();
      for (const { name } of asks) await tenantServices.delete(name).catch(() => {});
      await cluster.kubectl(["delete", "loadbalancerippool", "slip", "--ignore-not-found", "--timeout=120s"]);
    }
  });

  test("a tenant's pod flooding both programs' /metrics with made-up tokens: Prometheus never refused", async (t) => {
    const controllers = (await listPods(cluster, CONTROLLER_APP)).filter(podReady);
    assert.ok(controllers.length > 0, "a controller runs");
    const agentNode = WORKERS[0] as string;
    const targets = [
      { name: `the agent on ${agentNode}`, ...AGENT_METRICS,
        url: `https://${cluster.node(agentNode).ip}:${AGENT_METRICS.port}/metrics` },
      ...controllers.map((pod) => ({ name: `controller ${pod.metadata?.name}`, ...CONTROLLER_METRICS,
        url: `https://${pod.status?.podIP}:${CONTROLLER_METRICS.port}/metrics` })),
    ];
    // Prometheus scrapes before the flood, as it would have all along.
    for (const target of targets) {
      const { status, body } = await scrape(target.url, target.servername);
      assert.equal(status, 200, `${target.name}: ${body}`);
    }
    let token = scraper.token;
    const scrapes: { target: string; status: number; rotated: boolean; error?: string }[] = [];
    const latest = new Map<string, string>();
    let scraping = true;
    const scrapeLoop = (async () => {
      while (scraping) {
        const started = Date.now();
        for (const target of targets) {
          const used = token;
          const answer = await scrape(target.url, target.servername, used).catch((err: unknown) => ({
            status: 0,
            body: (err as Error).message,
          }));
          const rotated = used !== scraper.token;
          scrapes.push({ target: target.name, status: answer.status, rotated,
            ...(answer.status !== 200 && { error: answer.body.split("\n")[0] }) });
          if (answer.status === 200) latest.set(target.name, answer.body);
        }
        await sleep(Math.max(0, 1000 - (Date.now() - started))); // a scrape a second, far more than Prometheus
      }
    })();
    const pods = `/api/v1/namespaces/${TENANT}/pods`;
    const flood: Pod = {
      metadata: { name: "token-flood" },
      spec: {
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 0,
        containers: [{
          name: "flood",
          image: AGNHOST_IMAGE,
          command: ["/bin/sh", "-c", FLOOD_SCRIPT],
          env: [
            { name: "URLS", value: targets.map(({ url }) => url).join(" ") },
            { name: "SEED", value: randomBytes(12).toString("base64url") },
          ],
        }],
      },
    };
    /** What the flood got so far, from its log: per URL, per HTTP status, how many. */
    const floodStatuses = async () => {
      const counts = new Map<string, Map<string, number>>();
      const log = await cluster.kubectl(["logs", "token-flood", "--namespace", TENANT]);
      for (const [url = "", status = ""] of log.split("\n").filter(Boolean).map((line) => line.split(" "))) {
        const byStatus = counts.get(url) ?? new Map<string, number>();
        counts.set(url, byStatus.set(status, (byStatus.get(status) ?? 0) + 1));
      }
      return counts;
    };
    const sent = (byStatus?: Map<string, number>) => [...(byStatus?.values() ?? [])].reduce((a, b) => a + b, 0);
    let statuses: Map<string, Map<string, number>>;
    try {
      // As the tenant itself: its `edit` grant creates pods.
      await tenant.request({ method: "POST", path: pods, body: flood });
      await waitFor("the flood running", async () => {
        const pod = await tenant.request<Pod>({ method: "GET", path: `${pods}/token-flood` });
        return pod.status?.phase === "Running";
      }, WAIT_MS, 500);
      const budgetSpent = (target: (typeof targets)[number]) => {
        const series = `${target.prefix}_metrics_requests_refused_total{code="429",rule="review-rate-source"}`;
        return (parseMetrics(latest.get(target.name) ?? "").get(series) ?? 0) > 0;
      };
      await waitFor("the flood past its address's review budget at every target", () => targets.every(budgetSpent),
        WAIT_MS, 500);
      // Prometheus's token rotates (kubelet refreshes projected tokens): the new one is reviewed meanwhile.
      token = (await cluster.kubectl(["create", "token", PROMETHEUS, "--namespace", "monitoring"])).trim();
      const rotatedScrapes = (name: string) => scrapes.filter((each) => each.target === name && each.rotated).length;
      await waitFor("ten scrapes of each target with the rotated token",
        () => targets.every(({ name }) => rotatedScrapes(name) >= 10), WAIT_MS, 500);
      // Many: a hundred made-up tokens at each target while Prometheus scrapes on.
      statuses = await waitFor("a hundred requests of the flood at each target", async () => {
        const read = await floodStatuses();
        return targets.every(({ url }) => sent(read.get(url)) >= 100) && read;
      }, WAIT_MS, 2000);
    } finally {
      scraping = false;
      await scrapeLoop;
      await tenant.request({ method: "DELETE", path: `${pods}/token-flood` }).catch(() => {});
    }
    for (const target of targets)
      t.diagnostic(`${target.name}: the flood got ${JSON.stringify([...(statuses.get(target.url) ?? [])])}; ` +
        `Prometheus ${scrapes.filter((each) => each.target === target.name).length} scrapes`);
    assert.deepEqual(scrapes.filter((each) => each.status !== 200), [], "Prometheus refused");
    for (const target of targets) {
      const got = statuses.get(target.url) ?? new Map<string, number>();
      assert.equal(got.get("200"), undefined, `${target.name} served the flood`);
      assert.ok((got.get("401") ?? 0) > 0 && (got.get("429") ?? 0) > 0, `${target.name}: ${JSON.stringify([...got])}`);
    }
  });

  test("a namespace editor pointing the announcer elsewhere: refused by the chart's policy, none claims", async (t) => {
    await tenantServices.create(tenantService("own"));
    try {
      const { ip, announcer } = await waitForAnnouncer(cluster, "own", undefined, TENANT);
      const other = WORKERS.find((name) => name !== announcer) as string;
      const mac = await macOf(announcer);
      const prober = probe(ip);
      await waitFor(`the prober hearing ${announcer}`, () => answeringMacs(prober.lines()).includes(mac), WAIT_MS, 100);
      const shown = (value: string | null) => (value === null ? "none" : `"${value}"`);
      /** Refused by the policy, naming its rule and the change. */
      const assertRefused = async (what: "label" | "annotation", from: string | null, to: string | null,
        request: () => Promise<unknown>) => {
        const message = await denial(request);
        t.diagnostic(message);
        assert.ok(message.includes("ValidatingAdmissionPolicy"), message);
        assert.ok(message.endsWith(`(rule announcer-${what}): ${shown(from)} -> ${shown(to)}`), message);
      };
      const patch = (body: unknown, type: "merge" | "json" = "merge") => () => tenantServices.patch("own", type, body);
      await assertRefused("label", null, other,
        () => tenantServices.create(tenantService("pointed", { labels: { [ANNOUNCER_LABEL]: other } })));
      await assertRefused("annotation", null, other,
        () => tenantServices.create(tenantService("pointed", { annotations: { [ANNOUNCER_ANNOTATION]: other } })));
      await assertRefused("label", announcer, other, patch({ metadata: { labels: { [ANNOUNCER_LABEL]: other } } }));
      await assertRefused("annotation", announcer, other,
        patch({ metadata: { annotations: { [ANNOUNCER_ANNOTATION]: other } } }));
      const removal = [{ op: "remove", path: `/metadata/labels/${ANNOUNCER_LABEL.replace("/", "~1")}` }];
      await assertRefused("label", announcer, null, patch(removal, "json"));

      const service = await tenantServices.get("own");
      assert.equal(announcerOf(service), announcer);
      assert.equal(service.metadata?.labels?.[ANNOUNCER_LABEL], announcer);
      await askedAgain(prober);
      const lines = await prober.stop();
      assert.deepEqual(answeringMacs(lines), [mac], `only ${announcer} answered`);
      assert.deepEqual(probeFindings(lines), { dualAnswers: [], returns: [] });
    } finally {
      await tenantServices.delete("own").catch(() => {});
    }
  });
});
