// What the local cluster gives Service tests, on the real cluster: kube-proxy on every node (healthy on 10256, as
// system:kube-proxy, its rules in the node namespaces and never in the machine's), agnhost netexec backends
// behind a NodePort answering from the client host at every node's public address, pod traffic between nodes
// without NAT, cluster DNS, and the admin kubeconfig working on the client host.
// Everything runs in both proxy modes: a 3-node cluster with its kube-proxies healthy takes about 15 s here, and
// each mode's filter rules also see the pod traffic between nodes.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, test } from "node:test";
import { NETEXEC_PORT, netexecBackends } from "../../localcluster/agnhost.ts";
import { type Cluster, type ClusterNode, startCluster } from "../../localcluster/cluster.ts";
import { run } from "../../localcluster/exec.ts";
import {
  KUBE_PROXY_HEALTH_PORT,
  KUBE_PROXY_METRICS_PORT,
  PROXY_MODES,
  type ProxyMode,
} from "../../localcluster/kube-proxy.ts";
import { waitFor } from "../../localcluster/wait.ts";

const UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized";
const rssMiB = (pid: number | undefined) =>
  readFile(`/proc/${pid}/status`, "utf8").then((s) => Math.round(Number(/VmRSS:\s+(\d+)/.exec(s)?.[1]) / 1024));

/** Two netexec backends, one per worker (node-1, node-2), behind a NodePort Service. */
const BACKENDS = [
  netexecBackends(2),
  {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: "netexec", namespace: "default" },
    spec: { type: "NodePort", selector: { app: "netexec" }, ports: [{ port: 80, targetPort: NETEXEC_PORT }] },
  },
];

interface Backends {
  /** Pod name → pod IP and node. */
  pods: Map<string, { ip: string; node: string }>;
  nodePort: number;
  clusterIP: string;
  /** From startCluster() to Nodes Ready and every kube-proxy healthy. */
  readySeconds: number;
}

/** Starts a 3-node cluster (node-0 control plane) with the backends running; the taint no CCM removes, removed. */
async function clusterWithBackends(proxyMode: ProxyMode): Promise<{ cluster: Cluster; backends: Backends }> {
  const started = Date.now();
  const cluster = await startCluster({ nodes: 3, proxyMode, projectImage: false, dns: true });
  try {
    const readySeconds = (Date.now() - started) / 1000;
    for (const node of cluster.nodes) await cluster.kubectl(["taint", "node", node.name, `${UNINITIALIZED}-`]);
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: BACKENDS }));
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=120s"]);
    const list = JSON.parse(await cluster.kubectl(["get", "pods", "-l", "app=netexec", "-o", "json"])) as {
      items: { metadata: { name: string }; spec: { nodeName: string }; status: { podIP: string } }[];
    };
    const pods = new Map(list.items.map((p) => [p.metadata.name, { ip: p.status.podIP, node: p.spec.nodeName }]));
    const service = JSON.parse(await cluster.kubectl(["get", "service", "netexec", "-o", "json"])) as {
      spec: { clusterIP: string; ports: { nodePort: number }[] };
    };
    const nodePort = service.spec.ports[0]?.nodePort as number;
    return { cluster, backends: { pods, nodePort, clusterIP: service.spec.clusterIP, readySeconds } };
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

/** An HTTP GET from the client host (Node's fetch in its namespace): status and body. */
async function getFromClient(cluster: Cluster, url: string): Promise<{ status: number; body: string }> {
  const script = `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) })
    .then(async (r) => console.log(JSON.stringify({ status: r.status, body: await r.text() })))`;
  return JSON.parse(await cluster.client.exec(process.execPath, ["-e", script])) as { status: number; body: string };
}

/** An HTTP GET from this process, in the root namespace (which routes to every node and pod CIDR). */
async function get(url: string): Promise<string> {
  const response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  assert.equal(response.status, 200, url);
  return response.text();
}

