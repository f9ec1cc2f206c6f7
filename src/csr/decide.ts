// The kubelet-serving CSR approver's decision, as a pure function of plain data: approve exactly the serving
// certificates a node may hold, deny the rest with the first failed rule and the offending value, and leave
// every other CSR alone. The reason is one line that logs, Events and the CSR's condition message reuse; the
// rule is a short stable id for metrics.
//
// Rules, in order (first failure wins):
//   1 signer      spec.signerName is kubernetes.io/kubelet-serving, else "ignore" (never denied). Already
//                 approved, denied, failed or issued: "ignore" (rule "decided").
//   2 identity    spec.username is system:node:<name>, spec.groups contains system:nodes.
//   3 request     the request is one canonical PEM block within 16 KiB that reads as Go reads it (request.ts);
//                 one subject CN == spec.username; O == [system:nodes] exactly; no other subject attribute; no
//                 email, URI or other SAN kinds; at least one DNS or IP SAN.
//   4 usages      server auth and digital signature required, key encipherment allowed, nothing else.
//   5b cluster-ip no IP SAN is the cluster's own (cluster.ts): in a Service CIDR, a ClusterIP of the kubernetes
//                 Service, an address of the API server, loopback, unspecified, link-local or multicast, whatever
//                 any Node claims. Checked before the Node is looked at, and denied at once: it never becomes valid.
//   5 node-missing / ip-san
//                 Node <name> exists; every IP SAN is one of its addresses (canonical form) and no other
//                 Node's.
//   6 dns-san     every DNS SAN (lower case) is no wildcard, IP literal or API server name, is no other Node's
//                 name or DNS address, and is the node's name or a Hostname / InternalDNS / ExternalDNS address
//                 of it, or is given by the extra-names pattern to this node and to no other existing node
//                 (dnsnames.ts).
//   7 ip-cidr     when an IP allowlist is set, every IP SAN lies in one of its CIDRs (on top of rule 5).
//   8 expiration  spec.expirationSeconds, when set, ≤ the maximum.
//   9 (pending)   a CSR whose only failures are rules 5–6 "wait"s while its Node is missing or still
//                 uninitialized, until pendingTimeout after the CSR's creation; then the failure denies it.
//                 A missing Node waits too: the kubelet registers its Node before it asks for a serving
//                 certificate, so a missing Node means the informer cache lags or the Node is being
//                 re-registered, and waiting issues nothing.
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import { formatDuration } from "../cli/duration.ts";
import { canonicalIp, type Cidr, cidrContains } from "../net/ip.ts";
import { type ClusterAddresses, clusterIpProblem } from "./cluster.ts";
import {
  type DnsNamePattern,
  isApiServerName,
  isEveryNode,
  matchesPattern,
  otherPatternNode,
} from "./dnsnames.ts";
import { type IndexedNode, type NodeIndex, otherOwners } from "./nodes.ts";
import { type CsrRequest, type ParsedRequest, parseCsrRequest } from "./request.ts";

export const KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving";
const NODE_USER_PREFIX = "system:node:";
const NODES_GROUP = "system:nodes";
const REQUIRED_USAGES = ["server auth", "digital signature"];
const ALLOWED_USAGES = new Set([...REQUIRED_USAGES, "key encipherment"]);
const MAX_DNS_NAME_LENGTH = 253;

export interface CsrConfig {
  /** Names of the API server besides kubernetes, kubernetes.default and kubernetes.default.svc[.<domain>]. */
  apiServerNames: string[];
  /** Extra DNS SANs a node may hold besides its own names (parseDnsNamePattern); undefined: none. */
  extraDnsNames?: DnsNamePattern;
  /** IP SANs must also lie in one of these; empty: no allowlist (rule 5 alone). */
  ipAllowlist: Cidr[];
  maxExpirationSeconds: number;
  /** How long after its creation a CSR may wait for its Node (rule 9). */
  pendingTimeoutMs: number;
}

