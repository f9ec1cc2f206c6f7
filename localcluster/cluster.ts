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
//   with `dualStack`, IPv6 as well (ULAs in fd00:19::/32): node i's eth0 also fd00:19:(136+k)::(10+i)/64, its pods
//     also an address of fd00:19:(160+8k):0:(10+i)::/80 (status.podIPs: both), which the other nodes route via that
//     IPv6 address; the client fd00:19:(136+k)::2/64, with no IPv6 default route until the router gives it one.
//     Services stay IPv4 (the apiserver's service network is).
// Packets stay on this machine by design, not by the machine's sysctls: the root namespace never
// forwards for the cluster. A policy rule sends every packet that arrives from the bridge and is not
// addressed to the root namespace itself (the local table answers first) to a table whose only route is
// a blackhole, whatever net.ipv4.ip_forward says; the root namespace masquerades nothing. It has no IPv6
// address or route for the cluster, and no namespace routes IPv6 through it. Node↔node and client↔node traffic
// crosses the bridge at layer 2; kube-proxy's rules live in the node namespaces only.
//
// Cleanup: everything a cluster makes carries its slot in its name (links, namespaces, cgroups, the
// rule's table) or lives under its folder (state, mounts, logs). A record in /run/local-ccm-clusters/
// names the slot's folder and owner; stop() and `down` remove all of it (processes by folder and
// cgroup, mounts, namespaces, cgroups in every hierarchy, rule, bridge, folder), and startCluster()
// first removes what clusters of dead owners left (a killed test). Processes die with the process that
// started them (pdeathsig); the CLI's `up` detaches instead and `down` ends them.
//
// One file per job: layout.ts (names and addresses), slots.ts (records, removal, leftovers), cgroups.ts (cgroup
// roots; finding and killing processes), node-network.ts (bridge, node namespaces, client host), node-config.ts
// (containerd, CNI and kubelet files), node.ts (starting one node); this file assembles a cluster and waits for it.
import { mkdirSync, mkdtempSync } from "node:fs";
import { copyFile, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { sleep } from "../src/time/backoff.ts";
import type { KubeClient } from "../src/kube/client.ts";
import { buildImage } from "./image.ts";
import { ensureAgnhostImage } from "./agnhost.ts";
import { ensureBinaries } from "./build.ts";
import { onExit } from "./cleanup.ts";
import { clusterDNSIP, coreDNSObjects, ensureCoreDNSImage } from "./coredns.ts";
import { type ControlPlane, startControlPlane } from "./controlplane.ts";
import { run, type RunOptions, sh } from "./exec.ts";
import { KUBE_PROXY_HEALTH_PORT, type ProxyMode } from "./kube-proxy.ts";
import { clusterLayout, MAX_NODES, type NodeLayout, nodeLayout } from "./layout.ts";
import {
  CONTROL_PLANE_LABELS,
  CONTROL_PLANE_TAINT,
  type NodeOptions,
  type NodeSpec,
  type RunningNode,
  startNode,
} from "./node.ts";
import { registryConfigDir, registryHostsToml } from "./node-config.ts";
import { clientCommand, createBridge, createClientHost } from "./node-network.ts";
import { ensurePauseImage } from "./pause.ts";
import { ensureRuntime } from "./runtime.ts";
import { logTail, running, type Service, stopService, waitUntil } from "./service.ts";
import { claimSlot, type ClusterRecord, powerOff, removeCluster, removeLeftovers, writeRecord } from "./slots.ts";

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
  /** IPv6 too (see the header): the nodes' and the client's public network, and every pod an address of its node's
   * IPv6 pod CIDR; the router (router.ts) then carries IPv6 as well. Services stay IPv4. Default false. */
  dualStack?: boolean;
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
  /** Its public IPv6 address on eth0 (dual-stack clusters): the next hop of its IPv6 routes over BGP. */
  publicIP6: string | undefined;
  /** Path of its network namespace, for `nsenter --net=<netns>`. */
  netns: string;
  podCIDR: string;
  /** Its pod CIDRs as IPAM would write spec.podCIDRs: podCIDR, then on a dual-stack cluster its IPv6 one. */
  podCIDRs: string[];
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
  /** Started with dualStack (ClusterOptions): its router (router.ts) then carries IPv6 too. */
  dualStack: boolean;
  /** The project image's reference as imported on every node (undefined with projectImage: false). */
  projectImage: string | undefined;
  kubectl(args: string[], input?: string): Promise<string>;
  helm(args: string[]): Promise<string>;
  node(name: string): ClusterNode;
  /** Power loss: kubelet, containerd, shims and pods killed, the node's link down. */
  killNode(name: string): Promise<void>;
  /**
   * The node's link to the bridge down (or up again): to the network (peers, routers, the API server), a power loss
   * and the power's return; the node's own processes run on, cut off.
   */
  setNodeLink(name: string, state: "down" | "up"): Promise<void>;
  /** Stops the node's kubelet (SIGTERM, as systemd does) and starts it again with the same flags and
   * folders; containerd and the pods keep running. */
  restartKubelet(name: string): Promise<void>;
  stop(): Promise<void>;
}

const NODE_READY_TIMEOUT_MS = 120_000;

function nodeSpecs(nodes: ClusterOptions["nodes"], controlPlaneNodes = 1, dualStack = false): NodeSpec[] {
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
    dualStack,
  }));
}

/** The cluster's folder as a shared mount of its own, so that what a kubelet mounts under it from its own
 * mount namespace (volumes) reaches containerd in the machine's, whatever this machine's / propagates. */
function shareMounts(dir: string): void {
  sh("mount", ["--bind", dir, dir]);
  sh("mount", ["--make-shared", dir]);
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

function clusterNode(record: ClusterRecord, running: RunningNode, dualStack: boolean): ClusterNode {
  const { layout, netns } = running;
  const socket = path.join(record.dir, "nodes", layout.name, "containerd", "containerd.sock");
  return {
    name: layout.name,
    controlPlane: running.controlPlane,
    ip: layout.ip,
    publicIP: layout.publicIP,
    publicIP6: dualStack ? layout.publicIP6 : undefined,
    netns,
    podCIDR: layout.podCIDR,
    podCIDRs: dualStack ? [layout.podCIDR, layout.podCIDR6] : [layout.podCIDR],
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
  const dualStack = options.dualStack ?? false;
  const specs = nodeSpecs(options.nodes, options.controlPlaneNodes, dualStack);
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
    const clientNetns = await createClientHost(record.slot, dualStack);
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

    const handles = nodes.map((node) => clusterNode(record, node, dualStack));
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
      dualStack,
      projectImage,
      kubectl: (args, input) => run(plane.binaries.kubectl, [`--kubeconfig=${kubeconfigPath}`, ...args], { input }),
      helm: (args) => run(plane.binaries.helm, [`--kubeconfig=${kubeconfigPath}`, ...args]),
      node: byName,
      async killNode(name) {
        byName(name);
        powerOff(dir, record.nodes.find((node) => node.name === name) as NodeLayout);
      },
      async setNodeLink(name, state) {
        byName(name);
        const node = record.nodes.find((n) => n.name === name) as NodeLayout;
        await run("ip", ["link", "set", node.rootVeth, state]);
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
