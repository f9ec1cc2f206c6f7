// Starting one node of a local cluster: its network namespace, cgroup root, containerd (the images imported),
// kubelet (with its own client certificate; a control-plane node registered tainted, as kubeadm does) and kube-proxy.
import { mkdirSync, readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { createCgroups } from "./cgroups.ts";
import { startContainerd } from "./containerd.ts";
import { clientCertificateUser, type ControlPlane, kubeconfigJson } from "./controlplane.ts";
import { prepareKubeProxy, type ProxyMode } from "./kube-proxy.ts";
import { clusterLayout, type NodeLayout } from "./layout.ts";
import { cniConfig, containerdConfig, kubeletConfig } from "./node-config.ts";
import { createNodeNetwork } from "./node-network.ts";
import { issueClientCertificate } from "./pki.ts";
import { type Service, startService } from "./service.ts";
import type { ClusterRecord } from "./slots.ts";

export interface NodeOptions {
  /** Default node-<index>. */
  name?: string;
  /** kubelet asks for its serving certificate with a CSR (kubernetes.io/kubelet-serving) instead of
   * signing its own; until someone approves it, `kubectl logs` to this node fails. */
  serverTLSBootstrap?: boolean;
}

/** `dualStack`: the cluster's option (ClusterOptions.dualStack), for its network and its pods' addresses. */
export type NodeSpec = Required<NodeOptions> & { controlPlane: boolean; dualStack: boolean };

/** kubeadm's marks of a control-plane node (its mark-control-plane phase). */
export const CONTROL_PLANE_LABELS = {
  "node-role.kubernetes.io/control-plane": "",
  "node.kubernetes.io/exclude-from-external-load-balancers": "",
};
export const CONTROL_PLANE_TAINT = { key: "node-role.kubernetes.io/control-plane", effect: "NoSchedule" };

export interface RunningNode {
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

export async function startNode(
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
  const netns = await createNodeNetwork(record.slot, node, record.nodes, spec.dualStack);
  createCgroups(node);
  await writeFile(path.join(nodeDir, "cni", "10-pods.conflist"), cniConfig(nodeDir, node, spec.dualStack));
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
