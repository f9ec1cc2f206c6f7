// The cluster's own addresses, which no node's serving certificate may carry whatever its Node claims (rule 5b):
// a kubelet or agent may write any address into its own Node's status.addresses (kubernetes/kubernetes#50635),
// and a certificate of the cluster CA for, say, the kubernetes Service's ClusterIP verifies in every pod.
//
// Three small watches feed it (declared in definition.ts): the ServiceCIDRs, the kubernetes Service in default
// (its ClusterIPs stand in where no ServiceCIDR objects exist) and that Service's EndpointSlices (the API
// server's own addresses). Each object is trimmed to what is read here (the *_FIELDS below), and
// clusterAddresses() turns the three lists into the facts decideCSR() takes. Loopback, unspecified, link-local
// and multicast addresses are the cluster's too: no host may prove them its own.
//
// Containment is compared on 16 bytes, IPv4 as IPv4-mapped IPv6: a range written either way then covers both
// spellings of its addresses (a ServiceCIDR of ::ffff:10.96.0.0/108 still covers the SAN 10.96.0.1, which is
// how Go writes ::ffff:10.96.0.1 into a certificate).
import type { Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { EACH, type FieldPath } from "../kube/fields.ts";
import { ENDPOINT_SLICE_RESOURCE, type KubeObject, type ResourceRef, SERVICE_RESOURCE } from "../kube/resource.ts";
import { canonicalIp, ipToBytes } from "../net/ip.ts";

/** networking.k8s.io/v1 ServiceCIDR (GA in Kubernetes 1.33), the fields read; kubernetes-types lacks it. */
export interface ServiceCidr extends KubeObject {
  spec?: { cidrs?: string[] };
}

export const SERVICE_CIDR_RESOURCE: ResourceRef = { group: "networking.k8s.io", version: "v1", plural: "servicecidrs" };

/** The kubernetes Service only: RBAC can then name it (resourceNames), since the selector names it. */
export const KUBERNETES_SERVICE: { resource: ResourceRef; fieldSelector: string } = {
  resource: { ...SERVICE_RESOURCE, namespace: "default" },
  fieldSelector: "metadata.name=kubernetes",
};

/** The kubernetes Service's EndpointSlices: the API server's addresses (the apiserver writes them). */
export const API_SERVER_SLICES: { resource: ResourceRef; labelSelector: string } = {
  resource: { ...ENDPOINT_SLICE_RESOURCE, namespace: "default" },
  labelSelector: "kubernetes.io/service-name=kubernetes",
};

/** A range of addresses the cluster holds, on 16 bytes. */
export interface ClusterRange {
  /** The network's 16 bytes (IPv4 as IPv4-mapped), or undefined when its text cannot be read. */
  network: Buffer | undefined;
  /** Prefix length on 16 bytes (an IPv4 /12 is 108). */
  bits: number;
  /** How a reason names it: 'the Service CIDR 10.96.0.0/12 (ServiceCIDR "kubernetes")'. */
  what: string;
}

export interface ClusterAddresses {
  /** From the ServiceCIDR objects. An unreadable one covers every address: it may be any. */
  serviceCidrs: ClusterRange[];
  /** Canonical IP → what it is: the kubernetes Service's ClusterIPs and the API server's endpoints. */
  addresses: Map<string, string>;
}

export const NO_CLUSTER_ADDRESSES: ClusterAddresses = { serviceCidrs: [], addresses: new Map() };

const V4_MAPPED_PREFIX = Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);

/** Addresses no host may claim as its own, in every cluster. */
const SPECIAL_RANGES: ClusterRange[] = [
  ["0.0.0.0/32", "the unspecified address"],
  ["::/128", "the unspecified address"],
  ["127.0.0.0/8", "loopback (127.0.0.0/8)"],
  ["::1/128", "loopback (::1)"],
  ["169.254.0.0/16", "link-local (169.254.0.0/16)"],
  ["fe80::/10", "link-local (fe80::/10)"],
  ["224.0.0.0/4", "multicast (224.0.0.0/4)"],
  ["ff00::/8", "multicast (ff00::/8)"],
].map(([cidr = "", what = ""]) => ({ ...readRange(cidr), what }));

