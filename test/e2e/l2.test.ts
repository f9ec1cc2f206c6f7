// Layer-2 pool addresses as users run them: `helm install` of charts/local-ccm with loadBalancer.l2.enabled on four
// real kubelets with kube-proxy (localcluster/), node-0 the control-plane node (kubeadm's exclusion label: the
// workers announce), a LoadBalancerIPPool inside the nodes' public /24, which the client host shares. In both proxy
// modes, from the client host:
// - a Service of class local-ccm.io/l2 answers curl at its pool address, and the client's ARP entry for it is the
//   MAC of the node the Service names as its announcer; with externalTrafficPolicy Local the announcer is a node
//   with an endpoint and the backend sees the client's own address;
// - the announcer cut off from the API (its link stays up) stops answering and another worker takes over; the
//   announcer powered off: another worker takes over and the address answers again. Through both, a prober on the
//   client (arp-prober.ts) asks for the address five times a second: no request is ever answered by two nodes, and
//   a node that stopped answering never answers again.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Cluster } from "../../localcluster/cluster.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import { PROXY_MODES, type ProxyMode } from "../../localcluster/kube-proxy.ts";
import * as layer2 from "../../localcluster/layer2.ts";
import { publicPoolRange } from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { ProbeLine } from "./arp-prober.ts";
import {
  l2Service,
  probeFindings,
  startL2Cluster,
  startProber,
  WAIT_MS,
  waitForAnnouncer as waitForAnnouncerOn,
  WORKERS,
} from "./l2-cluster.ts";

function l2Suite(mode: ProxyMode): void {
  describe(`layer-2 pool addresses, kube-proxy in ${mode} mode`, () => {
    let cluster: Cluster;
    before(async () => {
      cluster = await startL2Cluster(mode);
    });
    after(async () => {
      await cluster?.stop();
    });

    const waitForAnnouncer = (name: string, not?: string) => waitForAnnouncerOn(cluster, name, not);
    const getFromClient = (ip: string, path: string) => layer2.getFromClient(cluster, ip, path);
    const clientMac = (ip: string) => layer2.clientMac(cluster, ip);
    const nodeMac = (name: string) => layer2.nodeMac(cluster, name);
    const backendNodes = () => layer2.backendNodes(cluster);

    // Set by the first test, used by the failover tests after it.
    let ip: string;
    let announcer: string;

    test("a pool address answers the client at the MAC of the node the Service names as its announcer", async (t) => {
      const created = Date.now();
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(l2Service("web")));
      ({ ip, announcer } = await waitForAnnouncer("web"));
      const [first, last] = publicPoolRange(cluster.slot).split("-").map((address) => Number(address.split(".")[3]));
      const host = Number(ip.split(".")[3]);
      assert.ok(host >= (first as number) && host <= (last as number), `${ip} is outside the pool`);
      assert.ok(WORKERS.includes(announcer), `announced by ${announcer}, not a worker`);

      const answer = await waitFor(`${ip} answering the client`, () => getFromClient(ip, "/hostname"), WAIT_MS, 250);
      t.diagnostic(`${ip} answered ${((Date.now() - created) / 1000).toFixed(1)} s after the Service was created`);
      assert.ok((await backendNodes()).has(answer), `${ip} answered ${answer}`);
      assert.equal(await clientMac(ip), await nodeMac(announcer));
    });

    test("externalTrafficPolicy Local: announced by a node with an endpoint, which sees the client", async () => {
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(l2Service("local", true)));
      const local = await waitForAnnouncer("local");
      const pods = await backendNodes();
      assert.ok([...pods.values()].includes(local.announcer), `${local.announcer} has no endpoint`);
      const seen = await waitFor(`${local.ip} answering`, () => getFromClient(local.ip, "/clientip"), WAIT_MS, 250);
      assert.equal(seen.replace(/:\d+$/, ""), clusterLayout(cluster.slot).clientIP);
      assert.equal(await clientMac(local.ip), await nodeMac(local.announcer));
    });

    test("the announcer cut off from the API: another worker takes over, never both answering", async (t) => {
      const prober = startProber(cluster, ip);
      // Only the API: the node's link stays up, kubelet and the agent lose the apiserver (443 on the gateway).
      const rule = ["OUTPUT", "-d", clusterLayout(cluster.slot).gateway, "-p", "tcp", "--dport", "443", "-j", "DROP"];
      const cut = cluster.node(announcer);
      const since = Date.now();
      await cut.exec("iptables", ["-I", ...rule]);
      try {
        const next = await waitForAnnouncer("web", announcer);
        const nextMac = await nodeMac(next.announcer);
        await waitFor(`the client resolving ${ip} to ${next.announcer}`, async () => (await clientMac(ip)) === nextMac,
          WAIT_MS, 100);
        t.diagnostic(`${announcer} cut off: ${ip} at ${next.announcer}'s MAC after ${(Date.now() - since) / 1000} s`);
        await waitFor(`${ip} answering the client`, () => getFromClient(ip, "/hostname"), WAIT_MS, 250);
      } finally {
        await cut.exec("iptables", ["-D", ...rule]);
      }
      const lines = await prober.stop();
      assert.ok(lines.some((line) => line.kind === "reply"), "the prober saw no reply at all");
      assert.deepEqual(probeFindings(lines), { dualAnswers: [], returns: [] });
      ({ announcer } = await waitForAnnouncer("web"));
    });

    test("the announcer powered off: another worker takes over and the address answers again", async (t) => {
      const prober = startProber(cluster, ip);
      const killed = Date.now();
      await cluster.killNode(announcer);
      const next = await waitForAnnouncer("web", announcer);
      const nextMac = await nodeMac(next.announcer);
      await waitFor(`the client resolving ${ip} to ${next.announcer}`, async () => (await clientMac(ip)) === nextMac,
        WAIT_MS, 100);
      t.diagnostic(`${announcer} powered off: ${ip} at ${next.announcer} after ${(Date.now() - killed) / 1000} s`);
      // kube-proxy still sends some connections to the dead node's backend until its endpoint goes.
      await waitFor(`${ip} answering the client`, () => getFromClient(ip, "/hostname"), WAIT_MS, 250);
      assert.deepEqual(probeFindings(await prober.stop()), { dualAnswers: [], returns: [] });
    });
  });
}

test("probeFindings: a request answered by two MACs, and a MAC answering again after another, are found", () => {
  const at = (kind: "reply" | "announcement", request: number, mac: string): ProbeLine => ({
    kind,
    request,
    atMs: 0,
    mac,
  });
  const request = (n: number): ProbeLine => ({ kind: "request", request: n, atMs: 0 });
  const clean = [request(1), at("reply", 1, "a"), request(2), at("announcement", 2, "b"), at("reply", 2, "b")];
  assert.deepEqual(probeFindings(clean), { dualAnswers: [], returns: [] });
  assert.deepEqual(probeFindings([...clean, request(3), at("reply", 3, "b"), at("reply", 3, "a")]), {
    dualAnswers: ["request 3: b, a"],
    returns: ["a"],
  });
});

for (const mode of PROXY_MODES) l2Suite(mode);
