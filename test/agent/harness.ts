// A world for agent tests: a real control plane, and per scenario a "node" network namespace
// where the agent process runs. The node reaches the apiserver over a veth to the root namespace,
// and has its default routes (v4 and v6) into a "gateway" namespace that forwards nothing, so a
// route lookup for 8.8.8.8 resolves while no packet can leave this machine.
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import type { Node, NodeAddress, NodeSystemInfo } from "kubernetes-types/core/v1.js";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { createNetwork, type Host, type Network } from "../netns/netns.ts";
import { type Fault, METADATA_IP, type Personality } from "./metadata-server.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";

const AGENT = path.resolve(import.meta.dirname, "../../src/bin/local-ccm.ts");
const METADATA_SERVER = path.resolve(import.meta.dirname, "metadata-server.ts");
const RBAC = path.resolve(import.meta.dirname, "../../deploy/rbac.yaml");
export const UNINITIALIZED = { key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" };

export interface World {
  plane: ControlPlane;
  net: Network;
  nodes: Resource<Node>;
  /** A node namespace for scenario `slot` (0–27), with the agent's kubeconfig for it. */
  nodeHost(slot: number, options?: { airGapped?: boolean; lan?: boolean }): Promise<NodeHost>;
  /** agentPodKubeconfig() for the agent in `node`'s namespace. */
  podBoundKubeconfig(node: NodeHost, nodeName: string): Promise<string>;
  stop(): Promise<void>;
}

export interface NodeHost {
  host: Host;
  /** The node's address towards the gateway (what 8.8.8.8 resolves to), v4 and v6. */
  external: { v4: string; v6: string };
  /** The node's address on the internal LAN link, when asked for. */
  lan: { v4: string; gateway: string } | undefined;
  /** The apiserver's URL as this node reaches it (over its root link). */
  server: string;
  /** The node's address on its root link: where a test reaches what the node serves (the agent's /metrics). */
  reachableAt: string;
  kubeconfig: string;
}

// Slots are shared by every test file that uses this harness (they run concurrently): agent.test.ts
// uses 0–7, least-privilege.test.ts 9, metadata.test.ts 10–27. Benchmarks and the demo run alone.
const SLOTS = 28;
const rootIP = (slot: number) => `198.18.${200 + slot}.1`;

export async function startWorld(): Promise<World> {
  const net = await createNetwork();
  // The apiserver's certificate must name every root-side address a node namespace uses.
  const plane = await startControlPlane({ extraIPs: Array.from({ length: SLOTS }, (_, slot) => rootIP(slot)), audit: true }).catch(async (err) => {
    await net.remove();
    throw err;
  });
  await plane.kubectl(["apply", "-f", RBAC]);
  const nodes = new Resource<Node>(plane.admin, NODE_RESOURCE);
  return {
    plane,
    net,
    nodes,
    async nodeHost(slot, options = {}) {
      const host = await net.host();
      const reachableAt = `198.18.${200 + slot}.2`;
      await net.link("root", host, { addressesA: [`${rootIP(slot)}/24`], addressesB: [`${reachableAt}/24`] });
      const gateway = await net.host();
      const external = { v4: `198.18.${10 + slot}.10`, v6: `fd00:198:18:${10 + slot}::10` };
      await net.link(host, gateway, {
        addressesA: [`${external.v4}/24`, `${external.v6}/64`],
        addressesB: [`198.18.${10 + slot}.1/24`, `fd00:198:18:${10 + slot}::1/64`],
      });
      if (!options.airGapped) {
        await host.ip("route", "add", "default", "via", `198.18.${10 + slot}.1`);
        await host.ip("-6", "route", "add", "default", "via", `fd00:198:18:${10 + slot}::1`);
      }
      let lan: NodeHost["lan"];
      if (options.lan) {
        const lanHost = await net.host();
        lan = { v4: `198.18.${50 + slot}.10`, gateway: `198.18.${50 + slot}.1` };
        await net.link(host, lanHost, { addressesA: [`${lan.v4}/24`], addressesB: [`${lan.gateway}/24`] });
      }
      const server = plane.serverAt(rootIP(slot));
      const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "local-ccm", server });
      return { host, external, lan, server, reachableAt, kubeconfig };
    },
    podBoundKubeconfig: (node, nodeName) => agentPodKubeconfig(plane, nodeName, node.server),
    async stop() {
      await plane.stop();
      await net.remove();
    },
  };
}

