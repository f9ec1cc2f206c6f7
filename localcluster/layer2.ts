// What a layer-2 load balancer looks like from the local cluster's hosts, for the L2 tests, benchmark and demo:
// which MAC the client host resolved an address to, each node's MAC, an HTTP GET from the client host, and where
// agnhost netexec's backends run.
import type { Cluster } from "./cluster.ts";

/** The MAC the client host resolved `ip` to; undefined without an entry (or one being resolved). */
export async function clientMac(cluster: Cluster, ip: string): Promise<string | undefined> {
  const entries = JSON.parse(await cluster.client.exec("ip", ["-json", "neigh", "show", ip])) as { lladdr?: string }[];
  if (entries.length > 1) throw new Error(`the client host has ${entries.length} entries for ${ip}`);
  return entries[0]?.lladdr;
}

/** The MAC of a node's eth0, the link on the nodes' networks. */
export async function nodeMac(cluster: Cluster, name: string): Promise<string | undefined> {
  const [link] = JSON.parse(await cluster.node(name).exec("ip", ["-json", "link", "show", "eth0"])) as {
    address: string;
  }[];
  return link?.address;
}

/** An HTTP GET from the client host: the body of a 2xx answer (curl fails on anything else). */
export function getFromClient(cluster: Cluster, ip: string, path: string): Promise<string> {
  return cluster.client.exec("curl", ["--silent", "--show-error", "--fail", "--max-time", "5", `http://${ip}${path}`]);
}

/** The netexec backends' pod names → their nodes. */
export async function backendNodes(cluster: Cluster): Promise<Map<string, string>> {
  const pods = JSON.parse(await cluster.kubectl(["get", "pods", "-l", "app=netexec", "-o", "json"])) as {
    items: { metadata: { name: string }; spec: { nodeName: string } }[];
  };
  return new Map(pods.items.map((pod) => [pod.metadata.name, pod.spec.nodeName]));
}