function proxySuite(mode: ProxyMode): void {
  describe(`kube-proxy in ${mode} mode`, () => {
    let cluster: Cluster;
    let backends: Backends;
    before(async () => {
      ({ cluster, backends } = await clusterWithBackends(mode));
    });
    after(async () => {
      await cluster?.stop();
    });

    test("on every node: /healthz on 10256 answers the client host, the mode is as asked, no refusal", async (t) => {
      t.diagnostic(`3 nodes Ready, kube-proxies healthy ${backends.readySeconds.toFixed(1)}s after startCluster()`);
      assert.equal(cluster.proxyMode, mode);
      for (const node of cluster.nodes) {
        const health = await getFromClient(cluster, `http://${node.publicIP}:${KUBE_PROXY_HEALTH_PORT}/healthz`);
        assert.equal(health.status, 200, `${node.name}: ${health.body}`);
        assert.equal((JSON.parse(health.body) as { healthy: boolean }).healthy, true, node.name);
        const script = `fetch("http://127.0.0.1:${KUBE_PROXY_METRICS_PORT}/proxyMode").then(async (r) =>
          console.log(await r.text()))`;
        assert.equal((await node.exec(process.execPath, ["-e", script])).trim(), mode, node.name);
        // As system:kube-proxy with system:node-proxier's rights, it is never refused what it lists and watches.
        const log = await readFile(`${cluster.dir}/nodes/${node.name}/kube-proxy.log`, "utf8");
        assert.doesNotMatch(log, /forbidden|Unauthorized/i, node.name);
        t.diagnostic(`${node.name}: kube-proxy ${await rssMiB(node.pids().kubeProxy)} MiB RSS`);
      }
    });

    test("its rules are in the node namespaces, none in the machine's own", async () => {
      const { nodePort } = backends;
      // iptables: a jump in KUBE-NODEPORTS; nftables: an element of the service-nodeports map.
      const rule = new RegExp(
        mode === "iptables" ? `-A KUBE-NODEPORTS .*--dport ${nodePort} ` : `tcp \\. ${nodePort} : goto`,
      );
      const rules = (node: ClusterNode) =>
        mode === "iptables"
          ? node.exec("iptables-save", ["-t", "nat"])
          : node.exec("nft", ["list", "table", "ip", "kube-proxy"]);
      for (const node of cluster.nodes) {
        // kube-proxy syncs when it sees the Service: eventually, not at once.
        await waitFor(`${node.name}'s rule for the NodePort ${nodePort}`, async () => rule.test(await rules(node)),
          60_000, 250);
      }
      assert.doesNotMatch(await run("iptables-save", []), /KUBE-/);
      assert.doesNotMatch(await run("nft", ["list", "tables"]), /kube-proxy/);
    });

    test("the NodePort answers /hostname from the client host at every node's public address", async (t) => {
      const names = [...backends.pods.keys()];
      assert.deepEqual([...backends.pods.values()].map((p) => p.node).sort(), ["node-1", "node-2"]);
      for (const node of cluster.nodes) {
        // externalTrafficPolicy Cluster: any node forwards to any backend; node-0 has none of its own.
        const seen = new Set<string>();
        await waitFor(
          `both backends answering at ${node.name}'s ${node.publicIP}:${backends.nodePort}`,
          async () => {
            const url = `http://${node.publicIP}:${backends.nodePort}/hostname`;
            const { status, body } = await getFromClient(cluster, url);
            assert.equal(status, 200);
            assert.ok(names.includes(body), `${body} is not one of ${names.join(", ")}`);
            seen.add(body);
            return seen.size === names.length;
          },
          120_000,
          0,
        );
      }
      t.diagnostic(`every node's public address reached both backends (${names.join(", ")})`);
    });

    test("pod traffic between nodes: a pod on node-1 reaches node-2's pod from its own address", async () => {
      const on = (node: string) => [...backends.pods.values()].find((p) => p.node === node) as { ip: string };
      const [a, b] = [on("node-1"), on("node-2")];
      // netexec's /dial: pod a makes the request and reports what b answered.
      const dial = async (host: string, port: number, tries: number) => {
        const query = `request=clientip&host=${host}&port=${port}&protocol=http&tries=${tries}`;
        const { responses } = JSON.parse(await get(`http://${a.ip}:8080/dial?${query}`)) as { responses: string[] };
        return responses.map((address) => address.replace(/:\d+$/, ""));
      };
      assert.deepEqual(await dial(b.ip, 8080, 3), [a.ip, a.ip, a.ip], "pod to pod: no NAT on the way");
    });

    test("cluster DNS: a pod reaches the Service by its short name, answered by a backend", async () => {
      const pod = [...backends.pods.values()][0] as { ip: string };
      // netexec's /dial resolves the name as any pod does: resolv.conf's search list, then CoreDNS at kube-dns.
      const hostnames = await waitFor(
        "the name netexec resolved by cluster DNS",
        async () => {
          const query = "request=hostname&host=netexec&port=80&protocol=http&tries=1";
          const answer = JSON.parse(await get(`http://${pod.ip}:8080/dial?${query}`)) as { responses?: string[] };
          const responses = answer.responses;
          return responses?.length ? responses : undefined;
        },
        120_000,
        1_000,
      );
      assert.ok(backends.pods.has(hostnames[0] as string), `answered by ${hostnames.join(", ")}`);
    });

    test("KUBECONFIG works on the client host: kubectl get nodes", async () => {
      const nodes = await cluster.client.exec("kubectl", ["get", "nodes", "-o", "name"]);
      assert.deepEqual(nodes.trim().split("\n"), cluster.nodes.map((node: ClusterNode) => `node/${node.name}`));
      const address = await cluster.client.exec("ip", ["-4", "address", "show", "eth0"]);
      assert.match(address, new RegExp(`inet ${cluster.client.ip}/`));
    });
  });
}

for (const mode of PROXY_MODES) proxySuite(mode);
