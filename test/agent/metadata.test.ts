// Node metadata end to end: the agent in a node's network namespace, the instance metadata services
// in that same namespace at 169.254.169.254 (metadata-server.ts; nothing is routed there from
// elsewhere), the real control plane under the RBAC and admission policy we ship.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Event, Node } from "kubernetes-types/core/v1.js";
import { scrapeMetrics } from "../../localcluster/metrics.ts";
import { Resource } from "../../src/kube/resource.ts";
import { waitFor } from "../../localcluster/wait.ts";
import {
  type AgentProcess,
  type MetadataServer,
  metadataStatus,
  type NodeHost,
  type Registration,
  readyz,
  registerNode,
  startAgent,
  startMetadataServer,
  startWorld,
  type World,
} from "./harness.ts";
import { type Fault, INSTANCES, METADATA_IP } from "./metadata-server.ts";
import { isUninitialized } from "../../src/kube/nodes.ts";

/** No ExternalIP to look for: the node has no route but to the apiserver and its own metadata service. */
const AIR_GAPPED = ["--external-ip-target="];
const POLICY = path.resolve(import.meta.dirname, "../../deploy/node-scope-policy.yaml");
/** An agent that hangs is stopped after this, so that the test fails instead of stalling. */
const RUN_ONCE_LIMIT_MS = 30_000;
const HEALTH_PORT = 10263;
const LABEL_KEYS = {
  region: "topology.kubernetes.io/region",
  zone: "topology.kubernetes.io/zone",
  instanceType: "node.kubernetes.io/instance-type",
} as const;

/** The Node's metadata as "providerID" and "label=value" lines, the metadata labels only. */
function metadataOf(node: Node): { providerID?: string; labels: Record<string, string> } {
  const labels = Object.fromEntries(
    Object.entries(LABEL_KEYS).flatMap(([field, key]) => {
      const value = node.metadata?.labels?.[key];
      return value === undefined ? [] : [[field, value]];
    }),
  );
  return { ...(node.spec?.providerID ? { providerID: node.spec.providerID } : {}), labels };
}