/**
 * Why `ip` (canonical text, as request.ts hands IP SANs over) is the cluster's, or undefined. The cluster's
 * objects come first (their reason names the object), then the address kinds every cluster holds.
 */
export function clusterIpProblem(ip: string, cluster: ClusterAddresses): string | undefined {
  const canonical = canonicalIp(ip);
  // Not an IP: nothing proves it is not the cluster's.
  if (canonical === undefined) return "is not an IP address";
  const key = addressKey(canonical);
  for (const range of cluster.serviceCidrs) {
    if (!range.network) return `may be in ${range.what}, which cannot be read`;
    if (inRange(key, range)) return `is in ${range.what}`;
  }
  const holder = cluster.addresses.get(canonical);
  if (holder !== undefined) return `is ${holder}`;
  const special = SPECIAL_RANGES.find((range) => inRange(key, range));
  return special && `is ${special.what}`;
}

/** The facts rule 5b decides on, from the three caches (objects trimmed by the transforms below). */
export function clusterAddresses(
  serviceCidrs: readonly ServiceCidr[],
  services: readonly Service[],
  slices: readonly EndpointSlice[],
): ClusterAddresses {
  const cidrs = serviceCidrs.flatMap((object) =>
    (object.spec?.cidrs ?? []).map((cidr) => ({
      ...readRange(cidr),
      what: `the Service CIDR ${cidr} (ServiceCIDR "${object.metadata?.name ?? ""}")`,
    })),
  );
  const addresses = new Map<string, string>();
  const add = (text: string, what: string) => {
    const ip = canonicalIp(text);
    if (ip !== undefined && !addresses.has(ip)) addresses.set(ip, what);
  };
  for (const service of services) {
    const { clusterIP, clusterIPs = [] } = service.spec ?? {};
    for (const ip of [...clusterIPs, ...(clusterIP ? [clusterIP] : [])])
      add(ip, `a ClusterIP of the Service ${qualifiedName(service)}`);
  }
  for (const slice of slices) {
    for (const ip of (slice.endpoints ?? []).flatMap((endpoint) => endpoint.addresses ?? []))
      add(ip, `an address of the API server (EndpointSlice ${qualifiedName(slice)})`);
  }
  return { serviceCidrs: cidrs, addresses };
}

// ---- the fields each watch keeps: what clusterAddresses() reads ----

export const SERVICE_CIDR_FIELDS: readonly FieldPath[] = [["spec", "cidrs"]];

export const KUBERNETES_SERVICE_FIELDS: readonly FieldPath[] = [
  ["spec", "clusterIP"],
  ["spec", "clusterIPs"],
];

export const ENDPOINT_SLICE_FIELDS: readonly FieldPath[] = [["addressType"], ["endpoints", EACH, "addresses"]];

// ---- 16-byte ranges ----

/** The 16 bytes of an IP in canonical text, IPv4 as IPv4-mapped. */
function addressKey(ip: string): Buffer {
  const bytes = ipToBytes(ip);
  return bytes.length === 16 ? bytes : Buffer.concat([V4_MAPPED_PREFIX, bytes]);
}

/** "10.96.0.0/12" as a 16-byte range (bits 108), the address read as Kubernetes reads it (canonicalIp). */
function readRange(text: string): Omit<ClusterRange, "what"> {
  const [address = "", length = "", extra] = text.split("/");
  const canonical = canonicalIp(address);
  const network = canonical === undefined ? undefined : addressKey(canonical);
  // The family of the text, not of the canonical form: ::ffff:10.96.0.0/108 is a 16-byte prefix already.
  const offset = address.includes(":") ? 0 : 96;
  const bits = Number(length) + offset;
  if (network === undefined || extra !== undefined || !/^\d{1,3}$/.test(length) || bits > 128)
    return { network: undefined, bits: 0 };
  return { network, bits };
}

function inRange(key: Buffer, { network, bits }: ClusterRange): boolean {
  if (!network) return true;
  const whole = bits >> 3;
  if (!key.subarray(0, whole).equals(network.subarray(0, whole))) return false;
  const rest = bits & 7;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return ((key[whole] ?? 0) & mask) === ((network[whole] ?? 0) & mask);
}

const qualifiedName = ({ metadata }: KubeObject) => `${metadata?.namespace ?? ""}/${metadata?.name ?? ""}`;