export interface Registration {
  /**
   * The node namespace kubelet runs in: it gets the kubelet IP, as a real node has its --node-ip (the agent
   * writes only a Node one of whose IPs is local). Absent: the Node is another machine's.
   */
  on?: NodeHost;
  /** kubelet --node-labels. */
  labels?: Record<string, string>;
  /** kubelet --provider-id. */
  providerID?: string;
  nodeInfo?: Partial<NodeSystemInfo>;
}

/**
 * The agent's credentials as the DaemonSet's Pod on `nodeName` gets them: a token bound to a Pod on
 * that Node (registered first), whose node-name the node-scope admission policy checks.
 */
export async function agentPodKubeconfig(plane: ControlPlane, nodeName: string, server?: string): Promise<string> {
  const pod = await plane.admin.request<{ metadata: { name: string; uid: string } }>({
    method: "POST",
    path: "/api/v1/namespaces/kube-system/pods",
    body: {
      metadata: { generateName: "local-ccm-" },
      spec: {
        nodeName,
        serviceAccountName: "local-ccm",
        containers: [{ name: "local-ccm", image: "ghcr.io/local-ccm/local-ccm:test" }],
      },
    },
  });
  const boundPod = { name: pod.metadata.name, uid: pod.metadata.uid };
  return plane.serviceAccountKubeconfig({ namespace: "kube-system", name: "local-ccm", server, boundPod });
}

/** Registers a Node the way kubelet --cloud-provider=external does, and reports it Ready. */
export async function registerNode(
  nodes: Resource<Node>,
  name: string,
  kubeletIP: string,
  registration: Registration = {},
): Promise<Node> {
  if (registration.on) await assignAddress(registration.on, kubeletIP);
  const node = await nodes.create({
    metadata: {
      name,
      annotations: { "alpha.kubernetes.io/provided-node-ip": kubeletIP },
      ...(registration.labels ? { labels: registration.labels } : {}),
    },
    spec: { taints: [UNINITIALIZED], ...(registration.providerID ? { providerID: registration.providerID } : {}) },
  });
  const addresses: NodeAddress[] = [
    { type: "InternalIP", address: kubeletIP },
    { type: "Hostname", address: name },
  ];
  const now = new Date().toISOString();
  const ready = { type: "Ready", status: "True", reason: "KubeletReady", lastHeartbeatTime: now, lastTransitionTime: now };
  const nodeInfo = registration.nodeInfo && { ...KUBELET_NODE_INFO, ...registration.nodeInfo };
  // A strategic merge patch, as kubelet writes its status: an agent that saw the Node appear may have written
  // it in between (an update would conflict), and its addresses of other types stay.
  const status = { addresses, conditions: [ready], ...(nodeInfo ? { nodeInfo } : {}) };
  return nodes.patch(node.metadata?.name ?? name, "strategic", { status }, { subresource: "status" });
}

/** Gives the node's namespace `ip` (on its loopback, where it changes no route), unless it has it already. */
async function assignAddress(node: NodeHost, ip: string): Promise<void> {
  const family = ip.includes(":") ? "-6" : "-4";
  const listed = await node.host.ip(family, "-o", "address", "show");
  if (listed.split("\n").some((line) => line.includes(` ${ip}/`))) return;
  await node.host.ip("address", "add", `${ip}/${family === "-6" ? 128 : 32}`, "dev", "lo");
}

const KUBELET_NODE_INFO: NodeSystemInfo = {
  machineID: "",
  systemUUID: "",
  bootID: "",
  kernelVersion: "6.1.0",
  osImage: "Debian GNU/Linux 12 (bookworm)",
  containerRuntimeVersion: "containerd://1.6.20",
  kubeletVersion: "v1.36.3",
  kubeProxyVersion: "",
  operatingSystem: "linux",
  architecture: "amd64",
};

