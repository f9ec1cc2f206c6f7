// A real Kubernetes cluster on this machine, for tests, benchmarks, the demo and people: the control
// plane (etcd, kube-apiserver with NodeRestriction, kube-controller-manager, kube-scheduler) plus N nodes,
// each a network namespace with its own containerd, a real kubelet (--cloud-provider=external, so every
// Node registers with the uninitialized taint, as on a cluster local-ccm runs on) and a real kube-proxy
// (kube-proxy.ts; iptables mode, or nftables with `proxyMode`), and a client host outside the nodes. The first
// `controlPlaneNodes` nodes (default 1: node-0) are control-plane nodes as kubeadm makes them: labelled
// node-role.kubernetes.io/control-plane and node.kubernetes.io/exclude-from-external-load-balancers, tainted
// node-role.kubernetes.io/control-plane:NoSchedule. The control-plane processes themselves run on the host.
//
//   const cluster = await startCluster({ nodes: 2 });       // Nodes Ready, images imported
//   await cluster.kubectl(["get", "nodes", "-o", "wide"]);   // also cluster.helm([...]), cluster.admin
//   const node = cluster.node("node-0");                     // { name, ip, netns, podCIDR, exec(), ctr() }
//   await node.exec("ip", ["route"]);                        // a command inside the node's namespace
//   await cluster.client.exec("kubectl", ["get", "nodes"]);  // from the client host, KUBECONFIG set
//   await cluster.killNode("node-1");                         // power loss: node processes, pods, link
//   await cluster.stop();                                     // removes everything
//
// Every node carries the pause image (built from upstream's pause.c), upstream's e2e test image
// registry.k8s.io/e2e-test-images/agnhost (agnhost.ts) and, unless `projectImage: false`,
// the project image under the reference the chart and deploy/ use (image.ts), so
// `helm install charts/local-ccm` and `kubectl apply -f deploy/` run unchanged (imagePullPolicy
// IfNotPresent or Never: no registry is needed). A node pulls only from a registry it was told to trust
// (trustRegistry: registry.ts's, in the release path's test).
// With `dns: true`, CoreDNS answers cluster.local at the service network's .10 (coredns.ts), as kubeadm sets it up.
//
// Network (cluster slot k, 0–3, so four clusters can run side by side; see clusterLayout()):
//   root namespace: bridge lccm<k>br with 198.19.(128+k).1/24 (the nodes' internal network, where the
//     apiserver listens on 443: the `kubernetes` Service's endpoint; its cluster IP 198.19.(144+k).1 is
//     kube-proxy's on the nodes) and 198.19.(136+k).1/24 (their "public" network and default gateway); a
//     route per pod CIDR via its node.
//   node i: namespace lccm-c<k>-<name>, eth0 = 198.19.(128+k).(10+i)/24 (kubelet's --node-ip, the
//     InternalIP) and 198.19.(136+k).(10+i)/24 (its public address), default route via 198.19.(136+k).1,
//     so route-source detection towards 8.8.8.8 finds the public address, as on a server with a private
//     and a public network; CNI bridge cni0 with pod CIDR 198.19.(160+8k+i).0/24. The node namespace
//     forwards between its pods and eth0, and routes each other node's pod CIDR via that node's InternalIP, so
//     pods on different nodes reach each other unchanged (no overlay, no NAT) and Services reach any endpoint.
//   client host: namespace lccm-c<k>-client, eth0 = 198.19.(136+k).2/24 on the public network, default route
//     via 198.19.(136+k).1 like the nodes: it reaches the nodes' public addresses as a user outside the
//     cluster would, and the apiserver (a root-namespace address), so the admin kubeconfig works there.
// Packets stay on this machine by design, not by the machine's sysctls: the root namespace never
// forwards for the cluster. A policy rule sends every packet that arrives from the bridge and is not
// addressed to the root namespace itself (the local table answers first) to a table whose only route is
// a blackhole, whatever net.ipv4.ip_forward says; the root namespace masquerades nothing. Node↔node and
// client↔node traffic crosses the bridge at layer 2; kube-proxy's rules live in the node namespaces only.
//
// Cleanup: everything a cluster makes carries its slot in its name (links, namespaces, cgroups, the
// rule's table) or lives under its folder (state, mounts, logs). A record in /run/local-ccm-clusters/
// names the slot's folder and owner; stop() and `down` remove all of it (processes by folder and
// cgroup, mounts, namespaces, cgroups in every hierarchy, rule, bridge, folder), and startCluster()
// first removes what clusters of dead owners left (a killed test). Processes die with the process that
// started them (pdeathsig); the CLI's `up` detaches instead and `down` ends them.
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { copyFile, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { sleep } from "../src/time/backoff.ts";
import type { KubeClient } from "../src/kube/client.ts";
import { buildImage } from "./image.ts";
import { ensureAgnhostImage } from "./agnhost.ts";
import { ensureBinaries } from "./build.ts";
import { onExit } from "./cleanup.ts";
import { mountPointsUnder, startContainerd } from "./containerd.ts";
import { CLUSTER_DOMAIN, clusterDNSIP, coreDNSObjects, ensureCoreDNSImage } from "./coredns.ts";
import { clientCertificateUser, type ControlPlane, kubeconfigJson, startControlPlane } from "./controlplane.ts";
import { alive, run, type RunOptions } from "./exec.ts";
import { KUBE_PROXY_HEALTH_PORT, prepareKubeProxy, type ProxyMode } from "./kube-proxy.ts";
import { ensurePauseImage, PAUSE_IMAGE } from "./pause.ts";
import { issueClientCertificate } from "./pki.ts";
import { CNI_BIN_DIR, ensureRuntime } from "./runtime.ts";
import { logTail, running, type Service, startService, stopService, waitUntil } from "./service.ts";

export interface NodeOptions {
  /** Default node-<index>. */
  name?: string;
  /** kubelet asks for its serving certificate with a CSR (kubernetes.io/kubelet-serving) instead of
   * signing its own; until someone approves it, `kubectl logs` to this node fails. */
  serverTLSBootstrap?: boolean;
}

export interface ClusterOptions {
  /** How many nodes (default 2), or one entry per node. At most MAX_NODES. */
  nodes?: number | NodeOptions[];
  /** How many of them, from the first, are control-plane nodes (default 1; 0 for none). */
  controlPlaneNodes?: number;
  /** State folder (kubeconfig, logs, node folders); a fresh temp folder by default. */
  dir?: string;
  /** Leave everything running when this process exits (the CLI's `up`); `down` removes it. */
  detached?: boolean;
  /** Import the project image (image.ts) on every node; default true. */
  projectImage?: boolean;
  /** kube-controller-manager's --node-monitor-grace-period: how long after its kubelet stops posting
   * status a Node becomes NotReady. 20s here (kcm's default is 50s) so power-loss tests are quick. */
  nodeMonitorGracePeriodSeconds?: number;
  /** The apiserver writes a Metadata-level audit log (controlPlane.auditLogPath): who made each request,
   * with a pod-bound token's pod and node. */
  audit?: boolean;
  /** The apiserver verifies kubelets' serving certificates against the cluster CA (controlplane.ts,
   * verifyServingCertificates): `kubectl logs` then works only on serverTLSBootstrap nodes whose
   * certificate was approved; on the others, whose kubelets sign their own certificates, it fails verification. */
  verifyKubeletServingCertificates?: boolean;
  /** kube-proxy's mode on every node: "iptables" (default, as in kubeadm) or "nftables". */
  proxyMode?: ProxyMode;
  /** Cluster DNS (coredns.ts): CoreDNS at the service network's .10, in every pod's resolv.conf. It runs once a
   * node is initialised (the uninitialized taint keeps it off until then, as on a real cluster). */
  dns?: boolean;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

export interface ClusterNode {
  name: string;
  /** Labelled and tainted as kubeadm does a control-plane node (no workload runs there unless it tolerates it). */
  controlPlane: boolean;
  /** Its InternalIP (kubelet's --node-ip), on eth0 in its namespace. */
  ip: string;
  /** Its public address, on eth0 too: the source of its default route (what the agent makes its ExternalIP). */
  publicIP: string;
  /** Path of its network namespace, for `nsenter --net=<netns>`. */
  netns: string;
  podCIDR: string;
  /** The kubelet's kubeconfig: its client certificate, system:node:<name> in system:nodes. */
  kubeletKubeconfig: string;
  /** Runs a command inside the node's network namespace (nsenter --net, so /sys stays as it is). */
  exec(command: string, args: string[], options?: RunOptions): Promise<string>;
  /** `ctr --address <its containerd> --namespace k8s.io args…`. */
  ctr(args: string[]): Promise<string>;
  /** Lets its containerd pull from the registry at `host` (host:port) over TLS whose certificates `caCert` (a PEM
   * file) signs, as an operator sets up a private registry: certs.d/<host>/hosts.toml. */
  trustRegistry(host: string, caCert: string): Promise<void>;
  pids(): { kubelet?: number; containerd?: number; kubeProxy?: number };
}

/** A host outside the nodes on their public network, as a user of the cluster's Services would be. */
export interface ClusterClient {
  /** Its address on the nodes' public network. */
  ip: string;
  /** Path of its network namespace. */
  netns: string;
  /** Runs a command there with KUBECONFIG set to the admin kubeconfig and kubectl on the PATH. */
  exec(command: string, args: string[], options?: RunOptions): Promise<string>;
}

export interface Cluster {
  /** Which of the MAX_SLOTS address ranges and name prefixes it has (clusterLayout()). */
  slot: number;
  dir: string;
  /** Admin kubeconfig (system:masters). */
  kubeconfigPath: string;
  /** The apiserver's URL, the same from the host, the nodes and the pods. */
  server: string;
  controlPlane: ControlPlane;
  admin: KubeClient;
  nodes: ClusterNode[];
  client: ClusterClient;
  proxyMode: ProxyMode;
  /** The project image's reference as imported on every node (undefined with projectImage: false). */
  projectImage: string | undefined;
  kubectl(args: string[], input?: string): Promise<string>;
  helm(args: string[]): Promise<string>;
  node(name: string): ClusterNode;
  /** Power loss: kubelet, containerd, shims and pods killed, the node's link down. */
  killNode(name: string): Promise<void>;
  /** Stops the node's kubelet (SIGTERM, as systemd does) and starts it again with the same flags and
   * folders; containerd and the pods keep running. */
  restartKubelet(name: string): Promise<void>;
  stop(): Promise<void>;
}

export const MAX_SLOTS = 4;
export const MAX_NODES = 8;
const REGISTRY = "/run/local-ccm-clusters";
const NODE_READY_TIMEOUT_MS = 120_000;
/** kubeadm's marks of a control-plane node (its mark-control-plane phase). */
export const CONTROL_PLANE_LABELS = {
  "node-role.kubernetes.io/control-plane": "",
  "node.kubernetes.io/exclude-from-external-load-balancers": "",
};
export const CONTROL_PLANE_TAINT = { key: "node-role.kubernetes.io/control-plane", effect: "NoSchedule" };

/** Names and addresses of cluster slot `slot`: pure, so leftovers are found from the slot alone. */
export function clusterLayout(slot: number) {
  return {
    slot,
    bridge: `lccm${slot}br`,
    gateway: `198.19.${128 + slot}.1`,
    /** The nodes' default gateway, on their public network. */
    publicGateway: `198.19.${136 + slot}.1`,
    serviceNetwork: `198.19.${144 + slot}.0/24`,
    /** Every node's pod CIDR (nodeLayout()) is in it. */
    podNetwork: `198.19.${160 + 8 * slot}.0/21`,
    /** The client host: its namespace (under the slot's prefix), root-side veth and public address. */
    clientNetns: `lccm-c${slot}-client`,
    clientVeth: `lccm${slot}vc`,
    clientIP: `198.19.${136 + slot}.2`,
    /** Routing table of the rule that blackholes what arrives from the bridge for elsewhere. */
    table: 19800 + slot,
    /** Prefix of its network namespaces and of its cgroups in every hierarchy. */
    prefix: `lccm-c${slot}-`,
  };
}

export function nodeLayout(slot: number, index: number, name: string) {
  const { prefix } = clusterLayout(slot);
  return {
    name,
    index,
    netnsName: `${prefix}${name}`,
    ip: `198.19.${128 + slot}.${10 + index}`,
    publicIP: `198.19.${136 + slot}.${10 + index}`,
    podCIDR: `198.19.${160 + 8 * slot + index}.0/24`,
    podGateway: `198.19.${160 + 8 * slot + index}.1`,
    rootVeth: `lccm${slot}v${index}`,
    cgroup: `${prefix}${name}`,
  };
}

type NodeLayout = ReturnType<typeof nodeLayout>;

/** What /run/local-ccm-clusters/<slot>.json holds: enough to remove the cluster without its process. */
export interface ClusterRecord {
  slot: number;
  dir: string;
  /** The process the cluster dies with; null when detached (only `down` removes it). */
  owner: number | null;
  nodes: NodeLayout[];
}

const recordPath = (slot: number) => path.join(REGISTRY, `${slot}.json`);

export function readRecord(slot: number): ClusterRecord | undefined {
  try {
    return JSON.parse(readFileSync(recordPath(slot), "utf8")) as ClusterRecord;
  } catch {
    return undefined;
  }
}

/** Claims the first free slot (exclusive create, so concurrent starts never share one). */
function claimSlot(record: Omit<ClusterRecord, "slot">): ClusterRecord {
  mkdirSync(REGISTRY, { recursive: true });
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    try {
      writeFileSync(recordPath(slot), JSON.stringify({ ...record, slot }), { flag: "wx" });
      return { ...record, slot };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
  throw new Error(`all ${MAX_SLOTS} cluster slots are in use (npm run cluster -- down removes a detached one)`);
}

function writeRecord(record: ClusterRecord): void {
  writeFileSync(recordPath(record.slot), JSON.stringify(record));
}

/** Removes the clusters whose owner process is gone (killed tests); detached ones stay. */
export function removeLeftovers(): number[] {
  const removed: number[] = [];
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    const record = readRecord(slot);
    if (record && record.owner !== null && !alive(record.owner)) {
      removeCluster(record);
      removed.push(slot);
    }
  }
  return removed;
}

// ---- teardown (synchronous: it also runs from the exit hook) ----

const CGROUP_ROOT = "/sys/fs/cgroup";
const sh = (command: string, args: string[]) => execFileSync(command, args, { stdio: "pipe", encoding: "utf8" });
const quietly = (command: string, args: string[]) => {
  try {
    sh(command, args);
  } catch {
    // already gone
  }
};
const pause = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Every v1 hierarchy and the unified one, as mounted on this machine kind. */
function cgroupHierarchies(): string[] {
  return readdirSync(CGROUP_ROOT)
    .map((name) => path.join(CGROUP_ROOT, name))
    .filter((dir) => existsSync(path.join(dir, "cgroup.procs")));
}

/** Processes started from or working in `dir` (kubelet, containerd and its shims, the control plane). */
function processesUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      if (cmdline.includes(`${dir}/`) || cwd === dir || cwd.startsWith(`${dir}/`)) pids.push(pid);
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** The cgroup folders under `top`, deepest first. */
function cgroupTree(top: string): string[] {
  const below = readdirSync(top, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .flatMap((entry) => cgroupTree(path.join(top, entry.name)));
  return [...below, top];
}

/** Processes in the cgroups of `cgroup` (a node's root) in any hierarchy: pods' containers. */
function processesInCgroups(cgroup: string): number[] {
  const pids = new Set<number>();
  for (const hierarchy of cgroupHierarchies()) {
    const top = path.join(hierarchy, cgroup);
    if (!existsSync(top)) continue;
    for (const folder of cgroupTree(top)) {
      for (const line of readFileSync(path.join(folder, "cgroup.procs"), "utf8").split("\n"))
        if (line) pids.add(Number(line));
    }
  }
  return [...pids];
}

function killAll(find: () => number[]): void {
  for (let round = 0; round < 50; round++) {
    const pids = find();
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // exited meanwhile
      }
    }
    pause(100);
  }
  throw new Error(`processes survive SIGKILL: ${find().join(", ")}`);
}

function removeCgroups(cgroup: string): void {
  for (const hierarchy of cgroupHierarchies()) {
    const top = path.join(hierarchy, cgroup);
    if (!existsSync(top)) continue;
    for (const folder of cgroupTree(top)) {
      // A cgroup whose last process just died may still be busy for a moment.
      for (let attempt = 0; ; attempt++) {
        try {
          rmdirSync(folder);
          break;
        } catch (err) {
          if (attempt >= 50) throw err;
          pause(100);
        }
      }
    }
  }
}

/** A node's power loss: its processes (by folder and by cgroup) killed and its link down. */
function powerOff(dir: string, node: NodeLayout): void {
  const nodeDir = path.join(dir, "nodes", node.name);
  killAll(() => [...processesUnder(nodeDir), ...processesInCgroups(node.cgroup)]);
  quietly("ip", ["link", "set", node.rootVeth, "down"]);
}

/** Removes everything of a cluster: processes, cgroups, mounts, namespaces, rule, bridge, folder, record. */
export function removeCluster(record: ClusterRecord): void {
  const layout = clusterLayout(record.slot);
  killAll(() => processesUnder(record.dir));
  // Cgroups by prefix, not by the record's node list: a start killed before it wrote a node still made them.
  const cgroups = new Set(
    cgroupHierarchies().flatMap((h) => readdirSync(h).filter((name) => name.startsWith(layout.prefix))),
  );
  for (const cgroup of cgroups) killAll(() => processesInCgroups(cgroup));
  for (const cgroup of cgroups) removeCgroups(cgroup);
  for (const point of mountPointsUnder(record.dir)) quietly("umount", ["--lazy", point]);
  for (const name of sh("ip", ["netns", "list"]).split("\n").map((line) => line.split(" ")[0] ?? ""))
    if (name.startsWith(layout.prefix)) quietly("ip", ["netns", "delete", name]);
  for (let i = 0; i < MAX_NODES; i++) quietly("ip", ["link", "delete", `lccm${record.slot}v${i}`]);
  quietly("ip", ["link", "delete", layout.clientVeth]);
  while (sh("ip", ["rule", "list"]).includes(`lookup ${layout.table}`))
    sh("ip", ["rule", "del", "iif", layout.bridge, "lookup", String(layout.table)]);
  quietly("ip", ["route", "flush", "table", String(layout.table)]);
  quietly("ip", ["link", "delete", layout.bridge]);
  rmSync(record.dir, { recursive: true, force: true });
  rmSync(recordPath(record.slot), { force: true });
}


// ---- start ----

type NodeSpec = Required<NodeOptions> & { controlPlane: boolean };

function nodeSpecs(nodes: ClusterOptions["nodes"], controlPlaneNodes = 1): NodeSpec[] {
  const list: NodeOptions[] =
    typeof nodes === "number" || nodes === undefined ? Array.from({ length: nodes ?? 2 }, () => ({})) : nodes;
  if (list.length < 1 || list.length > MAX_NODES) throw new Error(`nodes: 1 to ${MAX_NODES}, not ${list.length}`);
  if (!Number.isInteger(controlPlaneNodes) || controlPlaneNodes < 0 || controlPlaneNodes > list.length)
    throw new Error(`controlPlaneNodes: 0 to ${list.length} (the nodes), not ${controlPlaneNodes}`);
  return list.map((node, index) => ({
    name: node.name ?? `node-${index}`,
    serverTLSBootstrap: false,
    ...node,
    controlPlane: index < controlPlaneNodes,
  }));
}

async function createBridge(slot: number): Promise<void> {
  const layout = clusterLayout(slot);
  await run("ip", ["link", "add", layout.bridge, "type", "bridge"]);
  await run("ip", ["address", "add", `${layout.gateway}/24`, "dev", layout.bridge]);
  await run("ip", ["address", "add", `${layout.publicGateway}/24`, "dev", layout.bridge]);
  await run("ip", ["link", "set", layout.bridge, "up"]);
  await run("ip", ["route", "add", "blackhole", "default", "table", String(layout.table)]);
  await run("ip", ["rule", "add", "iif", layout.bridge, "lookup", String(layout.table)]);
}

async function createNodeNetwork(slot: number, node: NodeLayout, all: NodeLayout[]): Promise<string> {
  const layout = clusterLayout(slot);
  await run("ip", ["netns", "add", node.netnsName]);
  const netns = `/run/netns/${node.netnsName}`;
  const inNode = (...args: string[]) => run("ip", ["-n", node.netnsName, ...args]);
  const peer = `lccm${slot}p${node.index}`;
  await run("ip", ["link", "add", node.rootVeth, "type", "veth", "peer", "name", peer]);
  await run("ip", ["link", "set", peer, "netns", node.netnsName]);
  await run("ip", ["link", "set", node.rootVeth, "master", layout.bridge, "up"]);
  await inNode("link", "set", peer, "name", "eth0");
  await inNode("address", "add", `${node.ip}/24`, "dev", "eth0");
  await inNode("address", "add", `${node.publicIP}/24`, "dev", "eth0");
  await inNode("link", "set", "eth0", "up");
  await inNode("link", "set", "lo", "up");
  await inNode("route", "add", "default", "via", layout.publicGateway);
  // Between the node's pods and eth0; the root namespace still forwards nothing.
  await run("nsenter", [`--net=${netns}`, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
  for (const other of all.filter((n) => n.name !== node.name))
    await inNode("route", "add", other.podCIDR, "via", other.ip, "dev", "eth0");
  await run("ip", ["route", "add", node.podCIDR, "via", node.ip, "dev", layout.bridge]);
  return netns;
}

/** The client host's namespace on the public network (see the header). */
async function createClientHost(slot: number): Promise<string> {
  const layout = clusterLayout(slot);
  const inClient = (...args: string[]) => run("ip", ["-n", layout.clientNetns, ...args]);
  const peer = `lccm${slot}pc`;
  await run("ip", ["netns", "add", layout.clientNetns]);
  await run("ip", ["link", "add", layout.clientVeth, "type", "veth", "peer", "name", peer]);
  await run("ip", ["link", "set", peer, "netns", layout.clientNetns]);
  await run("ip", ["link", "set", layout.clientVeth, "master", layout.bridge, "up"]);
  await inClient("link", "set", peer, "name", "eth0");
  await inClient("address", "add", `${layout.clientIP}/24`, "dev", "eth0");
  await inClient("link", "set", "eth0", "up");
  await inClient("link", "set", "lo", "up");
  await inClient("route", "add", "default", "via", layout.publicGateway);
  return `/run/netns/${layout.clientNetns}`;
}

/** How to run a command on the client host of the cluster in slot `slot` kept in `dir` (also the CLI's `client`). */
export function clientCommand(slot: number, dir: string, kubectl: string, command: string, args: string[]) {
  const { clientNetns } = clusterLayout(slot);
  return {
    argv: ["nsenter", `--net=/run/netns/${clientNetns}`, "--", command, ...args],
    env: {
      ...process.env,
      KUBECONFIG: path.join(dir, "kubeconfig"),
      PATH: [path.dirname(kubectl), process.env.PATH].filter(Boolean).join(":"),
    },
  };
}

/** The node's cgroup root in every hierarchy, made before kubelet starts (kubelet requires it). */
function createCgroups(node: NodeLayout): void {
  for (const hierarchy of cgroupHierarchies()) {
    const dir = path.join(hierarchy, node.cgroup);
    mkdirSync(dir, { recursive: true });
    // A v1 cpuset cgroup starts with no CPUs and no memory nodes: nothing could join it.
    for (const file of ["cpuset.cpus", "cpuset.mems"]) {
      const parent = path.join(hierarchy, file);
      if (existsSync(parent)) writeFileSync(path.join(dir, file), readFileSync(parent, "utf8"));
    }
  }
}

const registryConfigDir = (nodeDir: string) => path.join(nodeDir, "certs.d");

/** containerd's hosts.toml for a registry served over TLS from a private CA: pull from it, trusting that CA. */
function registryHostsToml(host: string, caPath: string): string {
  return [
    `server = ${JSON.stringify(`https://${host}`)}`,
    "",
    `[host.${JSON.stringify(`https://${host}`)}]`,
    '  capabilities = ["pull", "resolve"]',
    `  ca = ${JSON.stringify(caPath)}`,
    "",
  ].join("\n");
}

function containerdConfig(nodeDir: string): string {
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return [
    `[${cri}]`,
    `  sandbox_image = ${JSON.stringify(PAUSE_IMAGE)}`,
    // No process here has CAP_SYS_RESOURCE: without this, runc fails every sandbox writing oom_score_adj.
    "  restrict_oom_score_adj = true",
    // Pod namespaces under containerd's state folder instead of the machine's /var/run/netns.
    "  netns_mounts_under_state_dir = true",
    `[${cri}.containerd]`,
    '  snapshotter = "overlayfs"',
    '  default_runtime_name = "runc"',
    `[${cri}.containerd.runtimes.runc]`,
    '  runtime_type = "io.containerd.runc.v2"',
    `[${cri}.containerd.runtimes.runc.options]`,
    "  SystemdCgroup = false",
    `[${cri}.cni]`,
    `  bin_dir = ${JSON.stringify(CNI_BIN_DIR)}`,
    `  conf_dir = ${JSON.stringify(path.join(nodeDir, "cni"))}`,
    // Per-registry settings, read at each pull (ClusterNode.trustRegistry), instead of /etc/containerd/certs.d.
    `[${cri}.registry]`,
    `  config_path = ${JSON.stringify(registryConfigDir(nodeDir))}`,
  ].join("\n");
}

function cniConfig(nodeDir: string, node: NodeLayout): string {
  return JSON.stringify(
    {
      cniVersion: "0.4.0",
      name: "pods",
      plugins: [
        {
          type: "bridge",
          bridge: "cni0",
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: "host-local",
            ranges: [[{ subnet: node.podCIDR, gateway: node.podGateway }]],
            routes: [{ dst: "0.0.0.0/0" }],
            dataDir: path.join(nodeDir, "cni-ipam"),
          },
        },
      ],
    },
    null,
    2,
  );
}

/** `dnsIP`: the cluster DNS's address, put in every pod's resolv.conf (ClusterOptions.dns). */
function kubeletConfig(
  nodeDir: string,
  node: NodeLayout,
  caPath: string,
  serverTLSBootstrap: boolean,
  dnsIP: string | undefined,
): string {
  return JSON.stringify(
    {
      apiVersion: "kubelet.config.k8s.io/v1beta1",
      kind: "KubeletConfiguration",
      ...(dnsIP ? { clusterDNS: [dnsIP], clusterDomain: CLUSTER_DOMAIN } : {}),
      // This machine kind mounts cgroup v1, which kubelet 1.36 refuses unless told otherwise.
      failCgroupV1: false,
      cgroupDriver: "cgroupfs",
      cgroupRoot: `/${node.cgroup}`,
      containerRuntimeEndpoint: `unix://${path.join(nodeDir, "containerd", "containerd.sock")}`,
      address: node.ip,
      readOnlyPort: 0,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: caPath } },
      authorization: { mode: "Webhook" },
      serverTLSBootstrap,
      failSwapOn: false,
      podLogsDir: path.join(nodeDir, "pod-logs"),
      volumePluginDir: path.join(nodeDir, "volume-plugins"),
      // Imported images cannot be pulled again: never collect them, never evict for a full disk.
      imageGCHighThresholdPercent: 100,
      evictionHard: { "memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%" },
      maxPods: 30,
    },
    null,
    2,
  );
}

