// The node-lifecycle-controller program against a real control plane, under the shipped RBAC, with
// the hosts behind its Nodes in network namespaces: which nodes it deletes and when, and the
// safety rules (timing from the API, preconditions, dry-run, the mass-deletion guard).
import assert from "node:assert/strict";
import { readFile, writeFile } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { scrapeMetrics } from "../../localcluster/metrics.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { waitFor } from "../../localcluster/wait.ts";
import {
  apiTimeAgo,
  auditedRequests,
  ControllerProcess,
  controllerFlags,
  eventsAbout,
  nodeObject,
  RBAC_FILE,
  SERVICE_ACCOUNT,
  setReady,
  startWorld,
  type World,
} from "./world.ts";

const TIMEOUT_MS = 8000;
const INTERVAL_MS = 1000;

const flags = (world: World, ...extra: string[]) =>
  controllerFlags(world, { notReadyTimeout: `${TIMEOUT_MS}ms`, reconcileInterval: `${INTERVAL_MS}ms`, leaderElect: false }, ...extra);

const at = (line: { ts?: string }) => Date.parse(line.ts ?? "");

/** Scrapes the controller's /metrics as series → value (its address comes from its log). */
async function metrics(nlc: ControllerProcess): Promise<Map<string, number>> {
  const serving = await nlc.waitForLog("serving /healthz, /readyz and /metrics");
  return scrapeMetrics(String(serving.address));
}

/** Waits until the controller has made `count` more reconcile passes: at rest, a window counted in passes. */
async function morePasses(nlc: ControllerProcess, count: number): Promise<void> {
  const passes = async () => (await metrics(nlc)).get("node_lifecycle_controller_reconciles_total") ?? 0;
  const from = await passes();
  await waitFor(`${count} more passes`, async () => (await passes()) >= from + count, 60_000, 200);
}