export interface MetadataServer {
  /** The requests received so far, as "<method> <path> <status or fault>". */
  requests(): string[];
  /** When each of requests() arrived, in ms since the server started. */
  arrivals(): number[];
  /** Ends the fault the server was started with: from now on it answers. */
  recover(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Instance metadata services (metadata-server.ts) inside the node's namespace at 169.254.169.254,
 * an address of the namespace's own loopback: nothing about it is routed anywhere. With a fault,
 * they fail every request until recover().
 */
export async function startMetadataServer(
  node: NodeHost,
  personalities: Personality[],
  fault?: Fault,
): Promise<MetadataServer> {
  const addresses = await node.host.ip("-o", "address", "show", "dev", "lo");
  if (!addresses.includes(`${METADATA_IP}/32`)) await node.host.ip("address", "add", `${METADATA_IP}/32`, "dev", "lo");
  const serverArgs = [METADATA_SERVER, personalities.join(","), ...(fault ? [fault] : [])];
  const [command, argv] = node.host.wrap(process.execPath, serverArgs);
  const child = spawn(command, argv, { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let output = "";
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk;
      if (output.startsWith("ready\n")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`metadata server exited with ${code}`)));
  });
  // "<ms> <method> <path> <outcome>" after "ready", without the "recovered" mark.
  const lines = () => output.split("\n").slice(1, -1).filter((line) => line !== "recovered");
  return {
    requests: () => lines().map((line) => line.slice(line.indexOf(" ") + 1)),
    arrivals: () => lines().map((line) => Number(line.slice(0, line.indexOf(" ")))),
    recover: () =>
      new Promise<void>((resolve, reject) => {
        const recovered = () => {
          if (!output.includes("\nrecovered\n")) return;
          child.stdout?.off("data", recovered);
          resolve();
        };
        child.stdout?.on("data", recovered);
        exited.then(() => reject(new Error("metadata server exited before it recovered")), reject);
        child.kill("SIGUSR1");
      }),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

/** The HTTP status the node's metadata address answers `path` with (0: no answer), asked from the node. */
export async function metadataStatus(node: NodeHost, method: string, path: string, headers: Record<string, string> = {}): Promise<number> {
  const headerArgs = Object.entries(headers).flatMap(([name, value]) => ["-H", `${name}: ${value}`]);
  const args = ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "2", "-X", method, ...headerArgs, `http://${METADATA_IP}${path}`];
  const out = await node.host.exec("curl", args).catch(() => "0");
  return Number(out.trim());
}

export interface AgentProcess {
  child: ChildProcess;
  /** Everything the agent logged so far. */
  output(): string;
  exited: Promise<number | null>;
  stop(): Promise<number | null>;
}

/** What the DaemonSet runs as: uid/gid 65532, no supplementary groups, no capabilities at all. */
const UNPRIVILEGED = ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"];

export interface AgentOptions {
  /** A bundle to run instead of the source (benchmarks measure what ships). */
  entry?: string;
  /** The runtime's own flags, e.g. those the DaemonSet passes. */
  nodeArgs?: string[];
  /** The JavaScript runtime's executable (default: this process's Node; benchmarks compare Bun). */
  runtime?: string;
  /** Run as the DaemonSet does (the kubeconfig must then be readable by uid 65532). */
  unprivileged?: boolean;
  /** Instead of the node's own (e.g. World.podBoundKubeconfig). */
  kubeconfig?: string;
  /** A cgroup v1 folder (e.g. /sys/fs/cgroup/memory/x) to start in, before the runtime maps a page. */
  cgroup?: string;
  /** Added to this process's environment (e.g. the image's LD_PRELOAD: test/deploy/shipped.ts). */
  env?: Record<string, string>;
}

/** Runs the agent in the node's namespace. */
export function startAgent(node: NodeHost, args: string[], options: AgentOptions = {}): AgentProcess {
  const { entry = AGENT, nodeArgs = [], unprivileged = false, kubeconfig = node.kubeconfig } = options;
  const agentArgv = [options.runtime ?? process.execPath, ...nodeArgs, entry, `--kubeconfig=${kubeconfig}`, "--health-bind-address=", "--metrics-bind-address=", ...args];
  const [program, ...rest] = unprivileged ? [...UNPRIVILEGED, ...agentArgv] : agentArgv;
  const wrapped = node.host.wrap(program as string, rest);
  // Joined from outside: `ip netns exec` mounts a /sys of its own, without the cgroup hierarchies.
  const [command, argv] = options.cgroup
    ? ["sh", ["-c", `echo $$ > ${options.cgroup}/cgroup.procs && exec "$@"`, "sh", wrapped[0], ...wrapped[1]]]
    : wrapped;
  const child = spawn(command, argv, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...options.env } });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk;
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    output: () => output,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      return exited;
    },
  };
}

export const addressesOf = (node: Node) => (node.status?.addresses ?? []).map((a) => `${a.type}=${a.address}`);

/** What the agent's health server at `address` (host:port) answers on /readyz. */
export async function readyz(address: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${address}/readyz`, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.text()).trim() };
}
