// The anchor of the L2 announcement benchmark, proven on the local cluster: MetalLB (localcluster/metallb.ts, built
// from its pinned module, its own Helm chart) in L2 mode on three real kubelets with kube-proxy, node-0 the
// control-plane node (kubeadm's exclusion label: MetalLB announces from the workers only). A LoadBalancer Service
// gets an address from a pool inside the nodes' public /24, which the client host shares; curl from the client
// reaches the backends through it, and the client's ARP entry for it is the MAC of the node MetalLB says announces.
//
// Not in `npm test`: the first run builds MetalLB (minutes), and the install alone waits out its probes' delays.
// `npm run e2e:metallb` runs it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { NETEXEC_PORT, netexecBackends } from "../../localcluster/agnhost.ts";
import { type Cluster, clusterLayout, startCluster } from "../../localcluster/cluster.ts";
import { installMetallb, l2PoolObjects, METALLB_NAMESPACE } from "../../localcluster/metallb.ts";
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
    await installMetallb(cluster, { name: "public", addresses: [poolRange(cluster.slot)] });
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

  test("a LoadBalancer Service answers the client host at a pool address that one worker announces", async (t) => {
    const created = Date.now();
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(SERVICE));
    const ip = await waitFor(
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

    const pods = JSON.parse(await cluster.kubectl(["get", "pods", "-l", "app=netexec", "-o", "json"])) as {
      items: { metadata: { name: string } }[];
    };
    const answer = await waitFor(
      `${ip}:80 answering the client host`,
      () => cluster.client.exec("curl", ["--silent", "--show-error", "--fail", "--max-time", "5",
        `http://${ip}/hostname`]),
      WAIT_MS,
      250,
    );
    const seconds = ((Date.now() - created) / 1000).toFixed(1);
    t.diagnostic(`address ${ip} answered ${seconds} s after the Service was created`);
    assert.ok(pods.items.some((pod) => pod.metadata.name === answer), `${ip} answered ${answer}`);

    // The node MetalLB records as announcing the Service, and the MAC the client resolved the address to.
    const announcer = await waitFor(
      "a ServiceL2Status naming web's announcing node",
      async () => {
        const list = JSON.parse(
          await cluster.kubectl(["get", "servicel2statuses.metallb.io", "-n", METALLB_NAMESPACE, "-o", "json"]),
        ) as { items: { status?: { node?: string; serviceName?: string } }[] };
        return list.items.find((item) => item.status?.serviceName === "web")?.status?.node;
      },
      WAIT_MS,
      250,
    );
    assert.ok(WORKERS.includes(announcer), `announced by ${announcer}, not a worker`);
    const neighbours = JSON.parse(await cluster.client.exec("ip", ["-json", "neigh", "show", ip])) as {
      lladdr?: string;
    }[];
    const macs = new Map<string, string>();
    for (const node of cluster.nodes) {
      const [link] = JSON.parse(await node.exec("ip", ["-json", "link", "show", "eth0"])) as { address: string }[];
      macs.set(node.name, link?.address ?? "");
    }
    const resolved = neighbours[0]?.lladdr;
    t.diagnostic(`client: ${ip} at ${resolved}; ${announcer} announces, eth0 ${macs.get(announcer)}`);
    assert.equal(neighbours.length, 1, JSON.stringify(neighbours));
    assert.equal(resolved, macs.get(announcer));
    assert.deepEqual([...macs].filter(([, mac]) => mac === resolved).map(([name]) => name), [announcer]);
  });
});