export interface CsrFacts {
  name: string;
  signerName: string;
  username: string;
  groups: string[];
  usages: string[];
  expirationSeconds?: number;
  /** metadata.creationTimestamp; undefined when missing or malformed (then nothing waits). */
  created?: Date;
  /** Someone decided already: the condition type (Approved, Denied, Failed) or "issued" (status.certificate). */
  decided?: string;
  request: CsrRequest;
}

const DECIDED_CONDITIONS = ["Approved", "Denied", "Failed"];
const NOT_PARSED: CsrRequest = { ok: false, error: "not parsed (another signer)" };

/** Who decided already: the condition type (Approved, Denied, Failed) or "issued" (status.certificate). */
export function decidedState({ status }: CertificateSigningRequest): string | undefined {
  // Any condition of these types counts, whatever its status: never touching a decided CSR is the safe side.
  const condition = status?.conditions?.find((candidate) => DECIDED_CONDITIONS.includes(candidate.type));
  return condition?.type ?? (status?.certificate ? "issued" : undefined);
}

/** The facts of a CertificateSigningRequest: pure; the request is parsed for the kubelet-serving signer only. */
export function csrFacts(csr: CertificateSigningRequest): CsrFacts {
  const { metadata, spec } = csr;
  const created = metadata?.creationTimestamp === undefined ? undefined : new Date(metadata.creationTimestamp);
  return {
    name: metadata?.name ?? "",
    signerName: spec.signerName,
    username: spec.username ?? "",
    groups: spec.groups ?? [],
    usages: spec.usages ?? [],
    expirationSeconds: spec.expirationSeconds,
    created: created && !Number.isNaN(created.getTime()) ? created : undefined,
    decided: decidedState(csr),
    request: spec.signerName === KUBELET_SERVING_SIGNER ? parseCsrRequest(spec.request ?? "") : NOT_PARSED,
  };
}

export type CsrRule =
  | "signer"
  | "decided"
  | "identity"
  | "request"
  | "usages"
  | "cluster-ip"
  | "node-missing"
  | "ip-san"
  | "dns-san"
  | "ip-cidr"
  | "expiration"
  | "approved";

export type DenyRule = Exclude<CsrRule, "signer" | "decided" | "approved">;

/** The rules a CSR may wait on (rule 9). */
export type PendingRule = "node-missing" | "ip-san" | "dns-san";

export type CsrDecision =
  | { action: "ignore"; rule: "signer" | "decided"; reason: string }
  | { action: "approve"; rule: "approved"; reason: string }
  | { action: "deny"; rule: DenyRule; reason: string }
  /** Decide again when the Node changes, or at `until` at the latest. */
  | { action: "wait"; rule: PendingRule; reason: string; until: Date };

type Failure = { rule: DenyRule; reason: string };
type PendingFailure = Failure & { rule: PendingRule };

export function decideCSR(
  csr: CsrFacts,
  nodes: NodeIndex,
  config: CsrConfig,
  now: Date,
  cluster: ClusterAddresses,
): CsrDecision {
  if (csr.signerName !== KUBELET_SERVING_SIGNER)
    return { action: "ignore", rule: "signer", reason: `rule 1 (signer): ${csr.signerName} is not ours` };
  if (csr.decided) return { action: "ignore", rule: "decided", reason: `already ${csr.decided}` };

  const nodeName = csr.username.startsWith(NODE_USER_PREFIX) ? csr.username.slice(NODE_USER_PREFIX.length) : "";
  const identity = identityFailure(csr, nodeName);
  if (identity) return { action: "deny", ...identity };
  const { request } = csr;
  if (!request.ok) return { action: "deny", ...requestRefused(request.error) };
  const early = requestFailure(request, csr.username) ?? usagesFailure(csr.usages);
  if (early) return { action: "deny", ...early };
  // Rule 5b before the Node is looked at: no Node's claim, and no wait for one, can make these addresses its own.
  const clusterIp = clusterIpFailure(request.ipAddresses, cluster);
  if (clusterIp) return { action: "deny", ...clusterIp };

  const node = nodes.nodes.get(nodeName);
  const addressFailure: PendingFailure | undefined = node
    ? (ipSanFailure(request.ipAddresses, node, nodes) ?? dnsSanFailure(request.dnsNames, node, nodes, config))
    : { rule: "node-missing", reason: `rule 5 (node): node "${nodeName}" does not exist` };
  const laterFailure = cidrFailure(request.ipAddresses, config.ipAllowlist) ?? expirationFailure(csr, config);
  if (!addressFailure)
    return laterFailure
      ? { action: "deny", ...laterFailure }
      : { action: "approve", rule: "approved", reason: approval(request, nodeName) };
  // Rule 9 only holds off address failures: the others do not change when the Node does.
  if (laterFailure || (node && !node.uninitialized)) return { action: "deny", ...addressFailure };
  return pending(addressFailure, node, nodeName, csr.created, config, now);
}