interface RunningNode {
  layout: NodeLayout;
  controlPlane: boolean;
  netns: string;
  containerd?: Service;
  kubelet?: Service;
  kubeProxy?: Service;
  startKubelet: () => Service;
}

/** kubelet's device manager listens here whatever --root-dir says, and removes every socket it finds there
 * at start: kubelets sharing it race (EADDRINUSE). Each kubelet gets its node's own folder in its place. */
const DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins";

/** The cluster's folder as a shared mount of its own, so that what a kubelet mounts under it from its own
 * mount namespace (volumes) reaches containerd in the machine's, whatever this machine's / propagates. */
function shareMounts(dir: string): void {
  sh("mount", ["--bind", dir, dir]);
  sh("mount", ["--make-shared", dir]);
}

async function startNode(
  record: ClusterRecord,
  plane: ControlPlane,
  node: NodeLayout,
  spec: NodeSpec,
  images: string[],
  proxyMode: ProxyMode,
  dnsIP: string | undefined,
  detached: boolean,
): Promise<RunningNode> {
  const nodeDir = path.join(record.dir, "nodes", node.name);
  mkdirSync(path.join(nodeDir, "cni"), { recursive: true });
  const netns = await createNodeNetwork(record.slot, node, record.nodes);
  createCgroups(node);
  await writeFile(path.join(nodeDir, "cni", "10-pods.conflist"), cniConfig(nodeDir, node));
  const containerd = await startContainerd({
    dir: path.join(nodeDir, "containerd"),
    config: containerdConfig(nodeDir),
    netns,
    detached,
  });
  // Imported while kubelet starts (Nodes get Ready without them) and awaited before the node is returned.
  const imported = (async () => {
    for (const image of images) await containerd.ctr(["--namespace", "k8s.io", "images", "import", image]);
  })();
  imported.catch(() => {}); // awaited below; this only keeps an early failure from being unhandled meanwhile

  const cert = await issueClientCertificate(
    plane.certificateAuthority,
    `kubelet-${node.name}`,
    `/O=system:nodes/CN=system:node:${node.name}`,
  );
  const caPem = readFileSync(plane.caPath, "utf8");
  const kubeconfig = path.join(nodeDir, "kubelet.kubeconfig");
  await writeFile(kubeconfig, kubeconfigJson(plane.server, caPem, clientCertificateUser(cert)));
  const config = path.join(nodeDir, "kubelet.json");
  await writeFile(config, kubeletConfig(nodeDir, node, plane.caPath, spec.serverTLSBootstrap, dnsIP));
  mkdirSync(path.join(nodeDir, "device-plugins"));
  mkdirSync(DEVICE_PLUGIN_DIR, { recursive: true }); // what kubelet itself would make; only the mount target
  const startKubelet = () => startService(
    "kubelet",
    plane.binaries.kubelet,
    [
      `--config=${config}`,
      `--kubeconfig=${kubeconfig}`,
      `--root-dir=${path.join(nodeDir, "kubelet")}`,
      `--cert-dir=${path.join(nodeDir, "kubelet-pki")}`,
      "--cloud-provider=external",
      `--node-ip=${node.ip}`,
      `--hostname-override=${node.name}`,
      // Registered tainted, so no ordinary pod lands there before the admin labels it (kubeadm does the same).
      ...(spec.controlPlane ? [`--register-with-taints=${CONTROL_PLANE_TAINT.key}:${CONTROL_PLANE_TAINT.effect}`] : []),
    ],
    { dir: nodeDir, netns, detached, bind: { source: path.join(nodeDir, "device-plugins"), target: DEVICE_PLUGIN_DIR } },
  );
  const kubelet = startKubelet();
  const { podNetwork, gateway, publicGateway } = clusterLayout(record.slot);
  const nodePortNetworks = [gateway, publicGateway].map((address) => address.replace(/\.1$/, ".0/24"));
  const startKubeProxy = await prepareKubeProxy(
    plane,
    node,
    nodeDir,
    { mode: proxyMode, podNetwork, nodePortNetworks },
    { netns, detached },
  );
  const kubeProxy = startKubeProxy();
  await imported;
  return {
    layout: node,
    controlPlane: spec.controlPlane,
    netns,
    containerd: containerd.service,
    kubelet,
    kubeProxy,
    startKubelet,
  };
}