describe("node-lifecycle-controller against a real control plane", () => {
  let world: World;
  const running: ControllerProcess[] = [];
  const start = (args: string[], env: NodeJS.ProcessEnv = {}) => {
    const nlc = new ControllerProcess(world, args, { env });
    running.push(nlc);
    return nlc;
  };
  const createNodes = (nodes: Node[]) => Promise.all(nodes.map((node) => world.nodes.create(node)));
  const exists = async (name: string) =>
    world.nodes.get(name).then(
      () => true,
      (err: unknown) => {
        if (isApiError(err, "NotFound")) return false;
        throw err;
      },
    );
  const healthy = (count: number, prefix: string) =>
    Array.from({ length: count }, (_, i) =>
      nodeObject(`${prefix}-healthy-${i}`, { address: "198.18.200.1", ready: "True", tainted: false }),
    );

  before(async () => {
    world = await startWorld({ subnet: 250, audit: true });
  });
  after(async () => {
    for (const nlc of running) nlc.child.kill("SIGKILL");
    await world?.stop();
  });

  /** Each test starts from no controller and no node. */
  const cleanUp = async () => {
    for (const nlc of running.splice(0)) await nlc.stop();
    const { items } = await world.nodes.list();
    await Promise.all(items.map((node) => world.nodes.delete(node.metadata?.name as string)));
  };

  test("of three NotReady hosts only the one that answers nothing is deleted, after the timeout", async () => {
    const testStart = new Date();
    const echo = await world.addHost("echo");
    const tcp = await world.addHost("tcp");
    const dead = await world.deadAddress();
    const since = apiTimeAgo(TIMEOUT_MS / 2);
    const expiry = since.getTime() + TIMEOUT_MS;
    await createNodes([
      nodeObject("echo-node", { address: echo, since }),
      nodeObject("tcp-node", { address: tcp, since }),
      nodeObject("dead-node", { address: dead, since }),
      ...healthy(3, "t1"),
    ]);
    try {
      const nlc = start(flags(world));
      const deleted = await nlc.waitForLog("deleted node", { node: "dead-node" });
      assert.ok(at(deleted) >= expiry, `deleted ${expiry - at(deleted)} ms before the timeout`);
      assert.equal(await exists("dead-node"), false);
      const probedEarly = nlc.find("probing").filter((line) => at(line) < expiry);
      assert.deepEqual(probedEarly, [], "nothing is probed before its timeout");

      // Both live hosts were probed and found alive, each by the one probe it answers.
      const reasons = async (node: string) => {
        const line = await nlc.waitForLog("not deleting node", { node });
        return line.reason;
      };
      assert.equal(await reasons("echo-node"), `reachable: icmp ${echo} answered`);
      assert.equal(await reasons("tcp-node"), `reachable: tcp ${tcp}:10250 answered`);
      // They are probed again every pass, and never deleted.
      await waitFor("three more probes of each live node", () =>
        ["echo-node", "tcp-node"].every((node) => nlc.find("probing", { node }).length >= 4),
      );
      assert.equal(await exists("echo-node"), true);
      assert.equal(await exists("tcp-node"), true);
      assert.equal(nlc.find("deleted node").length, 1);

      const eventsOf = (node: string) =>
        waitFor(`events about ${node}`, async () => {
          const found = await eventsAbout(world, node);
          return found.length > 0 && found;
        });
      assert.deepEqual(await eventsOf("echo-node"), [`DeletionSkipped: reachable: icmp ${echo} answered`]);
      assert.deepEqual(await eventsOf("tcp-node"), [`DeletionSkipped: reachable: tcp ${tcp}:10250 answered`]);
      const [deleting] = await eventsOf("dead-node");
      const unreachable = `unreachable: no answer from icmp ×2 or tcp :10250 on ${dead}`;
      assert.match(deleting ?? "", /^DeletingNode: Deleting node: NotReady for \d+s, timeout 8s; /);
      assert.ok(deleting?.endsWith(unreachable), deleting);
      assert.deepEqual(await eventsAbout(world, "t1-healthy-0"), [], "no event about healthy nodes");

      const scraped = await metrics(nlc);
      assert.equal(scraped.get('node_lifecycle_controller_deletions_total{result="deleted"}'), 1);
      const deletes = 'node_lifecycle_controller_api_requests_total{verb="delete",code="200"}';
      assert.equal(scraped.get(deletes), 1);
      assert.ok((scraped.get('node_lifecycle_controller_probes_total{result="alive"}') ?? 0) >= 8);
      assert.equal(scraped.get('node_lifecycle_controller_probes_total{result="unreachable"}'), 1);
      assert.equal(scraped.get("node_lifecycle_controller_leader"), 1);
      assert.equal(scraped.get("node_lifecycle_controller_deletions_paused"), 0);
      const serving = await nlc.waitForLog("serving /healthz, /readyz and /metrics");
      assert.equal((await fetch(`http://${serving.address}/readyz`)).status, 200);

      // One LIST at start, then only the watch: every pass worked from the cache.
      const requests = await auditedRequests(world, testStart);
      assert.equal(requests.get("list nodes"), 1);
      assert.equal(requests.get("delete nodes"), 1);
      const gets = requests.get("get nodes") ?? 0;
      assert.ok(gets <= nlc.find("probing").length, "a fresh GET only after a probe");

      assert.equal(await nlc.stop(), 0);
      assert.ok(nlc.find("shutting down").length === 1);
    } finally {
      await cleanUp();
    }
  });

  test("a restart mid-timeout keeps the timing: NotReady time comes from the API", async (t) => {
    // Wide margins on a loaded machine: the first process has ~20 s to start and stop before the node expires, and
    // the deletion at expiry comes ~40 s before a timer started at the restart would fire.
    const timeoutMs = 60_000;
    const since = apiTimeAgo(40_000);
    const expiry = since.getTime() + timeoutMs;
    await createNodes([
      nodeObject("restart-node", { address: await world.deadAddress(), since }),
      ...healthy(3, "t2"),
    ]);
    try {
      const args = flags(world, `--not-ready-timeout=${timeoutMs}ms`);
      const first = start(args);
      await first.waitForLog("caches synced");
      assert.equal(await first.stop(), 0);
      assert.ok(Date.now() < expiry, "the first process stopped before the node expired: widen the margins");
      assert.deepEqual(first.find("probing"), []);
      const restartedAt = Date.now();
      const second = start(args);
      const deleted = await second.waitForLog("deleted node", { node: "restart-node" }, timeoutMs);
      t.diagnostic(`deleted ${at(deleted) - expiry} ms after the node's expiry, ${at(deleted) - restartedAt} ms ` +
        "after the restart");
      assert.ok(at(deleted) >= expiry, "not before the node's own timeout");
      assert.ok(
        at(deleted) < restartedAt + timeoutMs,
        `deleted ${at(deleted) - restartedAt} ms after the restart; a timer from the start waits ${timeoutMs}`,
      );
    } finally {
      await cleanUp();
    }
  });

  test("a node re-registered between the check and the DELETE survives (preconditions)", async () => {
    const dead = await world.deadAddress();
    // A timeout longer than the whole test: the re-registered node, NotReady since its creation, must outlive it.
    const timeoutMs = 60_000;
    const since = apiTimeAgo(2 * timeoutMs);
    const original = await world.nodes.create(nodeObject("reborn-node", { address: dead, since }));
    await createNodes(healthy(3, "t3"));
    let reborn: Node | undefined;
    // A proxy between controller and apiserver: the DELETE is held while the machine re-registers.
    const proxy = await startProxy(world, async (method, url) => {
      if (method !== "DELETE" || !url.startsWith("/api/v1/nodes/reborn-node") || reborn) return;
      await world.nodes.delete("reborn-node");
      reborn = await world.nodes.create(nodeObject("reborn-node", { address: dead })); // NotReady since now
    });
    try {
      const nlc = start(flags(world, `--kubeconfig=${proxy.kubeconfig}`, `--not-ready-timeout=${timeoutMs}ms`));
      const refused = await nlc.waitForLog("not deleting node", { node: "reborn-node" });
      assert.equal(refused.reason, "changed since it was checked (uid and resourceVersion preconditions)");
      const deletes = proxy.requests.filter((r) => r.method === "DELETE");
      assert.equal(deletes.length, 1);
      assert.deepEqual(JSON.parse(deletes[0]?.body ?? "{}").preconditions, {
        uid: original.metadata?.uid,
        resourceVersion: original.metadata?.resourceVersion,
      });
      const survivor = await world.nodes.get("reborn-node");
      assert.equal(survivor.metadata?.uid, reborn?.metadata?.uid);
      assert.notEqual(survivor.metadata?.uid, original.metadata?.uid);
      await waitFor("the DeletionSkipped event", async () =>
        (await eventsAbout(world, "reborn-node")).includes(`DeletionSkipped: ${refused.reason}`),
      );
      // The new node is watched like any other: recently NotReady, so it is left alone.
      await morePasses(nlc, 3);
      assert.equal((await world.nodes.get("reborn-node")).metadata?.uid, reborn?.metadata?.uid);
      assert.equal(nlc.find("deleted node").length, 0);
    } finally {
      await cleanUp();
      await proxy.close();
    }
  });

  test("dry-run: events and logs 'would delete', and never sends a DELETE", async () => {
    const testStart = new Date();
    const since = apiTimeAgo(2 * TIMEOUT_MS);
    await createNodes([
      nodeObject("dry-node", { address: await world.deadAddress(), since }),
      ...healthy(3, "t4"),
    ]);
    try {
      const nlc = start(flags(world, "--dry-run"));
      const would = await nlc.waitForLog("would delete node (dry run)", { node: "dry-node" });
      assert.match(String(would.reason), /^NotReady for \d+s, timeout 8s; unreachable: no answer/);
      await waitFor("three passes", () => nlc.find("probing", { node: "dry-node" }).length >= 3);
      assert.equal(await exists("dry-node"), true);
      assert.equal(nlc.find("would delete node (dry run)").length, 1, "logged once, not every pass");
      await waitFor("the event", async () =>
        (await eventsAbout(world, "dry-node")).includes(
          `WouldDeleteNode: would delete (dry run): ${would.reason}`,
        ),
      );
      await waitFor("three dry-run deletions counted", async () => {
        const series = 'node_lifecycle_controller_deletions_total{result="dry-run"}';
        return ((await metrics(nlc)).get(series) ?? 0) >= 3;
      });
      assert.equal((await auditedRequests(world, testStart)).get("delete nodes"), undefined);
    } finally {
      await cleanUp();
    }
  });

  test("the partition guard pauses deletions (event, metric, log) and resumes after", async () => {
    const since = apiTimeAgo(2 * TIMEOUT_MS);
    const others = ["w1", "w2", "w3"];
    await createNodes([
      nodeObject("held-node", { address: await world.deadAddress(), since }),
      ...others.map((name) => nodeObject(name, { address: "198.18.200.1", tainted: false, since })),
      ...healthy(1, "t5"),
    ]);
    try {
      const nlc = start(flags(world));
      const paused = await nlc.waitForLog("mass-deletion guard");
      assert.equal(paused.level, "warning");
      assert.equal(paused.state, "deletions paused: 4 of 5 nodes NotReady (≥ 55%)");
      await waitFor("the DeletionsPaused event", async () =>
        (await eventsAbout(world, "held-node")).includes(`DeletionsPaused: ${paused.state}`),
      );
      assert.equal((await metrics(nlc)).get("node_lifecycle_controller_deletions_paused"), 1);
      await morePasses(nlc, 3);
      assert.equal(await exists("held-node"), true);
      assert.deepEqual(nlc.find("probing"), [], "a paused controller does not even probe");

      for (const name of others.slice(0, 2)) await setReady(world, name, "True");
      const deleted = await nlc.waitForLog("deleted node", { node: "held-node" });
      const resumed = nlc.find("mass-deletion guard").at(-1);
      assert.equal(
        resumed?.state,
        "deletions allowed: 2 of 5 nodes NotReady (pause at ≥ 55% of more than 2)",
      );
      assert.ok(at(resumed ?? {}) <= at(deleted));
      assert.equal((await metrics(nlc)).get("node_lifecycle_controller_deletions_paused"), 0);
    } finally {
      await cleanUp();
    }
  });

  test("a protected dead node is kept, with one DeletionSkipped Event however many passes", async () => {
    const since = apiTimeAgo(2 * TIMEOUT_MS);
    await createNodes([
      nodeObject("kept-node", { address: await world.deadAddress(), since, labels: { keep: "" } }),
      ...healthy(3, "t6"),
    ]);
    try {
      const nlc = start(flags(world, "--protected-labels=keep"));
      const skipped = await waitFor("the DeletionSkipped event", async () => {
        const list = await world.events.list({ fieldSelector: "involvedObject.name=kept-node,reason=DeletionSkipped" });
        return list.items[0];
      });
      assert.equal(skipped.type, "Normal");
      assert.match(skipped.message ?? "", /^protected by label keep \(NotReady for \d+s, timeout 8s\)$/);
      await morePasses(nlc, 3);
      const after = await world.events.list({ fieldSelector: "involvedObject.name=kept-node" });
      assert.deepEqual(after.items.map((e) => [e.reason, e.count]), [["DeletionSkipped", 1]]);
      assert.ok(((await metrics(nlc)).get('node_lifecycle_controller_skipped_total{class="protected"}') ?? 0) >= 4);
      assert.equal(await exists("kept-node"), true);
      assert.deepEqual(nlc.find("probing", { node: "kept-node" }), [], "a protected node is not even probed");
    } finally {
      await cleanUp();
    }
  });

  test("Nodes sharing a providerID: a Warning Event on each, once; a gauge; a log line", async () => {
    const cloned = "local://4c4c4544-0042-3510-8052-b4c04f384e32";
    const node = (name: string, providerID: string): Node => {
      const object = nodeObject(name, { address: "198.18.200.1", ready: "True", tainted: false });
      return { ...object, spec: { ...object.spec, providerID } };
    };
    const clones = ["clone-1", "clone-2", "clone-3"];
    await createNodes([...clones.map((name) => node(name, cloned)), node("own-id", "local://own")]);
    try {
      const nlc = start(flags(world));
      const logged = await nlc.waitForLog("nodes share a providerID");
      assert.deepEqual([logged.level, logged.providerID, logged.nodes], ["warning", cloned, clones.join(",")]);
      const warnings = async () =>
        (await world.events.list({ fieldSelector: "reason=DuplicateProviderID" })).items.filter((e) => e.type === "Warning");
      await waitFor("a Warning on each clone", async () => (await warnings()).length === 3);
      await morePasses(nlc, 3);
      const each = (await warnings()).map((e) => [e.involvedObject.name, e.count]).sort();
      assert.deepEqual(each, clones.map((name) => [name, 1]), "once per node, not every pass");
      assert.match((await warnings())[0]?.message ?? "", /is shared by 3 Nodes \(clone-1, clone-2, clone-3\)/);
      assert.equal(nlc.find("nodes share a providerID").length, 1);
      const gauge = async () => (await metrics(nlc)).get("node_lifecycle_controller_nodes_sharing_provider_id");
      assert.equal(await gauge(), 3);

      // Two clones leave (to come back with their own providerIDs): the gauge follows.
      await world.nodes.delete("clone-3");
      await waitFor("two left sharing", async () => (await gauge()) === 2);
      await world.nodes.delete("clone-2");
      await waitFor("none sharing", async () => (await gauge()) === 0);
    } finally {
      await cleanUp();
    }
  });

  test("a permission missing from the RBAC shows as an error naming it", async () => {
    // The shipped RBAC, under other names, without "delete nodes".
    const name = "nlc-without-delete";
    const objects = parseAllDocuments(await readFile(RBAC_FILE, "utf8")).map((doc) => {
      const object = doc.toJS() as {
        metadata: { name: string };
        rules?: { resources: string[]; verbs: string[] }[];
        roleRef?: { name: string };
        subjects?: { name: string }[];
      };
      object.metadata.name = name;
      if (object.roleRef) object.roleRef.name = name;
      for (const subject of object.subjects ?? []) subject.name = name;
      for (const rule of object.rules ?? [])
        if (rule.resources.includes("nodes")) rule.verbs = rule.verbs.filter((verb) => verb !== "delete");
      return object;
    });
    const list = { apiVersion: "v1", kind: "List", items: objects };
    await world.plane.kubectl(["apply", "-f", "-"], JSON.stringify(list));
    const kubeconfig = await world.plane.serviceAccountKubeconfig({
      namespace: SERVICE_ACCOUNT.namespace,
      name,
      server: world.server,
    });
    const since = apiTimeAgo(2 * TIMEOUT_MS);
    await createNodes([
      nodeObject("forbidden-node", { address: await world.deadAddress(), since }),
      ...healthy(3, "t6"),
    ]);
    try {
      const nlc = start(flags(world, `--kubeconfig=${kubeconfig}`));
      const failed = await nlc.waitForLog("checking node failed", { node: "forbidden-node" });
      assert.equal(failed.level, "error");
      assert.match(
        String(failed.err),
        new RegExp(`^deleting failed: .*User "system:serviceaccount:kube-system:${name}" cannot delete resource "nodes"`),
      );
      // Refused, so nothing was deleted: retried with backoff (not held by the rate limit its first try reserved).
      await waitFor("a second attempt", () => nlc.find("checking node failed", { node: "forbidden-node" }).length >= 2);
      assert.equal(await exists("forbidden-node"), true);
      await waitFor("the DeletionFailed event", async () =>
        (await eventsAbout(world, "forbidden-node")).some(
          (event) => event.startsWith("DeletionFailed: ") && event.includes("forbidden"),
        ),
      );
    } finally {
      await cleanUp();
    }
  });
});