/** Rule 9: wait for a missing or uninitialized Node, bounded from the CSR's creation. */
function pending(
  failure: PendingFailure,
  node: IndexedNode | undefined,
  nodeName: string,
  created: Date | undefined,
  config: CsrConfig,
  now: Date,
): CsrDecision {
  const waitingFor = `node "${nodeName}" to ${node ? "be initialized" : "appear"}`;
  const until = created && new Date(created.getTime() + config.pendingTimeoutMs);
  if (until && now < until)
    return { action: "wait", rule: failure.rule, until, reason: `waiting for ${waitingFor}: ${failure.reason}` };
  const waited = until ? `waited ${formatDuration(config.pendingTimeoutMs)}` : "no creation time to wait from";
  return { action: "deny", rule: failure.rule, reason: `${failure.reason} (${waited} for ${waitingFor})` };
}

function identityFailure({ username, groups }: CsrFacts, nodeName: string): Failure | undefined {
  const fail = (what: string): Failure => ({ rule: "identity", reason: `rule 2 (identity): ${what}` });
  if (!nodeName) return fail(`username "${username}" is not ${NODE_USER_PREFIX}<name>`);
  if (!groups.includes(NODES_GROUP)) return fail(`groups ${list(groups)} lack ${NODES_GROUP}`);
  return undefined;
}

const requestRefused = (what: string): Failure => ({ rule: "request", reason: `rule 3 (request): ${what}` });

function requestFailure(request: ParsedRequest, username: string): Failure | undefined {
  const { commonNames, organizations } = request;
  if (commonNames.length !== 1 || commonNames[0] !== username)
    return requestRefused(`subject CN ${list(commonNames)} is not [${username}]`);
  if (organizations.length !== 1 || organizations[0] !== NODES_GROUP)
    return requestRefused(`subject O ${list(organizations)} is not [${NODES_GROUP}]`);
  const [other] = request.otherSubjectAttributes;
  if (other) return requestRefused(`subject attribute ${other} not allowed (only CN and O)`);
  const [email] = request.emailAddresses;
  if (email !== undefined) return requestRefused(`email SAN ${email} not allowed`);
  const [otherSan] = request.otherSans;
  if (otherSan) return requestRefused(`${otherSan} SAN not allowed`);
  if (!request.dnsNames.length && !request.ipAddresses.length) return requestRefused("no DNS or IP SAN");
  return undefined;
}

function usagesFailure(usages: string[]): Failure | undefined {
  const extra = usages.find((usage) => !ALLOWED_USAGES.has(usage));
  if (extra !== undefined) return { rule: "usages", reason: `rule 4 (usages): "${extra}" not allowed` };
  const missing = REQUIRED_USAGES.find((usage) => !usages.includes(usage));
  if (missing) return { rule: "usages", reason: `rule 4 (usages): "${missing}" missing` };
  return undefined;
}

