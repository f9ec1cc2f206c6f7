// The Nodes the benchmarks register: as many as a large cluster has, each the size kubelet writes, named and
// addressed by number so that a benchmark can find a node's address from its name.
import type { Node } from "kubernetes-types/core/v1.js";
import { nodeObject } from "../test/lifecycle/world.ts";

export const nodeName = (i: number) => `node-${String(i).padStart(5, "0")}`;

/** Its InternalIP (for i < 39,936). */
export const nodeAddress = (i: number) => `198.18.${100 + (i >> 8)}.${i & 255}`;

/** A Node the size kubelet writes: labels, annotations, five conditions, capacity, node info, images. */
export function kubeletNode(i: number): Node {
  const name = nodeName(i);
  const now = new Date().toISOString();
  const base = nodeObject(name, { address: nodeAddress(i), ready: "True", tainted: false });
  const condition = (type: string, status: string, reason: string, message: string) => ({
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: now,
  });
  return {
    ...base,
    metadata: {
      name,
      labels: {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m6i.2xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": `eu-west-1${"abc"[i % 3]}`,
        "node.example.com/pool": `pool-${i % 8}`,
      },
      annotations: {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
        "csi.volume.kubernetes.io/nodeid": JSON.stringify({ "ebs.csi.aws.com": `i-0${i.toString(16)}` }),
      },
    },
    status: {
      ...base.status,
      conditions: [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
      ],
      capacity: { cpu: "8", "ephemeral-storage": "104845292Ki", memory: "32386524Ki", pods: "110" },
      allocatable: { cpu: "7910m", "ephemeral-storage": "95551679124", memory: "31369756Ki", pods: "110" },
      daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
      nodeInfo: {
        machineID: "ec2a4f3b9d3e4c51a6f0b1c2d3e4f5a6",
        systemUUID: "ec2a4f3b-9d3e-4c51-a6f0-b1c2d3e4f5a6",
        bootID: "0b6f2a7e-3c1d-4e8f-9a2b-5c6d7e8f9a0b",
        kernelVersion: "6.1.0-18-cloud-amd64",
        osImage: "Debian GNU/Linux 12 (bookworm)",
        containerRuntimeVersion: "containerd://1.7.13",
        kubeletVersion: "v1.30.0",
        kubeProxyVersion: "v1.30.0",
        operatingSystem: "linux",
        architecture: "amd64",
      },
      images: Array.from({ length: 12 }, (_, n) => ({
        names: [
          `registry.example.com/team-${n}/service@sha256:${String(n).repeat(64).slice(0, 64)}`,
          `registry.example.com/team-${n}/service:v1.${n}.0`,
        ],
        sizeBytes: 50_000_000 + n * 1_000_000,
      })),
    },
  };
}
