// The anchor of the L2 announcement benchmark, proven on the local cluster: MetalLB (localcluster/metallb.ts, built
// from its pinned module, its own Helm chart) in L2 mode on three real kubelets with kube-proxy, node-0 the
// control-plane node (kubeadm's exclusion label: MetalLB announces from the workers only). A LoadBalancer Service
// gets an address from a pool inside the nodes' public /24, which the client host shares; curl from the client
// reaches the backends through it, and the client's ARP entry for it is the MAC of the node MetalLB says announces.
// Powering that node off moves the client's entry to the other worker, and the address answers again through it.
// The diagnostics give the times the benchmark measures, once each; they are not asserted.
//
// Not in `npm test`: the first run builds MetalLB (minutes), and the install alone waits out its probes' delays.
// `npm run e2e:metallb` runs it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { NETEXEC_PORT, netexecBackends } from "../../localcluster/agnhost.ts";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { clusterLayout } from "../../localcluster/layout.ts";
import * as layer2 from "../../localcluster/layer2.ts";
import { announcingNode, installMetallb, l2PoolObjects } from "../../localcluster/metallb.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";

const WORKERS = ["node-1", "node-2"];
/** Generous: the machine runs other tests too. */
const WAIT_MS = 120_000;

/** Beside the nodes (.10 and up) and the client host (.2) on the public network, never one of them. */
const poolRange = (slot: number) => {
  const prefix = clusterLayout(slot).publicGateway.replace(/\.1$/, "");
  return `${prefix}.240-${prefix}.250`;
};

/** Class-less, as MetalLB serves by default. */
const SERVICE = {
  apiVersion: "v1",
  kind: "Service",
  metadata: { name: "web", namespace: "default" },
  spec: { type: "LoadBalancer", selector: { app: "netexec" }, ports: [{ port: 80, targetPort: NETEXEC_PORT }] },
};

describe("MetalLB in L2 mode on the local cluster", () => {
  let cluster: Cluster;
  let installSeconds: string;
  before(async () => {
    cluster = await startCluster({ nodes: 3, projectImage: false });
    // kubelet registers every Node with the taint a cloud controller removes; none runs here, so the admin does.
    for (const node of cluster.nodes) await cluster.kubectl(["taint", "node", node.name, `${UNINITIALIZED_TAINT}-`]);
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(netexecBackends(WORKERS.length)));
    const started = Date.now();
    await installMetallb(cluster, l2PoolObjects("public", [poolRange(cluster.slot)]));
    installSeconds = ((Date.now() - started) / 1000).toFixed(1);
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=180s"]);
  });
  after(async () => {
    await cluster?.stop();
  });

  test("installed as users have it: MetalLB's webhook, reached by the apiserver, refuses a bad pool", async (t) => {
    t.diagnostic(`installMetallb took ${installSeconds} s (images imported, rollouts, the pool accepted)`);
    const [pool] = l2PoolObjects("bad", ["198.19.300.0/24"]);
    await assert.rejects(
      cluster.kubectl(["apply", "-f", "-"], JSON.stringify(pool)),
      /admission webhook "ipaddresspoolvalidationwebhook\.metallb\.io" denied the request/,
    );
  });

  const getFromClient = (ip: string, path: string) => layer2.getFromClient(cluster, ip, path);
  const clientMac = (ip: string) => layer2.clientMac(cluster, ip);
  const nodeMac = (name: string) => layer2.nodeMac(cluster, name);
  const backendNodes = () => layer2.backendNodes(cluster);

  // Set by the first Service test, used by the failover test after it.
  let ip: string;
  let announcer: string;

  test("a LoadBalancer Service answers the client host at a pool address that one worker announces", async (t) => {
    const created = Date.now();
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(SERVICE));
    ip = await waitFor(
      "web's ingress address from MetalLB",
      async () => {
        const service = JSON.parse(await cluster.kubectl(["get", "service", "web", "-o", "json"])) as Service;
        return service.status?.loadBalancer?.ingress?.[0]?.ip;
      },
      WAIT_MS,
      250,
    );
    const [first, last] = poolRange(cluster.slot).split("-").map((address) => Number(address.split(".")[3]));
    const host = Number(ip.split(".")[3]);
    assert.ok(ip.startsWith(clusterLayout(cluster.slot).publicGateway.replace(/1$/, "")), ip);
    assert.ok(host >= (first as number) && host <= (last as number), `${ip} is outside the pool`);

    const answer = await waitFor(`${ip}:80 answering the client host`, () => getFromClient(ip, "/hostname"),
      WAIT_MS, 250);
    const seconds = ((Date.now() - created) / 1000).toFixed(1);
    t.diagnostic(`address ${ip} answered ${seconds} s after the Service was created`);
    assert.ok((await backendNodes()).has(answer), `${ip} answered ${answer}`);

    // The node MetalLB records as announcing the Service, and the MAC the client resolved the address to.
    announcer = await waitFor("a ServiceL2Status naming web's announcing node",
      () => announcingNode(cluster, "default", "web"), WAIT_MS, 250);
    assert.ok(WORKERS.includes(announcer), `announced by ${announcer}, not a worker`);
    const macs = new Map<string, string | undefined>();
    for (const node of cluster.nodes) macs.set(node.name, await nodeMac(node.name));
    const resolved = await clientMac(ip);
    t.diagnostic(`client: ${ip} at ${resolved}; ${announcer} announces, eth0 ${macs.get(announcer)}`);
    assert.equal(resolved, macs.get(announcer));
    assert.deepEqual([...macs].filter(([, mac]) => mac === resolved).map(([name]) => name), [announcer]);
  });

  test("the announcing worker powered off: the other one takes the address, the client reaches it again", async (t) => {
    const survivor = WORKERS.find((name) => name !== announcer) as string;
    const survivorMac = await nodeMac(survivor);
    const pods = await backendNodes();
    const killed = Date.now();
    const since = () => `${((Date.now() - killed) / 1000).toFixed(1)} s`;
    await cluster.killNode(announcer);
    // The client's entry moves when the survivor's speaker announces (gratuitous ARP) or answers a new request.
    await waitFor(`the client resolving ${ip} to ${survivor}`, async () => (await clientMac(ip)) === survivorMac,
      WAIT_MS, 100);
    t.diagnostic(`${announcer} powered off: the client resolved ${ip} to ${survivor} after ${since()}`);
    // kube-proxy on the survivor still sends some connections to the dead node's backend until its endpoint goes.
    const answer = await waitFor(`${ip} answering the client host`, () => getFromClient(ip, "/hostname"),
      WAIT_MS, 250);
    t.diagnostic(`${ip} answered again through ${survivor} after ${since()}`);
    assert.equal(pods.get(answer), survivor, `${ip} answered ${answer}`);
  });
});
