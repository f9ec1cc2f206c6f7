// The agent process in a network namespace against the real control plane, under the RBAC we
// ship: initialising a kubelet-like Node, dual-stack, internal + external, air-gapped, drift
// repair, address changes, a concurrent writer, an apiserver restart, and no writes at rest.
import assert from "node:assert/strict";
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Event } from "kubernetes-types/core/v1.js";
import { Resource } from "../../src/kube/resource.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { scrapeMetrics } from "../../localcluster/metrics.ts";
import { addressesOf, readyz, registerNode, startAgent, startWorld, type World } from "./harness.ts";
import { isUninitialized } from "../../src/kube/nodes.ts";

interface AuditEvent {
  userAgent?: string;
  verb: string;
  objectRef?: { resource?: string; subresource?: string; name?: string };
  responseStatus?: { code: number };
  requestReceivedTimestamp: string;
}

/**
 * The agents' requests in the audit log (by user agent), as "verb resource[/subresource] code";
 * `name` narrows to one object.
 */
function agentRequests(world: World, since: number, name?: string): string[] {
  const lines = readFileSync(world.plane.auditLogPath as string, "utf8").split("\n").filter(Boolean);
  return lines
    .map((line) => JSON.parse(line) as AuditEvent)
    .filter((e) => e.userAgent?.startsWith("local-ccm/") && e.userAgent.endsWith("(local-ccm)") && Date.parse(e.requestReceivedTimestamp) >= since)
    .filter((e) => name === undefined || e.objectRef?.name === name)
    .map((e) => `${e.verb} ${e.objectRef?.resource ?? ""}${e.objectRef?.subresource ? `/${e.objectRef.subresource}` : ""} ${e.responseStatus?.code}`);
}

/** Health and plain-HTTP /metrics on one address, for a test to scrape. */
const servingMetrics = (address: string) =>
  [`--health-bind-address=${address}`, `--metrics-bind-address=${address}`, "--secure-metrics=false"];

/** Someone else rewrites the Node's addresses without the ExternalIP (what the agent manages here). */
async function dropExternalIPs(world: World, name: string): Promise<void> {
  const n = await world.nodes.get(name);
  const addresses = (n.status?.addresses ?? []).filter((a) => a.type !== "ExternalIP");
  await world.nodes.update({ ...n, status: { ...n.status, addresses } }, { subresource: "status" });
}