function clusterIpFailure(ips: string[], cluster: ClusterAddresses): Failure | undefined {
  for (const ip of ips) {
    const problem = clusterIpProblem(ip, cluster);
    if (problem) return { rule: "cluster-ip", reason: `rule 5b (cluster IPs): ${ip} ${problem}` };
  }
  return undefined;
}

function ipSanFailure(ips: string[], node: IndexedNode, nodes: NodeIndex): PendingFailure | undefined {
  const fail = (what: string): PendingFailure => ({ rule: "ip-san", reason: `rule 5 (IP SANs): ${what}` });
  for (const ip of ips) {
    if (!node.ips.has(ip)) return fail(`${ip} is not an address of node "${node.name}"`);
    const [other] = otherOwners(nodes.ipOwners, ip, node.name);
    if (other !== undefined) return fail(`${ip} is also an address of node "${other}"`);
  }
  return undefined;
}

function dnsSanFailure(
  names: string[],
  node: IndexedNode,
  nodes: NodeIndex,
  config: CsrConfig,
): PendingFailure | undefined {
  for (const requested of names) {
    const problem = dnsNameProblem(requested.toLowerCase(), node, nodes, config);
    if (problem) return { rule: "dns-san" as const, reason: `rule 6 (DNS SANs): "${requested}" ${problem}` };
  }
  return undefined;
}

/** Why the node may not hold this (lower-case) DNS name, or undefined. */
function dnsNameProblem(name: string, node: IndexedNode, nodes: NodeIndex, config: CsrConfig): string | undefined {
  if (name.includes("*")) return "is a wildcard";
  if (name.length > MAX_DNS_NAME_LENGTH) return `is longer than ${MAX_DNS_NAME_LENGTH} characters`;
  if (canonicalIp(name) !== undefined) return "is an IP address (IP SANs carry those)";
  if (isApiServerName(name, config.apiServerNames)) return "is a name of the API server";
  const [owner] = otherOwners(nodes.dnsOwners, name, node.name);
  if (owner !== undefined) return `is a name of node "${owner}"`;
  if (node.dnsNames.has(name)) return undefined;
  const pattern = config.extraDnsNames;
  if (!pattern) return `is not a name of node "${node.name}"`;
  if (!matchesPattern(pattern, node.name, name))
    return `is not a name of node "${node.name}" nor matches the extra DNS name pattern ${pattern.text}`;
  const other = otherPatternNode(pattern, node.name, name, nodes.nodes.keys());
  if (other === undefined) return undefined;
  return isEveryNode(other)
    ? "matches the extra DNS name pattern for every node"
    : `matches the extra DNS name pattern for node "${other}" too`;
}

function cidrFailure(ips: string[], allowlist: Cidr[]): Failure | undefined {
  if (!allowlist.length) return undefined;
  const outside = ips.find((ip) => !allowlist.some((cidr) => cidrContains(cidr, ip)));
  if (outside === undefined) return undefined;
  const cidrs = allowlist.map((cidr) => `${cidr.address}/${cidr.prefixLength}`).join(", ");
  return { rule: "ip-cidr", reason: `rule 7 (IP allowlist): ${outside} is in none of ${cidrs}` };
}

function expirationFailure({ expirationSeconds }: CsrFacts, { maxExpirationSeconds }: CsrConfig): Failure | undefined {
  if (expirationSeconds === undefined || expirationSeconds <= maxExpirationSeconds) return undefined;
  const what = `expirationSeconds ${expirationSeconds} exceeds the maximum ${maxExpirationSeconds}`;
  return { rule: "expiration", reason: `rule 8 (expiration): ${what}` };
}

function approval(request: ParsedRequest, nodeName: string): string {
  const sans = [
    request.dnsNames.length ? `DNS ${request.dnsNames.join(", ")}` : "",
    request.ipAddresses.length ? `IP ${request.ipAddresses.join(", ")}` : "",
  ].filter(Boolean);
  return `rules 1–8 hold for node "${nodeName}": ${sans.join("; ")}`;
}

const list = (items: string[]) => `[${items.join(", ")}]`;