interface Proxy {
  /** The shipped service account's kubeconfig, pointing at the proxy. */
  kubeconfig: string;
  requests: { method: string; url: string; body: string }[];
  close(): Promise<void>;
}

/** A plain-HTTP proxy to the apiserver on the root link, which can hold a request while `hold` runs. */
async function startProxy(
  world: World,
  hold: (method: string, url: string) => Promise<void>,
): Promise<Proxy> {
  const ca = await readFile(world.plane.caPath);
  const upstream = new URL(world.plane.server);
  const requests: Proxy["requests"] = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const [method, url] = [req.method ?? "GET", req.url ?? "/"];
    requests.push({ method, url, body: body.toString() });
    await hold(method, url);
    const headers = { ...req.headers };
    delete headers.host;
    const forward = https.request(
      { host: upstream.hostname, port: upstream.port, path: url, method, headers, ca },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forward.on("error", () => res.destroy());
    res.on("close", () => forward.destroy()); // the client ended a watch
    forward.end(body);
  });
  const host = new URL(world.server).hostname;
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as { port: number };
  const kubeconfig = path.join(world.plane.dir, "proxy.kubeconfig");
  const text = await readFile(world.kubeconfig, "utf8");
  await writeFile(kubeconfig, text.replace(world.server, `http://${host}:${port}`));
  return {
    kubeconfig,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
