// A node's configuration files: containerd's (and a trusted registry's hosts.toml), CNI's and kubelet's.
import path from "node:path";
import { CLUSTER_DOMAIN } from "./coredns.ts";
import type { NodeLayout } from "./layout.ts";
import { PAUSE_IMAGE } from "./pause.ts";
import { CNI_BIN_DIR } from "./runtime.ts";

export const registryConfigDir = (nodeDir: string) => path.join(nodeDir, "certs.d");

/** containerd's hosts.toml for a registry served over TLS from a private CA: pull from it, trusting that CA. */
export function registryHostsToml(host: string, caPath: string): string {
  return [
    `server = ${JSON.stringify(`https://${host}`)}`,
    "",
    `[host.${JSON.stringify(`https://${host}`)}]`,
    '  capabilities = ["pull", "resolve"]',
    `  ca = ${JSON.stringify(caPath)}`,
    "",
  ].join("\n");
}

export function containerdConfig(nodeDir: string): string {
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

/** `dualStack`: each pod also gets an address of the node's IPv6 pod CIDR (status.podIPs has both). */
export function cniConfig(nodeDir: string, node: NodeLayout, dualStack: boolean): string {
  const ranges = [[{ subnet: node.podCIDR, gateway: node.podGateway }]];
  if (dualStack) ranges.push([{ subnet: node.podCIDR6, gateway: node.podGateway6 }]);
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
            ranges,
            routes: [{ dst: "0.0.0.0/0" }, ...(dualStack ? [{ dst: "::/0" }] : [])],
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
export function kubeletConfig(
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