describe("local-ccm agent in a network namespace against the real control plane", () => {
  let world: World;
  let events: Resource<Event>;
  const reasonsFor = async (name: string) => (await events.list({ fieldSelector: `involvedObject.name=${name}` })).items.map((e) => e.reason);

  before(async () => {
    world = await startWorld();
    events = new Resource<Event>(world.plane.admin, { group: "", version: "v1", plural: "events", namespace: "default" });
  });
  after(async () => {
    await world?.stop();
  });

  test("a kubelet-like Node gets its ExternalIP, keeps kubelet's addresses, loses the taint; then drift is repaired and nothing is written at rest", async (t) => {
    const node = await world.nodeHost(0);
    await registerNode(world.nodes, "node-0", "198.18.100.10", { on: node });
    const health = `${node.reachableAt}:10263`;
    const agent = startAgent(node, ["--node-name=node-0", "--reconcile-interval=1s", "--v=4", ...servingMetrics(health)]);
    const restTrims = () => agent.output().split("\n").filter((line) => /memory trimmed after=rest /.test(line)).length;
    try {
      const expected = ["InternalIP=198.18.100.10", `ExternalIP=${node.external.v4}`, "Hostname=node-0"];
      const ready = await waitFor("addresses and taint", async () => {
        const n = await world.nodes.get("node-0");
        return !isUninitialized(n) && addressesOf(n).join() === expected.join() && n;
      }, 60_000);
      assert.deepEqual(addressesOf(ready), expected);
      await waitFor("events", async () => (await reasonsFor("node-0")).includes("TaintRemoved"));
      assert.deepEqual((await reasonsFor("node-0")).sort(), ["AddressesUpdated", "TaintRemoved"]);
      // Done and at rest: each resync that writes nothing gives back the pages it faulted in (memoryrelease.ts).
      await waitFor("a trim after a resync at rest", () => restTrims() >= 2 || undefined, 60_000, 100);

      // Someone overwrites the addresses: the watch sees it and the agent repairs them.
      const dropped = Date.now();
      await dropExternalIPs(world, "node-0");
      await waitFor("drift repaired", async () => addressesOf(await world.nodes.get("node-0")).join() === expected.join() || undefined);
      // Settled once the repair's Event is written too: it is the last request the repair makes.
      await waitFor("the repair's Event", () => agentRequests(world, dropped).some((r) => /^(create|patch) events /.test(r)),
        60_000, 200);

      // At rest (five reconcile passes, several resync intervals), the agent writes nothing and reads nothing.
      const ok = 'local_ccm_reconciles_total{result="ok"}';
      const quietFrom = Date.now();
      const before = (await scrapeMetrics(health)).get(ok) ?? 0;
      const trimsBefore = restTrims();
      await waitFor("five passes", async () => ((await scrapeMetrics(health)).get(ok) ?? 0) >= before + 5, 60_000, 200);
      t.diagnostic(`five passes at rest in ${Date.now() - quietFrom} ms`);
      assert.deepEqual(agentRequests(world, quietFrom), [], "no API request at rest");
      // The repair was work: its trim comes 30 s after it, and the resyncs until then leave it to that one.
      assert.equal(restTrims(), trimsBefore, "no trim after a resync while the trim after work is due");
    } finally {
      await agent.stop();
    }
  });

  test("dual-stack targets and an internal target on a second NIC; an ExternalIP equal to an InternalIP is not written", async () => {
    const node = await world.nodeHost(1, { lan: true });
    await registerNode(world.nodes, "node-1", node.lan?.v4 as string, { on: node });
    const agent = startAgent(node, [
      "--node-name=node-1",
      "--external-ip-target=8.8.8.8,2001:4860:4860::8888",
      `--internal-ip-target=${node.lan?.gateway},8.8.8.8`,
    ]);
    try {
      // InternalIP: the provided IP first (it equals the LAN source), then 8.8.8.8's source; that
      // source is also the v4 ExternalIP, which is therefore not written as ExternalIP.
      const expected = [`InternalIP=${node.lan?.v4}`, `InternalIP=${node.external.v4}`, `ExternalIP=${node.external.v6}`, "Hostname=node-1"];
      // The taint goes right after the addresses are written: wait for both.
      await waitFor("dual-stack addresses and no taint", async () => {
        const n = await world.nodes.get("node-1");
        return (addressesOf(n).join() === expected.join() && !isUninitialized(n)) || undefined;
      });
    } finally {
      await agent.stop();
    }
  });

  test("air-gapped (no route to the target): a DetectionFailed warning, kubelet's InternalIP kept, and the taint still goes", async () => {
    const node = await world.nodeHost(2, { airGapped: true });
    await registerNode(world.nodes, "node-2", "198.18.100.12", { on: node });
    const agent = startAgent(node, ["--node-name=node-2"]);
    try {
      await waitFor("taint removed", async () => !isUninitialized(await world.nodes.get("node-2")));
      assert.deepEqual(addressesOf(await world.nodes.get("node-2")), ["InternalIP=198.18.100.12", "Hostname=node-2"]);
      const warning = await waitFor("a DetectionFailed event", async () =>
        (await events.list({ fieldSelector: "involvedObject.name=node-2,reason=DetectionFailed" })).items[0],
      );
      assert.equal(warning.type, "Warning");
      assert.match(warning.message ?? "", /ExternalIP.*8\.8\.8\.8/);
    } finally {
      await agent.stop();
    }
  });

  test("a local address change reaches the Node; a concurrent writer loses nothing and causes no flapping", async () => {
    const node = await world.nodeHost(3);
    await registerNode(world.nodes, "node-3", "198.18.100.13", { on: node });
    const agent = startAgent(node, ["--node-name=node-3", "--reconcile-interval=1m"]);
    try {
      await waitFor("first ExternalIP", async () => addressesOf(await world.nodes.get("node-3")).includes(`ExternalIP=${node.external.v4}`));
      // Another writer keeps updating the same Node (labels and a condition) while the address moves.
      let stopWriter = false;
      const writer = (async () => {
        for (let i = 0; i < 200 && !stopWriter; i++) {
          await world.nodes.patch("node-3", "merge", { metadata: { labels: { round: String(i) } } });
          const n = await world.nodes.get("node-3");
          await world.nodes
            .update({ ...n, status: { ...n.status, conditions: [{ type: "Ready", status: "True", reason: `round${i}`, lastHeartbeatTime: new Date().toISOString() }] } }, { subresource: "status" })
            .catch(() => {}); // conflicts with the agent are the writer's problem, not ours
        }
      })();
      const moved = "198.18.13.20";
      await node.host.ip("address", "add", `${moved}/24`, "dev", (await node.host.ip("-o", "-4", "route", "get", "8.8.8.8")).match(/dev (\S+)/)?.[1] as string);
      await node.host.ip("route", "replace", "default", "via", "198.18.13.1", "src", moved);
      const updated = await waitFor("the new ExternalIP", async () => {
        const n = await world.nodes.get("node-3");
        return addressesOf(n).join() === ["InternalIP=198.18.100.13", `ExternalIP=${moved}`, "Hostname=node-3"].join() && n;
      });
      stopWriter = true;
      await writer;
      const final = await world.nodes.get("node-3");
      assert.deepEqual(addressesOf(final), addressesOf(updated), "the writer's updates did not undo the addresses");
      assert.equal(final.status?.conditions?.[0]?.type, "Ready", "the agent did not drop the writer's condition");
      // Writes that lost a race (409) change nothing; the ones that went through set each address once.
      const statusWrites = agentRequests(world, 0, "node-3").filter((r) => r === "update nodes/status 200");
      assert.equal(statusWrites.length, 2, `no flapping: ${agentRequests(world, 0, "node-3").join(", ")}`);
    } finally {
      await agent.stop();
    }
  });

  test("an apiserver restart is survived: the watch comes back and drift is repaired again", async () => {
    const node = await world.nodeHost(4);
    await registerNode(world.nodes, "node-4", "198.18.100.14", { on: node });
    const agent = startAgent(node, ["--node-name=node-4"]);
    try {
      const expected = ["InternalIP=198.18.100.14", `ExternalIP=${node.external.v4}`, "Hostname=node-4"].join();
      await waitFor("initialised", async () => addressesOf(await world.nodes.get("node-4")).join() === expected || undefined);
      await world.plane.restartApiserver();
      await dropExternalIPs(world, "node-4");
      await waitFor("repaired after the restart", async () => addressesOf(await world.nodes.get("node-4")).join() === expected || undefined, 60_000);
      assert.equal(agent.child.exitCode, null, "the agent kept running");
    } finally {
      await agent.stop();
    }
  });

  test("as uid 65532 with no capabilities, started before its Node exists: it waits, then initialises it and follows changes", async () => {
    const node = await world.nodeHost(7);
    // The DaemonSet's user must be able to read its kubeconfig (the control plane's folder is root's).
    const dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-unprivileged-"));
    chmodSync(dir, 0o755);
    const kubeconfig = path.join(dir, "kubeconfig");
    copyFileSync(node.kubeconfig, kubeconfig);
    chmodSync(kubeconfig, 0o644);
    const agent = startAgent({ ...node, kubeconfig }, ["--node-name=node-7", "--reconcile-interval=1m"], { unprivileged: true });
    try {
      await waitFor("the agent to say it waits for its node", () => /node not found yet/.test(agent.output()) || undefined);
      assert.match(readFileSync(`/proc/${agent.child.pid}/status`, "utf8"), /^Uid:\s+65532\s+65532\s+65532\s+65532$[\s\S]*^CapEff:\s+0+$/m);
      await registerNode(world.nodes, "node-7", "198.18.100.17", { on: node });
      const expected = ["InternalIP=198.18.100.17", `ExternalIP=${node.external.v4}`, "Hostname=node-7"].join();
      await waitFor("initialised", async () => {
        const n = await world.nodes.get("node-7");
        return (addressesOf(n).join() === expected && !isUninitialized(n)) || undefined;
      });
      // Netlink change events reach an unprivileged process too (resync is 1 min: only the event can do it).
      const moved = "198.18.17.30";
      const dev = (await node.host.ip("-o", "-4", "route", "get", "8.8.8.8")).match(/dev (\S+)/)?.[1] as string;
      await node.host.ip("address", "add", `${moved}/24`, "dev", dev);
      await node.host.ip("route", "replace", "default", "via", "198.18.17.1", "src", moved);
      await waitFor("the moved ExternalIP", async () => addressesOf(await world.nodes.get("node-7")).includes(`ExternalIP=${moved}`));
    } finally {
      await agent.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("--run-once reconciles and exits 0; a missing Node exits 1 with the reason", async () => {
    const node = await world.nodeHost(5);
    await registerNode(world.nodes, "node-5", "198.18.100.15", { on: node });
    const once = startAgent(node, ["--node-name=node-5", "--run-once"]);
    assert.equal(await once.exited, 0, once.output());
    const n = await world.nodes.get("node-5");
    assert.ok(addressesOf(n).includes(`ExternalIP=${node.external.v4}`));
    assert.ok(!isUninitialized(n));
    const missing = startAgent(node, ["--node-name=no-such-node", "--run-once"]);
    assert.equal(await missing.exited, 1);
    assert.match(missing.output(), /local-ccm: node "no-such-node" not found/);
  });

  test("a Node that is not this host: --run-once exits 1 and writes nothing; running, a Warning once, not ready, no write", async () => {
    const node = await world.nodeHost(8);
    // Another machine's kubelet registered node-8: its --node-ip is no address of this namespace.
    const registered = await registerNode(world.nodes, "node-8", "198.18.100.18");
    const since = Date.now();
    const writes = () => agentRequests(world, since, "node-8").filter((r) => !/^(get|list|watch) /.test(r));
    const refusal =
      'local-ccm: refusing to write node "node-8": it is not this host: none of its provided-node-ip (198.18.100.18) ' +
      "is an address of this host (";

    const once = startAgent(node, ["--node-name=node-8", "--run-once"]);
    assert.equal(await once.exited, 1, once.output());
    const last = once.output().trim().split("\n").at(-1) ?? "";
    assert.ok(last.startsWith(refusal) && last.includes(` ${node.external.v4}, `), last);
    assert.match(last, /; run the agent on that node, or pass --require-local-node=false to manage it from elsewhere on purpose$/);

    const health = `${node.reachableAt}:10263`;
    const agent = startAgent(node, ["--node-name=node-8", "--reconcile-interval=300ms", ...servingMetrics(health)]);
    try {
      const notReady = await waitFor("/readyz saying why", async () => {
        const answer = await readyz(health);
        return answer.status === 503 && answer.body.includes("it is not this host") && answer;
      });
      assert.ok(notReady.body.startsWith(refusal.slice("local-ccm: ".length)), notReady.body);
      // Several passes later, still one Event per process (the run above, this agent), each recorded once.
      const refused = 'local_ccm_reconciles_total{result="refused"}';
      await waitFor("five refused passes", async () => ((await scrapeMetrics(health)).get(refused) ?? 0) >= 5, 30_000, 200);
      const warnings = await waitFor("both Warnings written", async () => {
        const list = await events.list({ fieldSelector: "involvedObject.name=node-8,reason=NodeNotLocal" });
        return list.items.length === 2 && list.items;
      });
      assert.deepEqual(warnings.map((e) => [e.type, e.count]), [["Warning", 1], ["Warning", 1]]);
      assert.equal((await readyz(health)).status, 503);
    } finally {
      await agent.stop();
    }
    assert.equal((await world.nodes.get("node-8")).metadata?.resourceVersion, registered.metadata?.resourceVersion);
    assert.deepEqual(writes().filter((r) => !r.startsWith("create events") && !r.startsWith("patch events")), []);

    // Out of cluster on purpose: the check is off, and the Node is written.
    const manual = startAgent(node, ["--node-name=node-8", "--run-once", "--require-local-node=false"]);
    assert.equal(await manual.exited, 0, manual.output());
    const written = await world.nodes.get("node-8");
    assert.ok(addressesOf(written).includes(`ExternalIP=${node.external.v4}`));
    assert.ok(!isUninitialized(written));
  });

  test("an RBAC denial names the missing permission; bad input exits 2 before any API call", async () => {
    const node = await world.nodeHost(6);
    await registerNode(world.nodes, "node-6", "198.18.100.16", { on: node });
    const unbound = await world.plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "unbound", server: node.server });
    const denied = startAgent({ ...node, kubeconfig: unbound }, ["--node-name=node-6", "--run-once"]);
    assert.equal(await denied.exited, 1);
    assert.match(denied.output(), /cannot get resource "nodes"/);

    const since = Date.now();
    for (const args of [["--node-name=node-6", "--external-ip-cidr=198.18.0.0/33"], ["--node-name=node-6", "--bogus"], ["--reconcile-interval=10s"]]) {
      const bad = startAgent(node, args);
      assert.equal(await bad.exited, 2, bad.output());
      assert.equal(bad.output().trim().split("\n").length, 1, `one line: ${bad.output()}`);
    }
    assert.deepEqual(agentRequests(world, since), [], "no API call on bad input");
  });
});
