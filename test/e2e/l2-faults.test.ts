// Layer-2 pool addresses through faults of the control plane and of the announcing agent, on the real local cluster
// in each kube-proxy mode (l2-cluster.ts: the chart as shipped, kubelets, containerd, kube-proxy in the nodes'
// namespaces). One Service of class local-ccm.io/l2 with netexec backends; the client host requests /hostname once a
// second, each time after flushing its neighbour entry (a fresh ARP resolution, as a new client makes), while a
// prober on its link (arp-prober.ts) asks for the address five times a second and records every answer.
// - kube-apiserver stopped (SIGSTOP) for 60 s: no request fails, only the announcer answers; and after the API is
//   back nothing moves (kube-controller-manager may mark every Node Ready=Unknown for a while: a node renewing its
//   announcer Lease keeps announcing, src/pools/announcers.ts), and a request fails only while kube-controller-manager
//   left the Service no ready endpoint (ready-endpoints.ts);
// - the announcer's watches black-holed (a DROP of their connections in the node's namespace; its Lease renewals go
//   on over another) and its Service then excluded from that node: the address moves only once the agent learnt
//   the release and stopped answering, and the client is answered again within the failover budget;
// - the announcing agent stopped (SIGSTOP): another node takes over within the budget; resumed (SIGCONT), the old
//   agent renews its Lease and never answers again.
// Throughout, no ARP request is answered by two nodes and no node answers again after another did.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, type TestContext, test } from "node:test";
import type { Cluster } from "../../localcluster/cluster.ts";
import { PROXY_MODES, type ProxyMode } from "../../localcluster/kube-proxy.ts";
import { nodeMac } from "../../localcluster/layer2.ts";
import { AGENT_APP, CONTROLLER_APP, listPods, NAMESPACE, podReady } from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { Service } from "kubernetes-types/core/v1.js";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { NODE_SELECTOR_ANNOTATION } from "../../src/loadbalancer/service.ts";
import { announcerLeaseName, LEASE_DURATION_SECONDS, RELEASED_FROM_ANNOTATION } from "../../src/pools/announcement.ts";
import { sleep } from "../../src/time/backoff.ts";
import { watchAnnouncer } from "../announce/announcer-watch.ts";
import type { ProbeLine } from "./arp-prober.ts";
import { containerCgroup } from "./cluster-objects.ts";
import { type ReadySample, sampleReadyEndpoints, startedWhileUnready, unready } from "./ready-endpoints.ts";
import {
  answeringMacs,
  type ClientRequest,
  getService,
  l2Service,
  longestUnanswered,
  probeFindings,
  startL2Cluster,
  startProber,
  startRequests,
  WAIT_MS,
  waitForAnnouncer,
  waitForClientAt,
} from "./l2-cluster.ts";

const OUTAGE_MS = 60_000;
/** The failover budget (docs/loadbalancers.md); the bounds below are three of it, for a loaded 2-core machine. */
const BUDGET_MS = 5000;
/** A connection of the agent to the API that sent nothing for this long is a watch (renewals go every second). */
const WATCH_IDLE_MS = 2500;

const failed = (requests: readonly ClientRequest[]) => requests.filter((request) => request.error !== undefined);

/** The host pids of the agent's container on `node`. */
async function agentPids(cluster: Cluster, node: string): Promise<number[]> {
  // Once Ready: after the outage kube-controller-manager may have marked it NotReady until kubelet corrects it.
  const pod = await waitFor(
    `a ready agent pod on ${node}`,
    async () => (await listPods(cluster, AGENT_APP)).find((pod) => pod.spec?.nodeName === node && podReady(pod)),
    WAIT_MS,
    250,
  );
  const procs = await readFile(path.join(containerCgroup(cluster, pod), "cgroup.procs"), "utf8");
  return procs.split("\n").filter(Boolean).map(Number);
}