describe("node metadata from instance metadata services and rules", () => {
  let world: World;
  let events: Resource<Event>;
  let slot = 10;
  const eventsFor = async (name: string) =>
    (await events.list({ fieldSelector: `involvedObject.name=${name}` })).items.map((e) => `${e.reason}: ${e.message}`);
  /** The node's Events of `reason`, once there is one: a running agent writes them after the metric has counted. */
  const eventsOnceThere = (name: string, reason: string) =>
    waitFor(`a ${reason} Event of ${name}`, async () => {
      const found = (await eventsFor(name)).filter((e) => e.startsWith(`${reason}: `));
      return found.length > 0 && found;
    }, 20_000, 250);
  // Air-gapped: no default route, so no request of the agent can leave the node's namespace.
  const nodeHost = () => world.nodeHost(slot++, { airGapped: true });

  before(async () => {
    world = await startWorld();
    await world.plane.kubectl(["apply", "-f", POLICY]);
    events = new Resource<Event>(world.plane.admin, { group: "", version: "v1", plural: "events", namespace: "default" });
  });
  after(async () => {
    await world?.stop();
  });

  /** Registers `name`, runs the agent once with `args` and returns its exit code and the Node after. */
  async function runOnce(node: NodeHost, name: string, args: string[], registration: Registration = {}, kubeletIP?: string) {
    await registerNode(world.nodes, name, kubeletIP ?? `198.18.100.${slot}`, { on: node, ...registration });
    // The agent runs with a Pod-bound token, so the node-scope policy applies to it.
    const kubeconfig = await world.podBoundKubeconfig(node, name);
    const started = performance.now();
    const agent = startAgent(node, [`--node-name=${name}`, "--run-once", ...AIR_GAPPED, ...args], { kubeconfig });
    let stoppedByGuard = false;
    const hung = setTimeout(() => {
      stoppedByGuard = true;
      void agent.stop();
    }, RUN_ONCE_LIMIT_MS);
    const code = await agent.exited;
    clearTimeout(hung);
    const elapsedMs = performance.now() - started;
    return { code, elapsedMs, stoppedByGuard, output: agent.output(), node: await world.nodes.get(name) };
  }

  /** The agent `name` running on `node`, with its health server (and /metrics) at node.reachableAt. */
  async function startLongRunning(node: NodeHost, name: string, args: string[]): Promise<AgentProcess> {
    const flags = [
      `--node-name=${name}`,
      ...AIR_GAPPED,
      `--health-bind-address=${node.reachableAt}:${HEALTH_PORT}`,
      `--metrics-bind-address=${node.reachableAt}:${HEALTH_PORT}`,
      "--secure-metrics=false",
      "--reconcile-interval=500ms",
      ...args,
    ];
    return startAgent(node, flags, { kubeconfig: await world.podBoundKubeconfig(node, name) });
  }

  /**
   * Registers `name`, starts `provider`'s service on `node` failing with `fault`, and the agent asking it
   * with a 3 s bound; runs `body`, then stops both.
   */
  async function withFailingService(
    node: NodeHost,
    name: string,
    provider: keyof typeof INSTANCES,
    fault: Fault,
    body: (server: MetadataServer) => Promise<void>,
    mode: "auto" | keyof typeof INSTANCES = provider,
  ): Promise<void> {
    await registerNode(world.nodes, name, `198.18.100.${slot}`, { on: node });
    const server = await startMetadataServer(node, [provider], fault);
    try {
      const agent = await startLongRunning(node, name, [`--instance-metadata=${mode}`, "--metadata-timeout=3s"]);
      try {
        await body(server);
      } finally {
        await agent.stop();
      }
    } finally {
      await server.stop();
    }
  }

  /** One series of the agent's /metrics on `node` (0 until it has been counted). */
  async function metricOf(node: NodeHost, series: string): Promise<number> {
    return (await scrapeMetrics(`${node.reachableAt}:${HEALTH_PORT}`)).get(series) ?? 0;
  }

  /**
   * Every state the Node `name` passes through from `resourceVersion` until it loses the taint; the
   * watch sees each write, so a half-initialised Node would show up here.
   */
  async function statesUntilInitialised(name: string, resourceVersion: string | undefined): Promise<Node[]> {
    const states: Node[] = [];
    const stream = world.nodes.watch({ fieldSelector: `metadata.name=${name}`, resourceVersion, timeoutSeconds: 30 });
    for await (const event of stream) {
      if (event.type !== "MODIFIED") continue;
      states.push(event.object);
      if (!isUninitialized(event.object)) return states;
    }
    throw new Error(`node ${name} still has the uninitialized taint after 30 s`);
  }

  /** The Node's states until initialised: before, the taint and no metadata; then the metadata without it. */
  async function assertInitialisedInOneWrite(name: string, before: Node, provider: keyof typeof INSTANCES) {
    const states = await statesUntilInitialised(name, before.metadata?.resourceVersion);
    const { providerID, labels } = INSTANCES[provider];
    for (const state of states.slice(0, -1)) {
      assert.equal(isUninitialized(state), true);
      assert.deepEqual(metadataOf(state), { labels: {} }, "no metadata written before the taint goes");
    }
    const initialised = states.at(-1) as Node;
    assert.deepEqual(metadataOf(initialised), { providerID, labels });
    assert.equal(isUninitialized(initialised), false);
  }

  for (const provider of ["hetzner", "aws", "azure", "gce", "openstack"] as const) {
    test(`${provider}: the providerID and labels its CCM would write, the taint removed in the same write`, async () => {
      const node = await nodeHost();
      const server = await startMetadataServer(node, [provider]);
      try {
        const name = `meta-${provider}`;
        const result = await runOnce(node, name, [`--instance-metadata=${provider}`, "--metadata-timeout=5s"]);
        assert.equal(result.code, 0, result.output);
        const { providerID, labels } = INSTANCES[provider];
        assert.deepEqual(metadataOf(result.node), { providerID, labels });
        assert.equal(isUninitialized(result.node), false);
        assert.ok((await eventsFor(name)).some((e) => e.startsWith("MetadataSet: ")));
      } finally {
        await server.stop();
      }
    });
  }

  test("the services enforce their rules: without the token or header, or on unknown paths, nothing", async () => {
    const node = await nodeHost();
    const server = await startMetadataServer(node, ["aws", "azure", "gce", "hetzner"]);
    try {
      const asked = {
        "aws without a token": await metadataStatus(node, "GET", "/latest/meta-data/instance-id"),
        "aws token without a ttl": await metadataStatus(node, "PUT", "/latest/api/token"),
        "aws with a wrong token": await metadataStatus(node, "GET", "/latest/meta-data/instance-id", {
          "X-aws-ec2-metadata-token": "forged",
        }),
        "azure without Metadata: true": await metadataStatus(node, "GET", "/metadata/instance/compute?api-version=2021-02-01"),
        "azure without api-version": await metadataStatus(node, "GET", "/metadata/instance/compute", { Metadata: "true" }),
        "gce without Metadata-Flavor": await metadataStatus(node, "GET", "/computeMetadata/v1/instance/name"),
        "gce with the wrong flavor": await metadataStatus(node, "GET", "/computeMetadata/v1/instance/name", {
          "Metadata-Flavor": "Amazon",
        }),
        "an unknown path": await metadataStatus(node, "GET", "/hetzner/v1/metadata/private-networks"),
      };
      assert.deepEqual(asked, {
        "aws without a token": 401,
        "aws token without a ttl": 400,
        "aws with a wrong token": 401,
        "azure without Metadata: true": 400,
        "azure without api-version": 400,
        "gce without Metadata-Flavor": 403,
        "gce with the wrong flavor": 403,
        "an unknown path": 404,
      });
      assert.equal(await metadataStatus(node, "GET", "/computeMetadata/v1/instance/name", { "Metadata-Flavor": "Google" }), 200);
    } finally {
      await server.stop();
    }
  });

  test("auto picks the service that answers in its own format and ignores one answering in another", async () => {
    const node = await nodeHost();
    // The imposter answers Hetzner's paths (tried first) with a web page; GCE answers properly.
    const server = await startMetadataServer(node, ["imposter", "gce"]);
    try {
      const result = await runOnce(node, "meta-auto", ["--instance-metadata=auto", "--metadata-timeout=5s"]);
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(metadataOf(result.node), { providerID: INSTANCES.gce.providerID, labels: INSTANCES.gce.labels });
    } finally {
      await server.stop();
    }
  });

  test("auto with no service answering: metadata skipped with a reason, the node initialised", async () => {
    const node = await nodeHost();
    const result = await runOnce(node, "meta-none", ["--instance-metadata=auto", "--metadata-timeout=1s"]);
    assert.equal(result.code, 0, result.output);
    assert.deepEqual(metadataOf(result.node), { labels: {} });
    assert.equal(isUninitialized(result.node), false);
    const skipped = (await eventsFor("meta-none")).find((e) => e.startsWith("MetadataSkipped: "));
    assert.match(skipped ?? "", /no instance metadata service answered in its provider's format \(hetzner: /);
  });

  test("a providerID someone else set and a label kubelet set are kept and reported; the rest is added", async () => {
    const node = await nodeHost();
    const server = await startMetadataServer(node, ["aws"]);
    try {
      const registration = { providerID: "kind://docker/kind/meta-kept", labels: { [LABEL_KEYS.zone]: "rack-9" } };
      const result = await runOnce(node, "meta-kept", ["--instance-metadata=aws", "--metadata-timeout=5s"], registration);
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(metadataOf(result.node), {
        providerID: "kind://docker/kind/meta-kept",
        labels: { zone: "rack-9", region: "eu-central-1", instanceType: "m5.large" },
      });
      const reasons = (await eventsFor("meta-kept")).map((e) => e.split(":")[0]).sort();
      assert.deepEqual(reasons, ["MetadataLabelKept", "MetadataSet", "ProviderIDMismatch", "TaintRemoved"]);
    } finally {
      await server.stop();
    }
  });

  test("--update-metadata-labels: the agent owns the labels and replaces a value someone else wrote", async () => {
    const node = await nodeHost();
    const server = await startMetadataServer(node, ["aws"]);
    try {
      const registration = { labels: { [LABEL_KEYS.zone]: "rack-9" } };
      const args = ["--instance-metadata=aws", "--update-metadata-labels"];
      const result = await runOnce(node, "meta-owned", args, registration);
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(metadataOf(result.node), { providerID: INSTANCES.aws.providerID, labels: INSTANCES.aws.labels });
    } finally {
      await server.stop();
    }
  });

  test("metadata down at start: taint kept, Event, --run-once exits 1; retried, and once it answers, initialised", async () => {
    const node = await nodeHost();
    const name = "meta-late";
    const once = await runOnce(node, name, ["--instance-metadata=azure", "--metadata-timeout=1s"]);
    assert.equal(once.code, 1);
    assert.match(once.output, /node metadata not applied: azure instance metadata did not answer within 1000 ms/);
    assert.equal(isUninitialized(once.node), true);
    assert.ok((await eventsFor(name)).some((e) => e.startsWith("MetadataUnavailable: azure instance metadata")));

    const agent = await startLongRunning(node, name, ["--instance-metadata=azure", "--metadata-timeout=1s"]);
    try {
      const unavailable = 'local_ccm_metadata_lookups_total{provider="azure",result="unavailable"}';
      await waitFor("two lookups that failed", async () => (await metricOf(node, unavailable)) >= 2, 60_000, 200);
      assert.equal(isUninitialized(await world.nodes.get(name)), true, "no taint removal without metadata");
      const server = await startMetadataServer(node, ["azure"]);
      try {
        const initialised = await waitFor("the node initialised", async () => {
          const n = await world.nodes.get(name);
          return !isUninitialized(n) && n;
        }, 30_000, 200);
        assert.deepEqual(metadataOf(initialised), { providerID: INSTANCES.azure.providerID, labels: INSTANCES.azure.labels });
        // At rest (three resyncs) the answer kept is used: no more requests to the service.
        const asked = server.requests();
        assert.deepEqual(asked, ["GET /metadata/instance/compute?api-version=2021-02-01&format=json 200"]);
        const ok = 'local_ccm_reconciles_total{result="ok"}';
        const from = await metricOf(node, ok);
        await waitFor("three more resyncs", async () => (await metricOf(node, ok)) >= from + 3, 60_000, 200);
        assert.deepEqual(server.requests(), asked);
      } finally {
        await server.stop();
      }
    } finally {
      await agent.stop();
    }
  });

  test("a service that takes connections and never answers: --run-once exits 1 within the bound", async (t) => {
    const node = await nodeHost();
    // "dribble" sends a byte every half second: no socket goes idle, only a bound on the whole exchange ends it.
    for (const fault of ["silent", "dribble"] as const) {
      const server = await startMetadataServer(node, ["aws"], fault);
      try {
        const name = `meta-${fault}`;
        const once = await runOnce(node, name, ["--instance-metadata=aws", "--metadata-timeout=3s"]);
        // Exiting by itself, not stopped by runOnce's 30 s guard: the bound ended the exchange.
        assert.equal(once.stoppedByGuard, false, `${fault}: still running after ${RUN_ONCE_LIMIT_MS} ms`);
        assert.equal(once.code, 1, once.output);
        t.diagnostic(`${fault}: --run-once exited after ${Math.round(once.elapsedMs)} ms`);
        assert.ok(once.elapsedMs >= 3000, `${fault}: gave up after ${once.elapsedMs} ms, before the bound`);
        const reason =
          "^local-ccm: node metadata not applied: aws instance metadata did not answer within 3000 ms " +
          "\\(aws: PUT /latest/api/token: no complete answer [^\\n]+\\)$";
        assert.match(once.output, new RegExp(reason, "m"), "one line naming the provider, the bound and the request");
        assert.doesNotMatch(once.output, /^\s+at /m, "no stack trace");
        assert.equal(isUninitialized(once.node), true);
        assert.deepEqual(metadataOf(once.node), { labels: {} });
        assert.ok((await eventsFor(name)).some((e) => e.startsWith("MetadataUnavailable: aws instance metadata")));
        assert.ok(server.requests().every((request) => request.endsWith(` ${fault}`)), server.requests().join("\n"));
      } finally {
        await server.stop();
      }
    }
  });

  test("a service that never answers: the agent keeps the taint, says why once, retries; answering, initialised", async () => {
    const node = await nodeHost();
    const name = "meta-hung";
    await withFailingService(node, name, "aws", "silent", async (server) => {
      const unavailable = 'local_ccm_metadata_lookups_total{provider="aws",result="unavailable"}';
      await waitFor("two lookups given up", async () => (await metricOf(node, unavailable)) >= 2, 20_000, 250);
      const tainted = await world.nodes.get(name);
      assert.equal(isUninitialized(tainted), true);
      assert.deepEqual(metadataOf(tainted), { labels: {} });
      const reported = await eventsOnceThere(name, "MetadataUnavailable");
      const why = /aws instance metadata did not answer within 3000 ms \(aws: PUT \/latest\/api\/token: /;
      assert.match(reported.join("\n"), why);
      // Each failed lookup is counted; the same reason is reported once, not with every retry.
      assert.equal(reported.length, 1, reported.join("\n"));
      const findings = await metricOf(node, 'local_ccm_metadata_findings_total{reason="MetadataUnavailable"}');
      assert.equal(findings, 1);
      assert.equal(await metricOf(node, "local_ccm_node_uninitialized"), 1, "the gauge the PrometheusRule alerts on");
      // Not ready while the taint stays for want of metadata: a rollout or `helm install --wait` does not succeed.
      const health = `${node.reachableAt}:${HEALTH_PORT}`;
      const notReady = await readyz(health);
      assert.equal(notReady.status, 503, notReady.body);
      assert.match(notReady.body, /^node "meta-hung" not initialised: no metadata yet: aws instance metadata did not answer within 3000 ms/);

      await server.recover();
      await assertInitialisedInOneWrite(name, tainted, "aws");
      await waitFor("/readyz ok once initialised", async () => (await readyz(health)).status === 200, 20_000, 200);
      assert.equal(await metricOf(node, 'local_ccm_metadata_lookups_total{provider="aws",result="found"}'), 1);
      const exposed = await scrapeMetrics(health);
      assert.equal(exposed.get("local_ccm_node_uninitialized"), 0, "initialised: the gauge back to 0 (and exposed)");
    });
  });

  test("auto where no connection opens (link-local packets vanish): skipped within the bound, initialised", async (t) => {
    const node = await nodeHost();
    // As on bare metal whose default route swallows link-local packets: the SYN goes nowhere, no error comes back.
    await node.host.ip("route", "add", `${METADATA_IP}/32`, "dev", "lo");
    await node.host.exec("iptables", ["-A", "OUTPUT", "-d", `${METADATA_IP}/32`, "-j", "DROP"]);
    const result = await runOnce(node, "meta-auto-void", ["--instance-metadata=auto", "--metadata-timeout=5s"]);
    // Done by itself: a connect left to the kernel takes minutes, and runOnce's 30 s guard would have stopped it.
    assert.equal(result.stoppedByGuard, false, `still running after ${RUN_ONCE_LIMIT_MS} ms`);
    assert.equal(result.code, 0, result.output);
    t.diagnostic(`--run-once exited after ${Math.round(result.elapsedMs)} ms`);
    assert.equal(isUninitialized(result.node), false);
    const skipped = (await eventsFor("meta-auto-void")).filter((e) => e.startsWith("MetadataSkipped: "));
    assert.match(skipped.join("\n"), /no instance metadata service answered .*no connection within 2000 ms/);
  });

  test("auto, a service that takes connections and hangs: not skipped for good; the node waits, then gets it", async () => {
    const node = await nodeHost();
    const name = "meta-auto-hung";
    await withFailingService(
      node,
      name,
      "gce",
      "silent",
      async (server) => {
        const unavailable = 'local_ccm_metadata_lookups_total{provider="auto",result="unavailable"}';
        await waitFor("a lookup given up", async () => (await metricOf(node, unavailable)) >= 1, 20_000, 250);
        const tainted = await world.nodes.get(name);
        assert.equal(isUninitialized(tainted), true, "a slow cloud VM is not initialised without its identity");
        assert.deepEqual(metadataOf(tainted), { labels: {} });
        const reported = await eventsOnceThere(name, "MetadataUnavailable");
        assert.match(reported.join("\n"), /an instance metadata service answered but failed or hung \(.*gce: /);
        assert.equal(await metricOf(node, 'local_ccm_metadata_lookups_total{provider="auto",result="skipped"}'), 0);

        await server.recover();
        await assertInitialisedInOneWrite(name, tainted, "gce");
      },
      "auto",
    );
  });

  // The pauses' growth is the schedule's, proven whatever the jitter in src/agent/metadata/client.test.ts; here,
  // what load cannot change: the service is asked again after a lookup gave up, and not hammered meanwhile.
  test("a service answering 503 for a while: asked again, with pauses; answering, initialised", async (t) => {
    const node = await nodeHost();
    await withFailingService(node, "meta-503", "gce", "503", async (server) => {
      const arrivals = await waitFor("asked again after a lookup (3 s bound) gave up", () => {
        const sofar = server.arrivals();
        return sofar.length >= 3 && sofar.some((at) => at > (sofar[0] as number) + 3000) && sofar;
      }, 60_000, 100);
      assert.ok(server.requests().every((request) => request.endsWith(" 503")));
      const pauses = arrivals.slice(1).map((at, i) => at - (arrivals[i] as number));
      const spanMs = (arrivals.at(-1) as number) - (arrivals[0] as number);
      t.diagnostic(`${arrivals.length} requests in ${spanMs} ms, pauses ${pauses.join(", ")} ms`);
      // Without backoff a local 503 costs about a millisecond: thousands of requests over those seconds.
      assert.ok(arrivals.length <= 25, `${arrivals.length} requests in ${spanMs} ms`);
      const tainted = await world.nodes.get("meta-503");
      assert.equal(isUninitialized(tainted), true);

      await server.recover();
      await assertInitialisedInOneWrite("meta-503", tainted, "gce");
    });
  });

  test("bare metal: CIDR → zone, name regex → region, template providerID; a node matching no rule gets a reason", async () => {
    const rules = [
      "--provider-id=local://{systemUUID}",
      "--zone-rules=cidr:198.18.100.0/26=rack-1,cidr:198.18.100.64/26=rack-2",
      "--region-rules=name:^([a-z]+)-=$1",
    ];
    const systemUUID = "4c4c4544-0042-3510-8052-b4c04f384e32";
    const matching = await runOnce(await nodeHost(), "fra-17", rules, { nodeInfo: { systemUUID } });
    assert.equal(matching.code, 0, matching.output);
    assert.deepEqual(metadataOf(matching.node), { providerID: `local://${systemUUID}`, labels: { zone: "rack-1", region: "fra" } });

    // An InternalIP outside both CIDRs and a name without a lowercase prefix match nothing.
    const other = await runOnce(await nodeHost(), "17-unmatched", rules, { nodeInfo: { systemUUID } }, "198.18.100.200");
    assert.equal(other.code, 0, other.output);
    const unmatched = other.node;
    assert.deepEqual(metadataOf(unmatched), { providerID: `local://${systemUUID}`, labels: {} });
    assert.equal(isUninitialized(unmatched), false);
    const reasons = (await eventsFor("17-unmatched")).filter((e) => e.startsWith("MetadataRuleUnmatched: "));
    const facts = 'InternalIPs 198.18.100.200, product name "';
    assert.deepEqual(
      reasons.sort().map((e) => e.slice(0, e.indexOf(facts) + facts.length)),
      [
        `MetadataRuleUnmatched: no region rule matches node 17-unmatched: ${facts}`,
        `MetadataRuleUnmatched: no zone rule matches node 17-unmatched: ${facts}`,
      ],
    );
  });
});