interface NodeStatus {
  metadata: { name: string };
  status?: { conditions?: { type: string; status: string }[] };
}

async function waitForReadyNodes(plane: ControlPlane, nodes: RunningNode[]): Promise<void> {
  const deadline = Date.now() + NODE_READY_TIMEOUT_MS;
  for (;;) {
    for (const node of nodes) {
      for (const service of [node.containerd, node.kubelet, node.kubeProxy]) {
        if (service && !running(service))
          throw new Error(`${node.layout.name}: ${service.name} exited:\n${await logTail(service)}`);
      }
    }
    const list = await plane.admin
      .request<{ items: NodeStatus[] }>({ method: "GET", path: "/api/v1/nodes" })
      .catch(() => ({ items: [] }));
    const ready = new Set(
      list.items
        .filter((n) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"))
        .map((n) => n.metadata.name),
    );
    if (nodes.every((node) => ready.has(node.layout.name))) return;
    if (Date.now() > deadline) {
      const late = nodes.filter((node) => !ready.has(node.layout.name));
      const tails = await Promise.all(
        late.map(async (n) => `${n.layout.name}: ${await logTail(n.kubelet as Service)}`),
      );
      throw new Error(`nodes not Ready after ${NODE_READY_TIMEOUT_MS / 1000}s:\n${tails.join("\n")}`);
    }
    await sleep(250);
  }
}

/** Until every kube-proxy answers /healthz with 200: its first sync of the rules is done. */
async function waitForProxies(nodes: RunningNode[]): Promise<void> {
  await Promise.all(
    nodes.map((node) =>
      waitUntil(node.kubeProxy as Service, "healthy on :10256", async () => {
        const response = await fetch(`http://${node.layout.ip}:${KUBE_PROXY_HEALTH_PORT}/healthz`);
        return response.status === 200;
      }),
    ),
  );
}

/**
 * The node-role label as kubeadm sets it: by the admin once the Node exists, since NodeRestriction lets no
 * kubelet set node-role.kubernetes.io/* labels on itself (a node that could would attract what runs only on
 * control-plane nodes).
 */
async function labelControlPlane(admin: KubeClient, name: string): Promise<void> {
  await admin.request({
    method: "PATCH",
    path: `/api/v1/nodes/${name}`,
    contentType: "application/merge-patch+json",
    body: { metadata: { labels: CONTROL_PLANE_LABELS } },
  });
}

function clusterNode(record: ClusterRecord, running: RunningNode): ClusterNode {
  const { layout, netns } = running;
  const socket = path.join(record.dir, "nodes", layout.name, "containerd", "containerd.sock");
  return {
    name: layout.name,
    controlPlane: running.controlPlane,
    ip: layout.ip,
    publicIP: layout.publicIP,
    netns,
    podCIDR: layout.podCIDR,
    kubeletKubeconfig: path.join(record.dir, "nodes", layout.name, "kubelet.kubeconfig"),
    exec: (command, args, options) => run("nsenter", [`--net=${netns}`, "--", command, ...args], options),
    ctr: (args) => run("ctr", ["--address", socket, "--namespace", "k8s.io", ...args]),
    async trustRegistry(host, caCert) {
      const dir = path.join(registryConfigDir(path.join(record.dir, "nodes", layout.name)), host);
      mkdirSync(dir, { recursive: true });
      await copyFile(caCert, path.join(dir, "ca.crt"));
      await writeFile(path.join(dir, "hosts.toml"), registryHostsToml(host, path.join(dir, "ca.crt")));
    },
    pids: () => ({
      kubelet: running.kubelet?.child.pid,
      containerd: running.containerd?.child.pid,
      kubeProxy: running.kubeProxy?.child.pid,
    }),
  };
}

/** Starts a cluster; see the header. Fails with one line when the runtime is missing and cannot be installed. */
export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const log = options.log ?? (() => {});
  const specs = nodeSpecs(options.nodes, options.controlPlaneNodes);
  await ensureRuntime();
  await ensureBinaries();
  const started = Date.now();
  const removed = removeLeftovers();
  if (removed.length > 0) log(`removed what killed clusters left in slots ${removed.join(", ")}`);
  const images = [await ensurePauseImage(), await ensureAgnhostImage()];
  if (options.dns) images.push(await ensureCoreDNSImage());
  let projectImage: string | undefined;
  if (options.projectImage ?? true) {
    log("building the project image");
    const built = await buildImage();
    images.push(built.tarball);
    projectImage = built.reference;
  }

  const dir = path.resolve(options.dir ?? mkdtempSync(path.join(os.tmpdir(), "local-ccm-cluster-")));
  mkdirSync(dir, { recursive: true });
  const detached = options.detached ?? false;
  const proxyMode = options.proxyMode ?? "iptables";
  const record = claimSlot({ dir, owner: detached ? null : process.pid, nodes: [] });
  const forget = detached ? () => {} : onExit(() => removeCluster(record));
  const layout = clusterLayout(record.slot);
  const dnsIP = options.dns ? clusterDNSIP(layout.serviceNetwork) : undefined;
  try {
    shareMounts(dir);
    await createBridge(record.slot);
    log(`control plane at https://${layout.gateway}`);
    const plane = await startControlPlane({
      dir: path.join(dir, "controlplane"),
      detached,
      audit: options.audit,
      controllerManager: { nodeMonitorGracePeriodSeconds: options.nodeMonitorGracePeriodSeconds ?? 20 },
      scheduler: true,
      kubelets: {
        serviceNetwork: layout.serviceNetwork,
        address: layout.gateway,
        verifyServingCertificates: options.verifyKubeletServingCertificates,
      },
    });
    const kubeconfigPath = path.join(dir, "kubeconfig");
    await copyFile(plane.kubeconfigPath, kubeconfigPath);

    record.nodes = specs.map((spec, index) => nodeLayout(record.slot, index, spec.name));
    writeRecord(record);
    log(`starting ${specs.length} nodes (kube-proxy in ${proxyMode} mode) and the client host`);
    const clientNetns = await createClientHost(record.slot);
    const nodes = await Promise.all(
      record.nodes.map((node, index) =>
        startNode(record, plane, node, specs[index] as NodeSpec, images, proxyMode, dnsIP, detached),
      ),
    );
    await waitForReadyNodes(plane, nodes);
    await waitForProxies(nodes);
    for (const node of nodes.filter((n) => n.controlPlane)) await labelControlPlane(plane.admin, node.layout.name);
    if (dnsIP) {
      const list = { apiVersion: "v1", kind: "List", items: coreDNSObjects(dnsIP, CONTROL_PLANE_TAINT) };
      await run(plane.binaries.kubectl, [`--kubeconfig=${kubeconfigPath}`, "apply", "-f", "-"], {
        input: JSON.stringify(list),
      });
    }
    log(`${nodes.length} nodes Ready after ${((Date.now() - started) / 1000).toFixed(1)}s`);

    const handles = nodes.map((node) => clusterNode(record, node));
    let stopped = false;
    const byName = (name: string) => {
      const found = handles.find((node) => node.name === name);
      if (!found) throw new Error(`no node ${name} (nodes: ${handles.map((n) => n.name).join(", ")})`);
      return found;
    };
    return {
      slot: record.slot,
      dir,
      kubeconfigPath,
      server: plane.server,
      controlPlane: plane,
      admin: plane.admin,
      nodes: handles,
      client: {
        ip: layout.clientIP,
        netns: clientNetns,
        exec: (command, args, options) => {
          const { argv, env } = clientCommand(record.slot, dir, plane.binaries.kubectl, command, args);
          return run(argv[0] as string, argv.slice(1), { ...options, env: { ...env, ...options?.env } });
        },
      },
      proxyMode,
      projectImage,
      kubectl: (args, input) => run(plane.binaries.kubectl, [`--kubeconfig=${kubeconfigPath}`, ...args], { input }),
      helm: (args) => run(plane.binaries.helm, [`--kubeconfig=${kubeconfigPath}`, ...args]),
      node: byName,
      async killNode(name) {
        byName(name);
        powerOff(dir, record.nodes.find((node) => node.name === name) as NodeLayout);
      },
      async restartKubelet(name) {
        byName(name);
        const node = nodes.find((n) => n.layout.name === name) as RunningNode;
        if (node.kubelet) await stopService(node.kubelet);
        node.kubelet = node.startKubelet();
      },
      async stop() {
        // Once only: a second removal could take the slot's record from a cluster started since.
        if (stopped) return;
        stopped = true;
        plane.admin.close();
        removeCluster(record);
        forget();
      },
    };
  } catch (err) {
    removeCluster(record);
    forget();
    throw err;
  }
}

