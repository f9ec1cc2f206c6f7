import assert from "node:assert/strict";
import { isIPv4, isIPv6 } from "node:net";
import { test } from "node:test";
import fc from "fast-check";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { type FieldPath, IDENTITY_FIELDS, projection } from "../kube/fields.ts";
import { UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import { canonicalIp, ipToBytes, parseCidr } from "../net/ip.ts";
import {
  type ClusterAddresses,
  clusterAddresses,
  ENDPOINT_SLICE_FIELDS,
  KUBERNETES_SERVICE_FIELDS,
  NO_CLUSTER_ADDRESSES,
  type ServiceCidr,
  SERVICE_CIDR_FIELDS,
} from "./cluster.ts";
import { csrObject, type OpensslRequest, opensslCsr } from "./csr.fixture.ts";
import { type CsrConfig, type CsrDecision, type CsrFacts, csrFacts, decideCSR } from "./decide.ts";
import { parseDnsNamePattern } from "./dnsnames.ts";
import { indexNode, indexNodes, type NodeFacts, nodeFacts } from "./nodes.ts";

const CREATED = "2026-01-01T12:00:00Z";
const NOW = new Date("2026-01-01T12:05:00Z");
const UNTIL = new Date("2026-01-01T12:10:00Z");

/** Just outside the Service CIDRs below, loopback, unspecified, link-local and multicast. */
const EDGE_IPS = [
  ...["10.95.255.255", "10.112.0.0", "fd00:10:96::1:0", "fd00:10:95:ffff:ffff:ffff:ffff:ffff", "126.255.255.255"],
  ...["128.0.0.0", "::2", "0.0.0.1", "169.253.255.255", "169.255.0.0", "fe7f:ffff::1", "fec0::1", "223.255.255.255"],
  ...["240.0.0.0", "feff:ffff::1", "::ffff:128.0.0.1", "::7f00:1"],
];

function node(name: string, addresses: [type: string, address: string][], uninitialized = false): Node {
  return {
    metadata: { name },
    spec: { taints: uninitialized ? [{ key: UNINITIALIZED_TAINT, effect: "NoSchedule" }] : [] },
    status: { addresses: addresses.map(([type, address]) => ({ type, address })) },
  };
}

const NODES = [
  node("n1", [
    ["InternalIP", "198.18.0.12"],
    ["InternalIP", "fd00:198:18::c"],
    ["ExternalIP", "198.18.0.50"], // n2 claims it too
    ["Hostname", "n1"],
    ["InternalDNS", "N1.lan"],
  ]),
  node("n2", [
    ["InternalIP", "198.18.0.13"],
    ["InternalIP", "::ffff:198.18.0.50"],
    ["Hostname", "n2"],
    ["ExternalDNS", "n2.example.com"],
  ]),
  node("n3", [["Hostname", "n3"]], true),
  node("a", [["InternalIP", "198.18.0.60"]]),
  node("a.b", [["InternalIP", "198.18.0.61"]]),
  // A node that wrote the cluster's addresses into its own status (any node may: kubernetes/kubernetes#50635).
  node("liar", [
    ["InternalIP", "198.18.0.70"],
    ...[
      ...["10.96.0.1", "10.100.3.4", "fd00:10:96::1", "192.0.2.10", "2001:db8::10", "10.200.0.9"],
      ...["127.0.0.1", "127.1.2.3", "::1", "0.0.0.0", "::", "169.254.169.254", "fe80::1", "224.0.0.1", "ff02::1"],
    ].map((ip): [string, string] => ["ExternalIP", ip]),
  ]),
  node("late", [["InternalIP", "10.96.0.7"]], true),
  node("edge", EDGE_IPS.map((ip): [string, string] => ["InternalIP", ip])),
];
const index = (nodes: NodeFacts[]) => indexNodes(nodes.map(indexNode));
const INDEX = index(NODES.map((n) => nodeFacts(n)));

/** A dual-stack cluster as its three caches show it: trimmed by the informers' transforms, as the controller reads. */
const CLUSTER_OBJECTS: { serviceCidrs: ServiceCidr[]; services: Service[]; endpointSlices: EndpointSlice[] } = {
  serviceCidrs: [
    { metadata: { name: "kubernetes", uid: "u1" }, spec: { cidrs: ["10.96.0.0/12", "fd00:10:96::/112"] } },
  ],
  services: [
    {
      metadata: { name: "kubernetes", namespace: "default", labels: { component: "apiserver" } },
      spec: { clusterIP: "10.96.0.1", clusterIPs: ["10.96.0.1", "fd00:10:96::1"], ports: [{ port: 443 }] },
    },
  ],
  endpointSlices: [
    {
      metadata: { name: "kubernetes", namespace: "default" },
      addressType: "IPv4",
      endpoints: [{ addresses: ["192.0.2.10"], conditions: { ready: true } }],
      ports: [{ name: "https", port: 6443 }],
    },
    {
      metadata: { name: "kubernetes-v6", namespace: "default" },
      addressType: "IPv6",
      endpoints: [{ addresses: ["2001:db8::10"] }],
    },
  ],
};
/** As the shared cache trims each object, by the fields its watch keeps (definition.ts). */
function trimmed<T>(fields: readonly FieldPath[]): (obj: T) => T {
  return projection<T>([...IDENTITY_FIELDS, ...fields]);
}
const clusterOf = (objects: Partial<typeof CLUSTER_OBJECTS>): ClusterAddresses =>
  clusterAddresses(
    (objects.serviceCidrs ?? []).map(trimmed(SERVICE_CIDR_FIELDS)),
    (objects.services ?? []).map(trimmed(KUBERNETES_SERVICE_FIELDS)),
    (objects.endpointSlices ?? []).map(trimmed(ENDPOINT_SLICE_FIELDS)),
  );
const CLUSTER = clusterOf(CLUSTER_OBJECTS);
const IN_SERVICE_CIDR = 'is in the Service CIDR 10.96.0.0/12 (ServiceCIDR "kubernetes")';
const oneServiceCidr = (name: string, cidr: string) =>
  clusterOf({ serviceCidrs: [{ metadata: { name }, spec: { cidrs: [cidr] } }] });

const CONFIG: CsrConfig = {
  apiServerNames: ["API.example.com"],
  ipAllowlist: [],
  maxExpirationSeconds: 86_400,
  pendingTimeoutMs: 600_000,
};

interface Case {
  title: string;
  request: OpensslRequest;
  spec?: Partial<CertificateSigningRequest["spec"]>;
  config?: Partial<CsrConfig>;
  cluster?: ClusterAddresses;
  object?: (csr: CertificateSigningRequest) => CertificateSigningRequest;
  expected: CsrDecision;
}

const n1 = (sans: string, extra: Partial<Case> = {}): Omit<Case, "title" | "expected"> => ({
  request: { sans },
  ...extra,
});
const as = (name: string, sans: string): Omit<Case, "title" | "expected"> => ({
  request: { subject: `/O=system:nodes/CN=system:node:${name}`, sans },
  spec: { username: `system:node:${name}` },
});
const approve = (reason: string): CsrDecision => ({ action: "approve", rule: "approved", reason });
const deny = (rule: Extract<CsrDecision, { action: "deny" }>["rule"], reason: string): CsrDecision => ({
  action: "deny",
  rule,
  reason,
});

const NODES_PATTERN = parseDnsNamePattern("{node}\\.nodes\\.example\\.com");

const CASES: Case[] = [
  {
    title: "a kubelet's request",
    ...n1("DNS:n1,DNS:n1.lan,IP:198.18.0.12,IP:fd00:198:18::c"),
    expected: approve('rules 1–8 hold for node "n1": DNS n1, n1.lan; IP 198.18.0.12, fd00:198:18::c'),
  },
  {
    title: "key encipherment, upper-case DNS, long IPv6, expiration at the maximum",
    ...n1("DNS:N1.LAN,IP:FD00:198:18:0:0:0:0:C", {
      spec: { usages: ["key encipherment", "server auth", "digital signature"], expirationSeconds: 86_400 },
    }),
    expected: approve('rules 1–8 hold for node "n1": DNS N1.LAN; IP fd00:198:18::c'),
  },
  // rule 1 and decided CSRs: left alone
  {
    title: "another signer, even with garbage",
    ...n1("DNS:n1", { spec: { signerName: "example.com/other" }, object: (csr) => withRequest(csr, "garbage") }),
    expected: { action: "ignore", rule: "signer", reason: "rule 1 (signer): example.com/other is not ours" },
  },
  {
    title: "kube-apiserver-client-kubelet is not ours either",
    ...n1("DNS:n1", { spec: { signerName: "kubernetes.io/kube-apiserver-client-kubelet" } }),
    expected: {
      action: "ignore",
      rule: "signer",
      reason: "rule 1 (signer): kubernetes.io/kube-apiserver-client-kubelet is not ours",
    },
  },
  {
    title: "already denied",
    ...n1("DNS:n2", { object: (csr) => ({ ...csr, status: { conditions: [{ type: "Denied", status: "True" }] } }) }),
    expected: { action: "ignore", rule: "decided", reason: "already Denied" },
  },
  {
    title: "already issued",
    ...n1("DNS:n1", { object: (csr) => ({ ...csr, status: { certificate: "Y2VydA==" } }) }),
    expected: { action: "ignore", rule: "decided", reason: "already issued" },
  },
  // rule 2
  {
    title: "not a node",
    ...n1("DNS:n1", { spec: { username: "alice" } }),
    expected: deny("identity", 'rule 2 (identity): username "alice" is not system:node:<name>'),
  },
  {
    title: "empty node name",
    ...n1("DNS:n1", { spec: { username: "system:node:" } }),
    expected: deny("identity", 'rule 2 (identity): username "system:node:" is not system:node:<name>'),
  },
  {
    title: "not in system:nodes",
    ...n1("DNS:n1", { spec: { groups: ["system:authenticated"] } }),
    expected: deny("identity", "rule 2 (identity): groups [system:authenticated] lack system:nodes"),
  },
  // rule 3
  {
    title: "garbage request",
    ...n1("DNS:n1", { object: (csr) => withRequest(csr, "garbage") }),
    expected: deny("request", "rule 3 (request): not one canonical PEM block: no BEGIN line"),
  },
  {
    title: "CN of another node",
    request: { subject: "/O=system:nodes/CN=system:node:n2", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject CN [system:node:n2] is not [system:node:n1]"),
  },
  {
    title: "two CNs (Go would read the last)",
    request: { subject: "/O=system:nodes/CN=system:node:n1/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny(
      "request",
      "rule 3 (request): subject CN [system:node:n1, system:node:n1] is not [system:node:n1]",
    ),
  },
  {
    title: "O system:masters too",
    request: { subject: "/O=system:nodes/O=system:masters/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject O [system:nodes, system:masters] is not [system:nodes]"),
  },
  {
    title: "no O",
    request: { subject: "/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject O [] is not [system:nodes]"),
  },
  {
    title: "an OU",
    request: { subject: "/O=system:nodes/OU=ops/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject attribute OU not allowed (only CN and O)"),
  },
  {
    title: "email SAN",
    ...n1("DNS:n1,email:root@n1"),
    expected: deny("request", "rule 3 (request): email SAN root@n1 not allowed"),
  },
  {
    title: "URI SAN",
    ...n1("DNS:n1,URI:spiffe://cluster/n1"),
    expected: deny(
      "request",
      'rule 3 (request): unreadable: URI SAN "spiffe://cluster/n1": not read (Go rewrites a URI as it parses it; ' +
        "no kubelet asks for one)",
    ),
  },
  {
    title: "otherName SAN",
    ...n1("DNS:n1,otherName:1.3.6.1.4.1.311.20.2.3;UTF8:n1@example"),
    expected: deny("request", "rule 3 (request): otherName SAN not allowed"),
  },
  {
    title: "no SAN",
    request: {},
    expected: deny("request", "rule 3 (request): no DNS or IP SAN"),
  },
  // rule 4
  {
    title: "client auth",
    ...n1("DNS:n1", { spec: { usages: ["digital signature", "server auth", "client auth"] } }),
    expected: deny("usages", 'rule 4 (usages): "client auth" not allowed'),
  },
  {
    title: "no server auth",
    ...n1("DNS:n1", { spec: { usages: ["digital signature", "key encipherment"] } }),
    expected: deny("usages", 'rule 4 (usages): "server auth" missing'),
  },
  {
    title: "no digital signature",
    ...n1("DNS:n1", { spec: { usages: ["server auth"] } }),
    expected: deny("usages", 'rule 4 (usages): "digital signature" missing'),
  },
  // rule 5b: the cluster's own addresses, denied whatever the Node claims ("liar" lists them all)
  ...(
    [
      ["10.96.0.1", IN_SERVICE_CIDR],
      ["10.100.3.4", IN_SERVICE_CIDR],
      ["::ffff:10.96.0.1", IN_SERVICE_CIDR],
      ["fd00:10:96::1", 'is in the Service CIDR fd00:10:96::/112 (ServiceCIDR "kubernetes")'],
      ["192.0.2.10", "is an address of the API server (EndpointSlice default/kubernetes)"],
      ["::ffff:192.0.2.10", "is an address of the API server (EndpointSlice default/kubernetes)"],
      ["2001:db8::10", "is an address of the API server (EndpointSlice default/kubernetes-v6)"],
      ["127.0.0.1", "is loopback (127.0.0.0/8)"],
      ["127.1.2.3", "is loopback (127.0.0.0/8)"],
      ["::ffff:127.0.0.1", "is loopback (127.0.0.0/8)"],
      ["::1", "is loopback (::1)"],
      ["0.0.0.0", "is the unspecified address"],
      ["::ffff:0.0.0.0", "is the unspecified address"],
      ["::", "is the unspecified address"],
      ["169.254.169.254", "is link-local (169.254.0.0/16)"],
      ["::ffff:169.254.169.254", "is link-local (169.254.0.0/16)"],
      ["fe80::1", "is link-local (fe80::/10)"],
      ["febf:ffff::1", "is link-local (fe80::/10)"],
      ["224.0.0.1", "is multicast (224.0.0.0/4)"],
      ["239.255.255.250", "is multicast (224.0.0.0/4)"],
      ["::ffff:224.0.0.1", "is multicast (224.0.0.0/4)"],
      ["ff02::1", "is multicast (ff00::/8)"],
    ] as const
  ).map(([ip, problem]): Case => ({
    title: `IP SAN ${ip}`,
    ...as("liar", `DNS:liar,IP:198.18.0.70,IP:${ip}`),
    expected: deny("cluster-ip", `rule 5b (cluster IPs): ${canonicalIp(ip)} ${problem}`),
  })),
  {
    title: "the liar's own address, and nothing of the cluster's: approved",
    ...as("liar", "DNS:liar,IP:198.18.0.70"),
    expected: approve('rules 1–8 hold for node "liar": DNS liar; IP 198.18.0.70'),
  },
  {
    title: "the addresses just outside each range are a node's to hold",
    ...as("edge", `IP:${EDGE_IPS.join(",IP:")}`),
    expected: approve(`rules 1–8 hold for node "edge": IP ${EDGE_IPS.map((ip) => canonicalIp(ip)).join(", ")}`),
  },
  {
    title: "no ServiceCIDR objects: the kubernetes Service's ClusterIPs still count",
    ...as("liar", "IP:198.18.0.70,IP:fd00:10:96::1"),
    cluster: clusterOf({ services: CLUSTER_OBJECTS.services }),
    expected: deny(
      "cluster-ip",
      "rule 5b (cluster IPs): fd00:10:96::1 is a ClusterIP of the Service default/kubernetes",
    ),
  },
  {
    title: "a ServiceCIDR written IPv4-mapped covers the IPv4 form a certificate carries",
    ...as("liar", "IP:10.200.0.9"),
    cluster: oneServiceCidr("mapped", "::ffff:10.200.0.0/112"),
    expected: deny(
      "cluster-ip",
      'rule 5b (cluster IPs): 10.200.0.9 is in the Service CIDR ::ffff:10.200.0.0/112 (ServiceCIDR "mapped")',
    ),
  },
  {
    title: "an unreadable ServiceCIDR may hold any IP: every IP SAN is denied, DNS-only requests still approved",
    ...as("liar", "IP:198.18.0.70"),
    cluster: oneServiceCidr("odd", "10.96.0.0/33"),
    expected: deny(
      "cluster-ip",
      "rule 5b (cluster IPs): 198.18.0.70 may be in the Service CIDR 10.96.0.0/33 " +
        '(ServiceCIDR "odd"), which cannot be read',
    ),
  },
  {
    title: "an unreadable ServiceCIDR does not hold DNS names",
    ...as("liar", "DNS:liar"),
    cluster: oneServiceCidr("odd", "garbage"),
    expected: approve('rules 1–8 hold for node "liar": DNS liar'),
  },
  {
    title: "an allowlist that covers the Service CIDR does not let its addresses through",
    ...as("liar", "IP:10.96.0.1"),
    config: { ipAllowlist: cidrs("10.0.0.0/8") },
    expected: deny("cluster-ip", `rule 5b (cluster IPs): 10.96.0.1 ${IN_SERVICE_CIDR}`),
  },
  {
    title: "an uninitialized node's cluster address: denied at once, no wait",
    ...as("late", "IP:10.96.0.7"),
    expected: deny("cluster-ip", `rule 5b (cluster IPs): 10.96.0.7 ${IN_SERVICE_CIDR}`),
  },
  {
    title: "a missing node's cluster address: denied at once, no wait",
    ...as("n9", "DNS:n9,IP:::1"),
    expected: deny("cluster-ip", "rule 5b (cluster IPs): ::1 is loopback (::1)"),
  },
  // rule 5
  {
    title: "another node's IP",
    ...n1("DNS:n1,IP:198.18.0.13"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.13 is not an address of node "n1"'),
  },
  {
    title: "another node's IPv4 written IPv4-mapped (the certificate would carry 198.18.0.13)",
    ...n1("IP:::ffff:198.18.0.13"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.13 is not an address of node "n1"'),
  },
  {
    title: "an IP that both n1 and n2 list",
    ...n1("IP:198.18.0.12,IP:198.18.0.50"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.50 is also an address of node "n2"'),
  },
  {
    title: "an IP of no node",
    ...n1("IP:203.0.113.7"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 203.0.113.7 is not an address of node "n1"'),
  },
  // rule 6
  ...(
    [
      ["n2", 'is a name of node "n2"'],
      ["N2.example.com", 'is a name of node "n2"'],
      ["a.b", 'is a name of node "a.b"'],
      ["kubernetes", "is a name of the API server"],
      ["Kubernetes.Default", "is a name of the API server"],
      ["kubernetes.default.svc", "is a name of the API server"],
      ["kubernetes.default.svc.cluster.local", "is a name of the API server"],
      ["api.example.com", "is a name of the API server"],
      ["*.n1", "is a wildcard"],
      ["198.18.0.12", "is an IP address (IP SANs carry those)"],
      ["n1.", 'is not a name of node "n1"'],
      ["intranet", 'is not a name of node "n1"'],
      [`${"a.".repeat(127)}n1`, "is longer than 253 characters"],
    ] as const
  ).map(([name, problem]): Case => ({
    title: `DNS SAN ${name.slice(0, 40)}`,
    ...n1(`DNS:n1,DNS:${name}`),
    expected: deny("dns-san", `rule 6 (DNS SANs): "${name}" ${problem}`),
  })),
  // rule 6: the extra-names pattern
  {
    title: "a name the pattern gives to n1",
    ...n1("DNS:n1.nodes.example.com", { config: { extraDnsNames: NODES_PATTERN } }),
    expected: approve('rules 1–8 hold for node "n1": DNS n1.nodes.example.com'),
  },
  {
    title: "a name the pattern gives to n2",
    ...n1("DNS:n2.nodes.example.com", { config: { extraDnsNames: NODES_PATTERN } }),
    expected: deny(
      "dns-san",
      'rule 6 (DNS SANs): "n2.nodes.example.com" is not a name of node "n1" ' +
        "nor matches the extra DNS name pattern {node}\\.nodes\\.example\\.com",
    ),
  },
  {
    title: "a name the pattern gives to a and a.b alike",
    ...as("a", "DNS:a.b.lan"),
    config: { extraDnsNames: parseDnsNamePattern("{node}\\.(b\\.)?lan") },
    expected: deny("dns-san", 'rule 6 (DNS SANs): "a.b.lan" matches the extra DNS name pattern for node "a.b" too'),
  },
  {
    title: "the pattern never overrides another node's name",
    ...n1("DNS:n2.example.com", { config: { extraDnsNames: parseDnsNamePattern("^{node}$|^n2\\.example\\.com$") } }),
    expected: deny("dns-san", 'rule 6 (DNS SANs): "n2.example.com" is a name of node "n2"'),
  },
  // rule 7
  {
    title: "IPs inside the allowlist",
    ...n1("IP:198.18.0.12,IP:fd00:198:18::c", { config: { ipAllowlist: cidrs("198.18.0.0/24", "fd00:198:18::/48") } }),
    expected: approve('rules 1–8 hold for node "n1": IP 198.18.0.12, fd00:198:18::c'),
  },
  {
    title: "an own IP outside the allowlist",
    ...n1("IP:198.18.0.12,IP:fd00:198:18::c", { config: { ipAllowlist: cidrs("198.18.0.0/24") } }),
    expected: deny("ip-cidr", "rule 7 (IP allowlist): fd00:198:18::c is in none of 198.18.0.0/24"),
  },
  // rule 8
  {
    title: "expiration above the maximum",
    ...n1("DNS:n1", { spec: { expirationSeconds: 86_401 } }),
    expected: deny("expiration", "rule 8 (expiration): expirationSeconds 86401 exceeds the maximum 86400"),
  },
  // rule 9
  {
    title: "uninitialized node, address not there yet: wait",
    ...as("n3", "DNS:n3,IP:198.18.0.30"),
    expected: {
      action: "wait",
      rule: "ip-san",
      until: UNTIL,
      reason: 'waiting for node "n3" to be initialized: rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3"',
    },
  },
  {
    title: "uninitialized node, DNS name not there yet: wait",
    ...as("n3", "DNS:n3.lan"),
    expected: {
      action: "wait",
      rule: "dns-san",
      until: UNTIL,
      reason: 'waiting for node "n3" to be initialized: rule 6 (DNS SANs): "n3.lan" is not a name of node "n3"',
    },
  },
  {
    title: "uninitialized node, all well: approve",
    ...as("n3", "DNS:n3"),
    expected: approve('rules 1–8 hold for node "n3": DNS n3'),
  },
  {
    title: "uninitialized node past the pending timeout: deny",
    ...as("n3", "IP:198.18.0.30"),
    object: (csr) => ({ ...csr, metadata: { ...csr.metadata, creationTimestamp: "2026-01-01T11:55:00Z" } }),
    expected: deny(
      "ip-san",
      'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3" (waited 10m0s for node "n3" to be initialized)',
    ),
  },
  {
    title: "uninitialized node, but expiration too long: no point waiting",
    ...as("n3", "IP:198.18.0.30"),
    spec: { username: "system:node:n3", expirationSeconds: 90_000 },
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3"'),
  },
  {
    title: "uninitialized node, IP outside the allowlist: no point waiting",
    ...as("n3", "IP:198.18.0.30"),
    config: { ipAllowlist: cidrs("10.0.0.0/8") },
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3"'),
  },
  {
    title: "uninitialized node, request without creation time: deny",
    ...as("n3", "IP:198.18.0.30"),
    object: (csr) => ({ ...csr, metadata: { name: "csr-1" } }),
    expected: deny(
      "ip-san",
      'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3" ' +
        '(no creation time to wait from for node "n3" to be initialized)',
    ),
  },
  {
    title: "missing node: wait",
    ...as("n9", "DNS:n9"),
    expected: {
      action: "wait",
      rule: "node-missing",
      until: UNTIL,
      reason: 'waiting for node "n9" to appear: rule 5 (node): node "n9" does not exist',
    },
  },
  {
    title: "missing node past the pending timeout: deny",
    ...as("n9", "DNS:n9"),
    object: (csr) => ({ ...csr, metadata: { ...csr.metadata, creationTimestamp: "2026-01-01T11:50:00Z" } }),
    expected: deny(
      "node-missing",
      'rule 5 (node): node "n9" does not exist (waited 10m0s for node "n9" to appear)',
    ),
  },
  {
    title: "initialized node: a failing IP is denied at once",
    ...n1("IP:198.18.0.30"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n1"'),
  },
];

function withRequest(csr: CertificateSigningRequest, text: string): CertificateSigningRequest {
  return { ...csr, spec: { ...csr.spec, request: Buffer.from(text).toString("base64") } };
}

function cidrs(...texts: string[]) {
  return texts.map((text) => {
    const cidr = parseCidr(text);
    assert.ok(cidr, text);
    return cidr;
  });
}

test("decideCSR: every rule on real requests made by openssl, with its reason", () => {
  for (const { title, request, spec, config, cluster = CLUSTER, object, expected } of CASES) {
    const csr = csrObject(opensslCsr(request), spec, CREATED);
    const facts = csrFacts(object ? object(csr) : csr);
    assert.deepEqual(decideCSR(facts, INDEX, { ...CONFIG, ...config }, NOW, cluster), expected, title);
  }
});

test("CSR facts: decided whatever the condition status, bad creation time, request parsed for ours only", () => {
  const csr = csrObject(opensslCsr({ sans: "DNS:n1" }), {}, CREATED);
  const facts = csrFacts(csr);
  assert.deepEqual(
    { ...facts, request: facts.request.ok },
    {
      name: "csr-1",
      signerName: "kubernetes.io/kubelet-serving",
      username: "system:node:n1",
      groups: ["system:nodes", "system:authenticated"],
      usages: ["digital signature", "server auth"],
      expirationSeconds: undefined,
      created: new Date(CREATED),
      decided: undefined,
      request: true,
    },
  );
  const failed = csrFacts({ ...csr, status: { conditions: [{ type: "Failed", status: "False" }] } });
  assert.equal(failed.decided, "Failed");
  const pending = csrFacts({ ...csr, status: { conditions: [{ type: "Pending", status: "True" }] } });
  assert.equal(pending.decided, undefined);
  assert.equal(csrFacts({ ...csr, metadata: { creationTimestamp: "yesterday" } }).created, undefined);
  const other = csrFacts({ ...csr, spec: { ...csr.spec, signerName: "example.com/x" } });
  assert.deepEqual(other.request, { ok: false, error: "not parsed (another signer)" });
});

test("node index: DNS names lower case, IPs canonical whatever their type, the uninitialized taint", () => {
  const nodes = index(
    [
      node("n1", [
        ["InternalIP", "::FFFF:198.18.0.12"],
        ["Hostname", "198.018.0.13"],
        ["InternalDNS", "N1.Lan"],
        ["ExternalDNS", "n1.example.com"],
        ["InternalIP", "not-an-ip"],
        ["SomethingElse", "other.name"],
      ]),
      node("n2", [["InternalIP", "198.18.0.12"]], true),
    ].map((n) => nodeFacts(n)),
  );
  const n1 = nodes.nodes.get("n1");
  assert.deepEqual([...(n1?.ips ?? [])], ["198.18.0.12", "198.18.0.13"]);
  assert.deepEqual([...(n1?.dnsNames ?? [])], ["n1", "n1.lan", "n1.example.com"]);
  assert.equal(n1?.uninitialized, false);
  assert.equal(nodes.nodes.get("n2")?.uninitialized, true);
  assert.deepEqual(nodes.ipOwners.get("198.18.0.12"), ["n1", "n2"]);
  assert.deepEqual(nodes.dnsOwners.get("n1.lan"), ["n1"]);
});

test("extra DNS name patterns: {node} is required, never escaped nor inside [...]", () => {
  for (const good of [
    "{node}\\.nodes\\.example\\.com",
    "^{node}\\.lan$",
    "(bmc\\.)?{node}\\.lan",
    "node-{node}",
    "{node}?\\.lan",
    "x\\.{node}$|^{node}\\.y",
    "[a-z]+\\.{node}",
  ])
    assert.doesNotThrow(() => parseDnsNamePattern(good), good);
  const bad: [string, RegExp][] = [
    ["nodes\\.example\\.com", /must contain \{node\}/],
    ["\\{node}\\.lan", /\\\{node\} is ambiguous/],
    ["[{node}]\\.lan", /inside \[\.\.\.\]/],
    ["[\\.{node}\\.]+", /inside \[\.\.\.\]/],
    ["{node}\\.(lan", /DNS name pattern .*: Invalid regular expression/],
  ];
  for (const [text, error] of bad) assert.throws(() => parseDnsNamePattern(text), error, text);
});

test("extra DNS name patterns: a name the pattern gives to other nodes too is refused", () => {
  const nodes = index(["n", "n1", "a", "a.b"].map((name) => nodeFacts(node(name, []))));
  const cases: [pattern: string, node: string, san: string, problem: string | undefined][] = [
    ["{node}\\.lan", "n1", "n1.lan", undefined],
    ["{node}\\.(b\\.)?lan", "a", "a.lan", undefined],
    ["{node}\\.(b\\.)?lan", "a", "a.b.lan", 'for node "a.b" too'],
    ["(x\\.)?{node}\\.lan", "a", "x.a.lan", undefined],
    // A quantifier after {node} applies to the whole name: n1's pattern does not give "n.lan".
    ["{node}?\\.lan", "n1", "n.lan", "is not a name of node"],
    ["{node}?\\.lan", "n1", ".lan", "for every node"],
    ["^{node}$|^intranet$", "n1", "intranet", "for every node"],
    ["node-{node}", "a", "node-a", undefined],
    ["[a-z.]*{node}", "a", "a.b", 'is a name of node "a.b"'],
    ["[a-z.]*{node}", "a", "x.a", undefined],
    ["[a-z.]*{node}", "n1", "nn1", undefined],
    ["[a-z.]*{node}", "n", "nn", undefined],
    ["[a-z.]*{node}", "n", "nn1", "is not a name of node"],
    ["[a-z.]*{node}", "n1", "x.n1", undefined],
  ];
  for (const [pattern, requester, san, problem] of cases) {
    const facts = csrFacts(csrObject(opensslCsr(as(requester, `DNS:${san}`).request), {
      username: `system:node:${requester}`,
    }, CREATED));
    const decision = decideCSR(facts, nodes, { ...CONFIG, extraDnsNames: parseDnsNamePattern(pattern) }, NOW, CLUSTER);
    const title = `${pattern} for ${requester}: ${san}`;
    if (problem === undefined) assert.equal(decision.action, "approve", `${title}: ${decision.reason}`);
    else assert.match(decision.reason, new RegExp(problem.replace(/[.*+?()[\]]/g, "\\$&")), title);
  }
});

// ---- property: never approve a SAN that is another node's or no node's ----

const NODE_NAMES = ["n1", "n2", "n3", "a", "a.b", "c.a.b"];
const IPS = ["198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4", "fd00:198:18::1", "fd00:198:18::2"];
const DNS = ["h1", "h2", "H1.lan", "x.example.com", "n1", "a.b", "kubernetes"];
const PATTERNS = [
  undefined,
  "{node}\\.lan",
  "{node}\\.(b\\.)?lan",
  "(x\\.)?{node}\\.lan",
  "^{node}$|^b\\.{node}",
  "[a-z.]*{node}",
  "{node}?\\.lan",
  "^{node}$|^intranet$",
];

/** An IP as written in a CSR or a Node: its usual text, upper case, or (IPv4) IPv4-mapped. */
const writtenIp = (ip: string) =>
  fc.constantFrom(ip, ip.toUpperCase(), ...(isIPv4(ip) ? [`::ffff:${ip}`, `::FFFF:${ip}`] : []));

const nodesArb = fc
  .uniqueArray(fc.constantFrom(...NODE_NAMES), { minLength: 1, maxLength: NODE_NAMES.length })
  .chain((names) =>
    fc.tuple(
      ...names.map((name) =>
        fc.record({
          name: fc.constant(name),
          ips: fc.array(fc.constantFrom(...IPS).chain(writtenIp), { maxLength: 3 }),
          dns: fc.array(fc.constantFrom(...DNS), { maxLength: 2 }),
          uninitialized: fc.boolean(),
        }),
      ),
    ),
  )
  .map((nodes) =>
    nodes.map(
      ({ name, ips, dns, uninitialized }): NodeFacts => ({
        name,
        addresses: [
          ...ips.map((address, i) => ({ type: i % 2 ? "ExternalIP" : "InternalIP", address })),
          ...dns.map((address, i) => ({ type: ["Hostname", "InternalDNS", "ExternalDNS"][i % 3] ?? "", address })),
        ],
        uninitialized,
      }),
    ),
  );

const pick = <T,>(own: T[], others: fc.Arbitrary<T>) =>
  own.length ? fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...own) }, { weight: 1, arbitrary: others }) : others;

/** A requester (mostly an existing node) and SANs: its own, other nodes', pattern-made, no node's. */
const sanArb = (nodes: NodeFacts[]) =>
  fc
    .oneof({ weight: 9, arbitrary: fc.constantFrom(...nodes) }, { weight: 1, arbitrary: fc.constant(undefined) })
    .chain((requester) => {
      const own = requester?.addresses.map((a) => a.address) ?? [];
      const ownIps = IPS.filter((ip) => own.some((address) => canonicalIp(address) === canonicalIp(ip)));
      const ownNames = [requester?.name ?? "n9", ...own.filter((address) => canonicalIp(address) === undefined)];
      return fc.record({
        requester: fc.constant(requester?.name ?? "n9"),
        dnsNames: fc.array(
          pick(
            [...ownNames, ...ownNames.map((name) => name.toUpperCase()), `${requester?.name}.lan`],
            fc.oneof(
              fc.constantFrom(...DNS, ...NODE_NAMES, ...nodes.flatMap((n) => n.addresses.map((a) => a.address))),
              fc.constantFrom(...NODE_NAMES).map((name) => `${name}.lan`),
              fc.constantFrom(...NODE_NAMES).map((name) => `x.${name}.lan`),
              fc.constantFrom(...NODE_NAMES).map((name) => `b.${name}`),
              fc.constantFrom("intranet", ".lan", "n.lan", "a.lan"), // names some patterns give to many nodes
              fc.domain(),
            ),
          ),
          { maxLength: 3 },
        ),
        ips: fc.array(
          pick(ownIps, fc.oneof(fc.constantFrom(...IPS, "203.0.113.9", "fd00::9"), fc.ipV4(), fc.ipV6())).chain(
            writtenIp,
          ),
          { maxLength: 3 },
        ),
        pattern: fc.constantFrom(...PATTERNS),
        allowlist: fc.constantFrom<string[]>([], [], ["198.18.0.0/30"], ["198.18.0.0/24", "fd00::/8"]),
        ageMs: fc.integer({ min: 0, max: 1_200_000 }),
      });
    });

/** An IP's 16 bytes (IPv4 as IPv4-mapped), computed without the code under test's canonical form. */
const ipKey = (ip: string) =>
  isIPv4(ip)
    ? `00000000000000000000ffff${ipToBytes(ip).toString("hex")}`
    : isIPv6(ip)
      ? ipToBytes(ip).toString("hex")
      : undefined;

/**
 * The nodes a SAN belongs to, restated from the rules: the nodes that list it (by name or address); for a DNS
 * name no node lists, the nodes the pattern gives it to.
 */
function owners(nodes: NodeFacts[], san: { ip: string } | { dns: string }, pattern: string | undefined): string[] {
  if ("ip" in san)
    return nodes
      .filter((n) => n.addresses.some((a) => ipKey(a.address) !== undefined && ipKey(a.address) === ipKey(san.ip)))
      .map((n) => n.name);
  const name = san.dns.toLowerCase();
  const listed = nodes.filter(
    (n) => n.name === name || n.addresses.some((a) => !a.type.endsWith("IP") && a.address.toLowerCase() === name),
  );
  if (listed.length || pattern === undefined) return listed.map((n) => n.name);
  const given = (n: NodeFacts) =>
    new RegExp(`^(?:${pattern.replaceAll("{node}", `(?:${n.name.replaceAll(".", "\\.")})`)})$`).test(name);
  return nodes.filter(given).map((n) => n.name);
}

/** A CSR of `requester` whose request parsed into these SANs (IPs canonical, as request.ts hands them over). */
function parsedFacts(requester: string, dnsNames: string[], ips: string[], created: Date): CsrFacts {
  return {
    name: "csr",
    signerName: "kubernetes.io/kubelet-serving",
    username: `system:node:${requester}`,
    groups: ["system:nodes"],
    usages: ["digital signature", "server auth"],
    created,
    request: {
      ok: true,
      commonNames: [`system:node:${requester}`],
      organizations: ["system:nodes"],
      otherSubjectAttributes: [],
      dnsNames,
      ipAddresses: ips.map((ip) => canonicalIp(ip) ?? assert.fail(ip)),
      emailAddresses: [],
      otherSans: [],
    },
  };
}

test("property: never approves an IP or DNS SAN that is another node's or no node's", () => {
  let approvals = 0;
  fc.assert(
    fc.property(
      nodesArb.chain((nodes) => fc.tuple(fc.constant(nodes), sanArb(nodes))),
      ([nodes, { requester, dnsNames, ips, pattern, allowlist, ageMs }]) => {
        const facts = parsedFacts(requester, dnsNames, ips, new Date(NOW.getTime() - ageMs));
        const config: CsrConfig = {
          ...CONFIG,
          ipAllowlist: cidrs(...allowlist),
          ...(pattern ? { extraDnsNames: parseDnsNamePattern(pattern) } : {}),
        };
        const decision = decideCSR(facts, index(nodes), config, NOW, CLUSTER);
        assert.ok(decision.reason.length > 0);
        if (decision.action !== "approve") return;
        approvals++;
        for (const ip of ips) assert.deepEqual(owners(nodes, { ip }, pattern), [requester], `IP SAN ${ip}`);
        for (const dns of dnsNames) {
          assert.deepEqual(owners(nodes, { dns }, pattern), [requester], `DNS SAN ${dns}`);
          assert.ok(!dns.toLowerCase().startsWith("kubernetes"), `DNS SAN ${dns}`);
        }
      },
    ),
    { numRuns: 3000 },
  );
  assert.ok(approvals > 100, `only ${approvals} approvals: the generators hardly reach the interesting side`);
});

test("cluster addresses: the watches keep only what is read, and the facts name the object of each address", () => {
  const kept = {
    serviceCidrs: CLUSTER_OBJECTS.serviceCidrs.map(trimmed(SERVICE_CIDR_FIELDS)),
    services: CLUSTER_OBJECTS.services.map(trimmed(KUBERNETES_SERVICE_FIELDS)),
    endpointSlices: CLUSTER_OBJECTS.endpointSlices.map(trimmed(ENDPOINT_SLICE_FIELDS)),
  };
  assert.deepEqual(kept.serviceCidrs, [
    {
      metadata: { name: "kubernetes" },
      spec: { cidrs: ["10.96.0.0/12", "fd00:10:96::/112"] },
    },
  ]);
  assert.deepEqual(kept.services, [
    {
      metadata: { name: "kubernetes", namespace: "default" },
      spec: { clusterIP: "10.96.0.1", clusterIPs: ["10.96.0.1", "fd00:10:96::1"] },
    },
  ]);
  assert.deepEqual(kept.endpointSlices[0], {
    metadata: { name: "kubernetes", namespace: "default" },
    addressType: "IPv4",
    endpoints: [{ addresses: ["192.0.2.10"] }],
  });
  assert.deepEqual(
    [...CLUSTER.addresses],
    [
      ["10.96.0.1", "a ClusterIP of the Service default/kubernetes"],
      ["fd00:10:96::1", "a ClusterIP of the Service default/kubernetes"],
      ["192.0.2.10", "an address of the API server (EndpointSlice default/kubernetes)"],
      ["2001:db8::10", "an address of the API server (EndpointSlice default/kubernetes-v6)"],
    ],
  );
  // Addresses read as Kubernetes reads them: IPv4-mapped as IPv4, leading zeros as decimal; FQDN endpoints skipped.
  const sloppy = clusterOf({
    serviceCidrs: [{ metadata: { name: "zeros", uid: "u4" }, spec: { cidrs: ["010.096.0.0/16"] } }],
    services: [{ metadata: { name: "kubernetes", namespace: "default" }, spec: { clusterIP: "::FFFF:10.96.0.1" } }],
    endpointSlices: [
      {
        metadata: { name: "fqdn", namespace: "default" },
        addressType: "FQDN",
        endpoints: [{ addresses: ["api.example"] }],
      },
    ],
  });
  assert.deepEqual([...sloppy.addresses], [["10.96.0.1", "a ClusterIP of the Service default/kubernetes"]]);
  const facts = csrFacts(csrObject(opensslCsr(as("liar", "IP:10.96.3.4").request), { username: "system:node:liar" }));
  assert.equal(
    decideCSR(facts, INDEX, CONFIG, NOW, sloppy).reason,
    'rule 5b (cluster IPs): 10.96.3.4 is in the Service CIDR 010.096.0.0/16 (ServiceCIDR "zeros")',
  );
  // With no cluster objects at all, the address kinds every cluster holds still count; 10.96.0.1 is then the liar's.
  const liar = as("liar", "IP:10.96.0.1,IP:fe80::1");
  const bare = csrFacts(csrObject(opensslCsr(liar.request), liar.spec));
  assert.equal(
    decideCSR(bare, INDEX, CONFIG, NOW, NO_CLUSTER_ADDRESSES).reason,
    "rule 5b (cluster IPs): fe80::1 is link-local (fe80::/10)",
  );
});

// ---- property: never approve an IP SAN that is the cluster's, whatever the Nodes claim ----

const SERVICE_CIDRS = ["10.96.0.0/12", "fd00:10:96::/112", "::ffff:10.200.0.0/112", "198.18.0.0/30", "198.18.0.4/31"];
const CLUSTER_IPS = ["10.96.0.1", "fd00:10:96::1", "198.18.0.9"];
const ENDPOINTS = ["198.18.0.8", "2001:db8::10", "127.0.0.1", "::ffff:198.18.0.7"];
/** Loopback, unspecified, link-local, multicast: restated here from the standards, not from cluster.ts. */
const SPECIAL = [
  ...["127.0.0.0/8", "::1/128", "0.0.0.0/32", "::/128"],
  ...["169.254.0.0/16", "fe80::/10", "224.0.0.0/4", "ff00::/8"],
];
const CLAIMED = [
  ...["198.18.0.1", "198.18.0.3", "198.18.0.5", "198.18.0.6", "198.18.0.7", "198.18.0.8", "198.18.0.9"],
  ...["10.96.0.1", "10.100.0.5", "10.111.255.255", "10.112.0.1", "10.200.0.9", "fd00:10:96::1", "fd00:10:96::1:0"],
  ...["2001:db8::10", "127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::", "169.254.1.1", "fe80::1", "fec0::1"],
  ...["224.0.0.1", "239.0.0.1", "240.0.0.1", "ff02::1", "203.0.113.5", "fd00:198:18::1"],
];

/** A CIDR's 128-bit network and prefix, IPv4 as IPv4-mapped (as ipKey). */
function bigRange(text: string): { network: bigint; bits: number } {
  const [address = "", length = ""] = text.split("/");
  return { network: BigInt(`0x${ipKey(address)}`), bits: Number(length) + (isIPv4(address) ? 96 : 0) };
}
const bigContains = ({ network, bits }: { network: bigint; bits: number }, ip: string) =>
  BigInt(`0x${ipKey(ip)}`) >> BigInt(128 - bits) === network >> BigInt(128 - bits);

test("property: never approves an IP SAN in the cluster's addresses, whatever the Nodes claim", () => {
  let [approvals, clusterDenials] = [0, 0];
  const clusterArb = fc.record({
    cidrs: fc.subarray(SERVICE_CIDRS),
    clusterIps: fc.subarray(CLUSTER_IPS),
    endpoints: fc.subarray(ENDPOINTS),
  });
  const nodeArb = fc.uniqueArray(fc.constantFrom(...CLAIMED), { minLength: 1, maxLength: 6 });
  fc.assert(
    fc.property(
      clusterArb,
      // The requester is n0, the first of up to 3 nodes.
      fc.array(nodeArb, { minLength: 1, maxLength: 3 }).chain((claims) =>
        fc.tuple(
          fc.constant(claims),
          // Mostly n0's own claims, at times any, each written as a kubelet or an attacker may.
          fc.array(fc.oneof(fc.constantFrom(...CLAIMED), fc.constantFrom(...(claims[0] ?? []))).chain(writtenIp), {
            minLength: 1,
            maxLength: 3,
          }),
        ),
      ),
      ({ cidrs, clusterIps, endpoints }, [claims, asked]) => {
        const nodes = claims.map((ips, i): NodeFacts => ({
          name: `n${i}`,
          addresses: ips.map((address) => ({ type: "ExternalIP", address })),
          uninitialized: false,
        }));
        const requester = "n0";
        const cluster = clusterOf({
          serviceCidrs: [{ metadata: { name: "sc", uid: "u" }, spec: { cidrs } }],
          services: [{ metadata: { name: "kubernetes", namespace: "default" }, spec: { clusterIPs: clusterIps } }],
          endpointSlices: [
            {
              metadata: { name: "kubernetes", namespace: "default" },
              addressType: "IPv4",
              endpoints: [{ addresses: endpoints }],
            },
          ],
        });
        const facts = parsedFacts(requester, [], asked, NOW);
        const decision = decideCSR(facts, index(nodes), CONFIG, NOW, cluster);
        if (decision.rule === "cluster-ip") clusterDenials++;
        if (decision.action !== "approve") return;
        approvals++;
        const exact = [...clusterIps, ...endpoints].map(ipKey);
        for (const ip of asked) {
          assert.ok(!exact.includes(ipKey(ip)), `IP SAN ${ip} is a ClusterIP or an API server address`);
          for (const range of [...cidrs, ...SPECIAL])
            assert.ok(!bigContains(bigRange(range), ip), `IP SAN ${ip} lies in ${range}`);
        }
      },
    ),
    { numRuns: 3000 },
  );
  assert.ok(approvals > 100, `only ${approvals} approvals: the generators hardly reach the interesting side`);
  assert.ok(clusterDenials > 100, `only ${clusterDenials} rule 5b denials`);
});
