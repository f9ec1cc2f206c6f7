// Cluster DNS on the local cluster, as kubeadm installs it: CoreDNS behind the Service kube-system/kube-dns at the
// service network's .10, which kubelets started with `dns: true` put in every pod's resolv.conf (clusterDNS,
// cluster.local). Upstream's e2e tests reach Services by name from pods (`nc mutability-test 80`).
//
// The binary is built from its module like the others (build.ts) and packed into a one-file image as
// metrics-server's is. The Corefile serves cluster.local and the reverse zones from the API and forwards nothing:
// no name leaves the machine, and any other name is refused.
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { CACHE_DIR, ensureBinaries } from "./build.ts";
import { writeImageTarball } from "./oci-image.ts";
import { COREDNS_VERSION } from "./versions.ts";

/** localhost/ says it comes from no registry. */
export const COREDNS_IMAGE = `localhost/coredns:${COREDNS_VERSION}`;
export const CLUSTER_DOMAIN = "cluster.local";
const NAMESPACE = "kube-system";
const NAME = "coredns";

/** kube-dns's cluster IP, as kubeadm picks it: the service network's tenth address. */
export const clusterDNSIP = (serviceNetwork: string) => serviceNetwork.replace(/\.0\/\d+$/, ".10");

export async function ensureCoreDNSImage(): Promise<string> {
  const dir = path.join(CACHE_DIR, `coredns-image-${COREDNS_VERSION}`);
  const tarball = path.join(dir, "coredns.tar");
  if (existsSync(tarball)) return tarball;
  await mkdir(dir, { recursive: true });
  const { coredns } = await ensureBinaries();
  await writeImageTarball(
    {
      reference: COREDNS_IMAGE,
      files: [{ path: "/coredns", source: coredns, mode: 0o755 }],
      config: { Entrypoint: ["/coredns"] },
    },
    tarball,
  );
  return tarball;
}

const COREFILE = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes ${CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loadbalance
}
`;

/** kubeadm's CoreDNS objects, trimmed to what this cluster needs; it tolerates the control-plane nodes' taint. */
export function coreDNSObjects(dnsIP: string, controlPlaneTaint: { key: string; effect: string }): object[] {
  const labels = { "k8s-app": "kube-dns" };
  const meta = (extra: object = {}) => ({ name: NAME, namespace: NAMESPACE, labels, ...extra });
  const dnsPorts = [
    { name: "dns", port: 53, protocol: "UDP" },
    { name: "dns-tcp", port: 53, protocol: "TCP" },
  ];
  return [
    { apiVersion: "v1", kind: "ServiceAccount", metadata: meta() },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: "system:coredns" },
      rules: [
        { apiGroups: [""], resources: ["endpoints", "services", "pods", "namespaces"], verbs: ["list", "watch"] },
        { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
      ],
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: "system:coredns" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "system:coredns" },
      subjects: [{ kind: "ServiceAccount", name: NAME, namespace: NAMESPACE }],
    },
    { apiVersion: "v1", kind: "ConfigMap", metadata: meta(), data: { Corefile: COREFILE } },
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: meta(),
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: NAME,
            priorityClassName: "system-cluster-critical",
            // As kubeadm's: it may run on control-plane nodes.
            tolerations: [controlPlaneTaint],
            containers: [
              {
                name: NAME,
                image: COREDNS_IMAGE,
                imagePullPolicy: "Never",
                args: ["-conf", "/etc/coredns/Corefile"],
                ports: dnsPorts.map(({ name, port, protocol }) => ({ name, containerPort: port, protocol })),
                volumeMounts: [{ name: "config", mountPath: "/etc/coredns", readOnly: true }],
                readinessProbe: { httpGet: { path: "/ready", port: 8181 } },
                livenessProbe: { httpGet: { path: "/health", port: 8080 } },
              },
            ],
            volumes: [{ name: "config", configMap: { name: NAME } }],
          },
        },
      },
    },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { ...meta(), name: "kube-dns" },
      spec: { selector: labels, clusterIP: dnsIP, ports: dnsPorts },
    },
  ];
}