/** `kill-node` for a detached cluster: the same power loss, from its record. */
export function killRecordedNode(record: ClusterRecord, name: string): void {
  const node = record.nodes.find((n) => n.name === name);
  if (!node) throw new Error(`no node ${name} (nodes: ${record.nodes.map((n) => n.name).join(", ")})`);
  powerOff(record.dir, node);
}

/** The record of the cluster kept in `dir`, if one is running there. */
export function recordFor(dir: string): ClusterRecord | undefined {
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    const record = readRecord(slot);
    if (record && path.resolve(record.dir) === path.resolve(dir)) return record;
  }
  return undefined;
}

/**
 * Used by tests to prove nothing is left: what of the cluster that ran in slot `slot` from `dir` still
 * exists on this machine. Once another cluster holds the slot (a parallel test started one), the
 * slot's names are its own: only what lives under `dir` is checked then.
 */
export function leftoversOf(slot: number, dir: string): string[] {
  const found: string[] = [];
  const successor = readRecord(slot);
  if (!successor || path.resolve(successor.dir) === path.resolve(dir)) found.push(...slotLeftovers(slot));
  for (const pid of processesUnder(dir)) found.push(`process ${pid}`);
  for (const point of mountPointsUnder(dir)) found.push(`mount ${point}`);
  if (existsSync(dir) && statSync(dir).isDirectory()) found.push(`folder ${dir}`);
  return found;
}

/** What carries slot `slot` in its name: bridge, namespaces, cgroups, rule, record. */
function slotLeftovers(slot: number): string[] {
  const layout = clusterLayout(slot);
  const found: string[] = [];
  if (existsSync(`/sys/class/net/${layout.bridge}`)) found.push(`bridge ${layout.bridge}`);
  for (const name of sh("ip", ["netns", "list"]).split("\n").map((l) => l.split(" ")[0] ?? ""))
    if (name.startsWith(layout.prefix)) found.push(`netns ${name}`);
  for (const hierarchy of cgroupHierarchies())
    for (const name of readdirSync(hierarchy))
      if (name.startsWith(layout.prefix)) found.push(`cgroup ${hierarchy}/${name}`);
  if (sh("ip", ["rule", "list"]).includes(`lookup ${layout.table}`)) found.push(`rule lookup ${layout.table}`);
  if (existsSync(recordPath(slot))) found.push(`record ${recordPath(slot)}`);
  return found;
}
