// kube-proxy on a node of the local cluster: the pinned upstream binary in the node's network namespace, so its
// iptables or nftables rules land there and never in the machine's own namespace. It runs as kubeadm runs it:
// as system:kube-proxy, the user the built-in system:node-proxier ClusterRoleBinding names, with a client
// certificate of the cluster CA. It is started from the node's folder, so the node's power loss and the
// cluster's teardown end it with the kubelet (processes by folder).
import { readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { clientCertificateUser, type ControlPlane, kubeconfigJson } from "./controlplane.ts";
import { issueClientCertificate } from "./pki.ts";
import { type Service, startService } from "./service.ts";

export const PROXY_MODES = ["iptables", "nftables"] as const;
export type ProxyMode = (typeof PROXY_MODES)[number];
/** kube-proxy's health check port (/healthz, /livez), on every address of the node. */
export const KUBE_PROXY_HEALTH_PORT = 10256;
/** Its metrics port (/metrics, /proxyMode), on the node's loopback only. */
export const KUBE_PROXY_METRICS_PORT = 10249;

export interface KubeProxyNode {
  name: string;
  /** The InternalIP, kubelet's --node-ip: kube-proxy's primary address. */
  ip: string;
}

export interface KubeProxySettings {
  mode: ProxyMode;
  /** All pod CIDRs together: traffic from elsewhere to a Service is masqueraded, pod traffic is not. */
  podNetwork: string;
  /** The node networks NodePorts answer on (both of a node's addresses, never loopback). */
  nodePortNetworks: string[];
}

/** The KubeProxyConfiguration of one node; pure, so the choices below are read in one place. */
export function kubeProxyConfig(node: KubeProxyNode, kubeconfig: string, settings: KubeProxySettings): string {
  return JSON.stringify(
    {
      apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
      kind: "KubeProxyConfiguration",
      clientConnection: { kubeconfig },
      mode: settings.mode,
      hostnameOverride: node.name,
      // Its primary address (and so its primary family), whatever the Node lists first.
      bindAddress: node.ip,
      healthzBindAddress: `0.0.0.0:${KUBE_PROXY_HEALTH_PORT}`,
      metricsBindAddress: `127.0.0.1:${KUBE_PROXY_METRICS_PORT}`,
      clusterCIDR: settings.podNetwork,
      detectLocalMode: "ClusterCIDR",
      // Explicit, so both modes answer on the same addresses (nftables mode's default is the primary address
      // only, iptables mode's every local address including 127.0.0.1, which needs route_localnet).
      nodePortAddresses: settings.nodePortNetworks,
      // 0 leaves the conntrack sysctls as they are: nf_conntrack_max belongs to the machine, not the node.
      conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
      // Lowering its OOM score needs CAP_SYS_RESOURCE, which no process here has.
      oomScoreAdj: 0,
    },
    null,
    2,
  );
}

/** Writes the node's kube-proxy kubeconfig and config into `nodeDir` and returns a function that starts it. */
export async function prepareKubeProxy(
  plane: ControlPlane,
  node: KubeProxyNode,
  nodeDir: string,
  settings: KubeProxySettings,
  service: { netns: string; detached: boolean },
): Promise<() => Service> {
  const user = "/CN=system:kube-proxy";
  const cert = await issueClientCertificate(plane.certificateAuthority, `kube-proxy-${node.name}`, user);
  const kubeconfig = path.join(nodeDir, "kube-proxy.kubeconfig");
  const caPem = readFileSync(plane.caPath, "utf8");
  await writeFile(kubeconfig, kubeconfigJson(plane.server, caPem, clientCertificateUser(cert)));
  const config = path.join(nodeDir, "kube-proxy.json");
  await writeFile(config, kubeProxyConfig(node, kubeconfig, settings));
  const args = [`--config=${config}`];
  return () => startService("kube-proxy", plane.binaries.kubeProxy, args, { dir: nodeDir, ...service });
}