/** The local ports of `pids`' established connections to the API (port 443) that sent nothing for `idleMs`. */
async function idleApiConnections(cluster: Cluster, node: string, pids: number[], idleMs: number): Promise<string[]> {
  const out = await cluster.node(node).exec("ss", ["-tnpiH", "state", "established", "dport", "=", ":443"]);
  // One socket a block: its addresses and process on the first line, its TCP info (lastsnd) indented below.
  const blocks = out.split(/\n(?=\S)/);
  return blocks.flatMap((block) => {
    const local = /^\s*\d+\s+\d+\s+\S+:(\d+)\s/.exec(block)?.[1];
    const pid = Number(/pid=(\d+)/.exec(block)?.[1]);
    const lastSent = Number(/lastsnd:(\d+)/.exec(block)?.[1] ?? Infinity);
    return local !== undefined && pids.includes(pid) && lastSent >= idleMs ? [local] : [];
  });
}

function faultSuite(mode: ProxyMode): void {
  describe(`layer-2 pool addresses through an API outage and a stopped or deaf agent, kube-proxy in ${mode} mode`, () => {
    let cluster: Cluster;
    before(async () => {
      cluster = await startL2Cluster(mode);
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(l2Service("web")));
    });
    /** Probers and request loops, stopped here too when a case failed before stopping its own. */
    const running: { stop(): Promise<unknown> }[] = [];
    after(async () => {
      for (const watcher of running.splice(0)) await watcher.stop();
      await cluster?.stop();
    });

    const leaseRenewTime = (node: string) =>
      cluster.kubectl(["get", "lease", "-n", NAMESPACE, announcerLeaseName(node) as string, "-o",
        "jsonpath={.spec.renewTime}"]);
    /** Until `node`'s agent renewed its Lease at `at` (epoch ms) or later. */
    const renewedPast = (node: string, at: number) =>
      waitFor(`${node} renewing its Lease`, async () => Date.parse(await leaseRenewTime(node)) >= at, WAIT_MS, 250);
    const services = () => new Resource<Service>(cluster.admin, { ...SERVICE_RESOURCE, namespace: "default" });
    /** The Service's announcer, once the client resolves its address to that node. */
    const settled = async () => {
      const { ip, announcer } = await waitForAnnouncer(cluster, "web");
      await waitForClientAt(cluster, ip, announcer);
      return { ip, announcer, mac: (await nodeMac(cluster, announcer)) as string };
    };
    /**
     * The prober and the requests, once the prober heard `mac` answer; stopped: what they saw, with the findings every
     * case asserts.
     */
    const watched = async (ip: string, mac: string) => {
      const [prober, requests, endpoints] = [startProber(cluster, ip), startRequests(cluster, ip),
        sampleReadyEndpoints(cluster, "web")];
      running.push(prober, requests, endpoints);
      await waitFor(`the prober hearing ${mac}`, () => answeringMacs(prober.lines()).includes(mac), WAIT_MS, 100);
      return {
        async stop(t: TestContext) {
          const [lines, made, samples] = [await prober.stop(), await requests.stop(), await endpoints.stop()];
          const findings = probeFindings(lines);
          const unansweredMs = longestUnanswered(made);
          t.diagnostic(
            `${made.length} requests, ${failed(made).length} failed, longest unanswered ${unansweredMs} ms; ` +
              `${lines.filter((line) => line.kind === "request").length} ARP probes, answered by ` +
              `${answeringMacs(lines).join(" then ")}; dual answers ${findings.dualAnswers.length}`,
          );
          assert.deepEqual(findings, { dualAnswers: [], returns: [] });
          return { lines, made, samples, unansweredMs };
        },
      };
    };
    /** What the controller said about the Service: its Events, its log lines naming it, its guard and leadership. */
    const controllerAccount = async () => {
      const events = JSON.parse(
        await cluster.kubectl(["get", "events", "--field-selector", "involvedObject.name=web", "-o", "json"]),
      ) as { items: { lastTimestamp?: string; reason?: string; message?: string }[] };
      const logs = await Promise.all(
        (await listPods(cluster, CONTROLLER_APP)).map((pod) =>
          cluster.kubectl(["logs", "-n", NAMESPACE, pod.metadata?.name as string]).catch(() => ""),
        ),
      );
      return [
        ...events.items.map((event) => `${event.lastTimestamp} ${event.reason}: ${event.message}`),
        ...logs.flatMap((log) => log.split("\n")).filter((line) => /default\/web|Lease guard|leading/.test(line)),
      ];
    };

    /** What `node`'s agent said of announcing (its Lease, holding, withdrawals): how it saw a fault. */
    const agentAccount = async (node: string) => {
      const pod = (await listPods(cluster, AGENT_APP)).find((pod) => pod.spec?.nodeName === node);
      const log = await cluster.kubectl(["logs", "-n", NAMESPACE, pod?.metadata?.name ?? ""]).catch(() => "");
      return log.split("\n").filter((line) => /L2|announc/.test(line));
    };

    /** What the outage case saw, for the case after it. */
    let outage: {
      announcer: string;
      mac: string;
      resumedAt: number;
      lines: ProbeLine[];
      made: ClientRequest[];
      samples: ReadySample[];
    };

    test("kube-apiserver stopped for 60 s: every request answered, by the announcer alone", async (t) => {
      const { ip, announcer, mac } = await settled();
      const watching = await watched(ip, mac);
      const apiserver = cluster.controlPlane.pids().apiserver;
      const stoppedAt = Date.now();
      process.kill(apiserver, "SIGSTOP");
      try {
        await sleep(OUTAGE_MS); // the outage itself: what is measured is that nothing changes through it
      } finally {
        process.kill(apiserver, "SIGCONT");
      }
      const resumedAt = Date.now();
      // Back: the agents renew, kube-controller-manager marks the Nodes Ready=Unknown a while, the controller's view
      // is fresh again. The window the next case looks at: until the announcer renewed five Lease durations past
      // the return (15 s: kube-controller-manager's marks came within 10 s), long enough for the controller to act
      // on any expiry or mark its stale view caused; the watch fails the test at the first move.
      const moves = await watchAnnouncer(services(), "web", announcer);
      try {
        await Promise.race([moves.moved, renewedPast(announcer, resumedAt + 5 * LEASE_DURATION_SECONDS * 1000)]);
      } catch (err) {
        // The accounts in the failure itself: CI's summary shows a failure's message, not its diagnostics.
        const account = [...(await agentAccount(announcer)), ...(await controllerAccount())];
        throw new Error(`${(err as Error).message}\n${account.join("\n")}`, { cause: err });
      } finally {
        moves.stop();
      }
      for (const line of [...(await agentAccount(announcer)), ...(await controllerAccount())]) t.diagnostic(line);
      const { lines, made, samples } = await watching.stop(t);
      outage = { announcer, mac, resumedAt, lines, made, samples };
      const during = made.filter((request) => request.startedMs >= stoppedAt && request.endedMs <= resumedAt);
      t.diagnostic(`${during.length} requests during the outage, ${failed(during).length} failed`);
      assert.ok(during.length >= OUTAGE_MS / 1000 / 2, `only ${during.length} requests during the outage`);
      assert.deepEqual(failed(during), [], "requests failed during the outage");
      const heard = answeringMacs(lines.filter((line) => line.atMs >= stoppedAt && line.atMs <= resumedAt));
      assert.deepEqual(heard, [mac], "only the announcer answered during the outage");
    });

    test("kube-apiserver back after 60 s: nothing moves", async (t) => {
      if (!outage) assert.fail("the outage case ended before it recorded what it saw");
      const { announcer, mac, resumedAt, lines, made, samples } = outage;
      const afterReturn = (atMs: number) => `${((atMs - resumedAt) / 1000).toFixed(1)} s after`;
      const after = made.filter((request) => request.startedMs >= resumedAt);
      for (const request of failed(after)) t.diagnostic(`failed ${afterReturn(request.startedMs)}: ${request.error}`);
      const [firstUnready, lastUnready] = [unready(samples)[0], unready(samples).at(-1)];
      if (firstUnready && lastUnready)
        t.diagnostic(`no ready endpoint from ${afterReturn(firstUnready.atMs)} to ${afterReturn(lastUnready.atMs)}`);
      const moved = lines.find((line) => line.kind !== "request" && line.mac !== mac);
      if (moved) t.diagnostic(`another MAC answered ${afterReturn(moved.atMs)}`);
      const whileReady = failed(after).filter(({ startedMs }) => !startedWhileUnready(samples, startedMs));
      assert.deepEqual(whileReady, [], "requests failed after the outage while the Service had a ready endpoint");
      assert.deepEqual(answeringMacs(lines), [mac], "only the announcer answered");
      assert.equal((await waitForAnnouncer(cluster, "web")).announcer, announcer, "the announcer never changed");
    });

    test("the announcer's watches black-holed, its Service moved away: the next once it stopped answering", async (t) => {
      const { ip, announcer, mac } = await settled();
      const node = cluster.node(announcer);
      const pids = await agentPids(cluster, announcer);
      const rules: string[][] = [];
      const watching = await watched(ip, mac);
      try {
        // Its watches' connections (quiet since their last event) black-holed both ways; its renewals go on.
        for (const until = Date.now() + 3000; Date.now() < until; await sleep(100))
          for (const port of await idleApiConnections(cluster, announcer, pids, WATCH_IDLE_MS))
            for (const rule of [["INPUT", "-p", "tcp", "--dport", port], ["OUTPUT", "-p", "tcp", "--sport", port]])
              if (!rules.some((added) => added.join(" ") === rule.join(" "))) {
                await node.exec("iptables", ["-I", ...rule, "-j", "DROP"]);
                rules.push(rule);
              }
        assert.ok(rules.length > 0, "no watch connection of the agent found");
        t.diagnostic(`black-holed ${rules.length / 2} connections of ${announcer}'s agent`);
        const movedAt = Date.now();
        const selector = `kubernetes.io/hostname!=${announcer}`;
        await cluster.kubectl(["annotate", "service", "web", `${NODE_SELECTOR_ANNOTATION}=${selector}`]);
        // Released while its Lease lives: the controller waits for the agent, which cannot know yet.
        await waitFor(
          `web released from ${announcer}`,
          async () => (await getService(cluster, "web")).metadata?.annotations?.[RELEASED_FROM_ANNOTATION] === announcer,
          WAIT_MS,
          50,
        );
        const next = await waitForAnnouncer(cluster, "web", announcer);
        await waitForClientAt(cluster, ip, next.announcer);
        t.diagnostic(`${ip} at ${next.announcer} ${((Date.now() - movedAt) / 1000).toFixed(1)} s after the move`);
      } finally {
        for (const rule of rules) await node.exec("iptables", ["-D", ...rule, "-j", "DROP"]);
        await cluster.kubectl(["annotate", "service", "web", `${NODE_SELECTOR_ANNOTATION}-`]);
      }
      const { lines, unansweredMs } = await watching.stop(t);
      const macs = answeringMacs(lines);
      assert.equal(macs[0], mac, "the old announcer answered first");
      assert.equal(macs.length, 2, `answered by ${macs.join(", ")}`);
      assert.ok(unansweredMs < 3 * BUDGET_MS, `the client went unanswered for ${unansweredMs} ms`);
    });

    test("the announcing agent stopped (SIGSTOP): taken over within the budget; resumed, it never answers", async (t) => {
      const { ip, announcer, mac } = await settled();
      const pids = await agentPids(cluster, announcer);
      const watching = await watched(ip, mac);
      const stoppedAt = Date.now();
      for (const pid of pids) process.kill(pid, "SIGSTOP");
      try {
        const next = await waitForAnnouncer(cluster, "web", announcer);
        await waitForClientAt(cluster, ip, next.announcer);
        t.diagnostic(`${announcer} stopped: ${ip} at ${next.announcer} after ${(Date.now() - stoppedAt) / 1000} s`);
      } finally {
        for (const pid of pids) process.kill(pid, "SIGCONT");
      }
      // Resumed with its timers overdue and frames queued on its sockets: it renews, and must stay silent for as
      // long as its successor's Lease outlives any claim it could still have made (a Lease duration past the resume).
      await renewedPast(announcer, Date.now() + LEASE_DURATION_SECONDS * 1000);
      const { lines, unansweredMs } = await watching.stop(t);
      const macs = answeringMacs(lines);
      assert.equal(macs[0], mac, "the old announcer answered first");
      assert.equal(macs.length, 2, `answered by ${macs.join(", ")}`);
      assert.ok(unansweredMs < 3 * BUDGET_MS, `the client went unanswered for ${unansweredMs} ms`);
    });
  });
}

for (const mode of PROXY_MODES) faultSuite(mode);
