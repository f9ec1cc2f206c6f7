// The BGPPeer resource (charts/local-ccm/crds/bgppeers.yaml) as the speaker is to read it once it joins the agent:
// the session's settings with the CRD's defaults filled in and its durations read as Go reads them (the CRD's CEL
// rules parse them with Go's time.ParseDuration; cli/duration.ts is tested against Go). A peer written where those
// rules do not run (an older CRD) is caught here: `problem` says why, and nobody is to peer with it.
import type { LabelSelector as KubeLabelSelector } from "kubernetes-types/meta/v1.js";
import { parseDurationNs } from "../cli/duration.ts";
import { type LabelSelector, labelSelectorFrom } from "../kube/labelselector.ts";
import type { KubeObject, ResourceRef } from "../kube/resource.ts";
import { ipFamily, ipProblem } from "../net/ip.ts";

export const BGP_PEER_RESOURCE: ResourceRef = { group: "local-ccm.io", version: "v1alpha1", plural: "bgppeers" };
/** What a created peer's body names (the apiserver needs it for a custom resource). */
export const BGP_PEER_TYPE = { apiVersion: "local-ccm.io/v1alpha1", kind: "BGPPeer" } as const;

export interface BGPPeer extends KubeObject {
  spec?: {
    peerAddress?: string;
    peerASN?: number;
    myASN?: number;
    peerPort?: number;
    holdTime?: string;
    keepaliveTime?: string;
    nodeSelector?: KubeLabelSelector;
    sourceAddress?: string;
    ebgpMultiHop?: boolean;
    /** A Secret in the agents' namespace. */
    passwordSecretRef?: { name: string; key?: string };
    bfd?: { minRx?: string; minTx?: string; multiplier?: number };
    gracefulRestart?: { restartTime?: string };
    /** With the agents' --bgp-advertise-pod-cidrs: whether this peer gets the nodes' pod CIDRs (default true). */
    advertisePodCIDRs?: boolean;
  };
  status?: BGPPeerStatus;
}

export interface BGPPeerStatus {
  /** Nodes the nodeSelector selects. */
  nodes: number;
  /** Of those, the Ready ones whose agent reports the session Established. */
  established: number;
  /** Up to NOT_ESTABLISHED_SHOWN "node: state" lines, by node name. */
  notEstablished: string[];
}

export interface PeerFacts {
  name: string;
  peerAddress: string;
  peerAsn: number;
  myAsn: number;
  peerPort: number;
  holdTimeSeconds: number;
  /** Undefined: a third of the negotiated hold time. */
  keepaliveTimeSeconds: number | undefined;
  /** Undefined: every node. */
  nodeSelector: LabelSelector | undefined;
  sourceAddress: string | undefined;
  ebgpMultiHop: boolean;
  password: { secret: string; key: string } | undefined;
  bfd: { minRxMs: number; minTxMs: number; multiplier: number } | undefined;
  gracefulRestart: { restartTimeSeconds: number } | undefined;
  /** The peer gets the nodes' pod CIDRs when the agents announce them (spec.advertisePodCIDRs, default true). */
  advertisePodCidrs: boolean;
  /** Why nobody peers with it; undefined when it is sound. */
  problem: string | undefined;
}

const NS_PER_MS = 1_000_000n;
const NS_PER_S = 1_000_000_000n;
const MAX_ASN = 4_294_967_295;

/** A duration field in whole units of `unitNs` within [min, max] (or exactly 0 when `zero`), or a problem. */
function durationIn(
  field: string,
  text: string,
  unitNs: bigint,
  [min, max]: [number, number],
  zero = false,
): number | string {
  const ns = parseDurationNs(text);
  const unit = unitNs === NS_PER_S ? "s" : "ms";
  if (ns === undefined || ns < 0n) return `${field}: ${JSON.stringify(text)} is not a duration as Go writes it`;
  // As the CRD's rule reads it (CEL's getMilliseconds()): a rest below 1ms is dropped, not refused.
  if ((ns / NS_PER_MS) % (unitNs / NS_PER_MS) !== 0n)
    return `${field}: ${text} is not a whole number of ${unit === "s" ? "seconds" : "ms"}`;
  const value = Number(ns / unitNs);
  if ((zero && ns === 0n) || (ns >= BigInt(min) * unitNs && ns <= BigInt(max) * unitNs)) return value;
  return `${field}: ${text} is not ${zero ? "0 or " : ""}${min}${unit} to ${max}${unit}`;
}

const asnProblem = (field: string, value: number | undefined) =>
  value !== undefined && Number.isInteger(value) && value >= 1 && value <= MAX_ASN
    ? undefined
    : `${field}: ${String(value)} is not an AS number (1 to ${MAX_ASN})`;

/** The peer's settings with the CRD's defaults, checked as its rules check them. */
export function peerFacts(peer: BGPPeer): PeerFacts {
  const spec = peer.spec ?? {};
  const problems: string[] = [];
  const take = <T>(value: T | string): T | undefined => {
    if (typeof value !== "string") return value;
    problems.push(value);
    return undefined;
  };
  const { peerAddress = "", peerASN, myASN, peerPort = 179, holdTime = "90s", keepaliveTime } = spec;
  const addressProblem = ipProblem(peerAddress);
  if (addressProblem) problems.push(`peerAddress: ${addressProblem}`);
  for (const problem of [asnProblem("peerASN", peerASN), asnProblem("myASN", myASN)])
    if (problem) problems.push(problem);
  if (!Number.isInteger(peerPort) || peerPort < 1 || peerPort > 65_535)
    problems.push(`peerPort: ${peerPort} is not a port`);
  const holdTimeSeconds = take(durationIn("holdTime", holdTime, NS_PER_S, [3, 65_535], true));
  const keepaliveTimeSeconds =
    keepaliveTime === undefined ? undefined : take(durationIn("keepaliveTime", keepaliveTime, NS_PER_S, [0, 65_535]));
  if (holdTimeSeconds !== undefined && keepaliveTimeSeconds !== undefined)
    if (holdTimeSeconds === 0 ? keepaliveTimeSeconds !== 0 : keepaliveTimeSeconds >= holdTimeSeconds)
      problems.push(`keepaliveTime: ${keepaliveTime} is not below holdTime ${holdTime} (0 when holdTime is 0)`);
  const selector = spec.nodeSelector ? take(labelSelectorFrom(spec.nodeSelector, "nodeSelector")) : undefined;
  const { sourceAddress } = spec;
  if (sourceAddress !== undefined) {
    const problem = ipProblem(sourceAddress);
    if (problem) problems.push(`sourceAddress: ${problem}`);
    else if (!addressProblem && ipFamily(sourceAddress) !== ipFamily(peerAddress))
      problems.push(`sourceAddress: ${sourceAddress} is not of the family of peerAddress ${peerAddress}`);
  }
  if (spec.advertisePodCIDRs !== undefined && typeof spec.advertisePodCIDRs !== "boolean")
    problems.push(`advertisePodCIDRs: ${JSON.stringify(spec.advertisePodCIDRs)} is not true or false`);
  const { bfd, gracefulRestart, passwordSecretRef } = spec;
  const interval = (field: string, text: string) => take(durationIn(field, text, NS_PER_MS, [10, 60_000]));
  const bfdFacts = bfd && {
    minRxMs: interval("bfd.minRx", bfd.minRx ?? "300ms"),
    minTxMs: interval("bfd.minTx", bfd.minTx ?? "300ms"),
    multiplier: bfd.multiplier ?? 3,
  };
  if (bfdFacts && !(Number.isInteger(bfdFacts.multiplier) && bfdFacts.multiplier >= 1 && bfdFacts.multiplier <= 255))
    problems.push(`bfd.multiplier: ${bfdFacts.multiplier} is not 1 to 255`);
  const restartTime = gracefulRestart?.restartTime ?? "120s";
  const restartTimeSeconds =
    gracefulRestart && take(durationIn("gracefulRestart.restartTime", restartTime, NS_PER_S, [1, 4095]));
  return {
    name: peer.metadata?.name ?? "",
    peerAddress,
    peerAsn: peerASN ?? 0,
    myAsn: myASN ?? 0,
    peerPort,
    holdTimeSeconds: holdTimeSeconds ?? 0,
    keepaliveTimeSeconds,
    nodeSelector: selector,
    sourceAddress,
    ebgpMultiHop: spec.ebgpMultiHop ?? false,
    password: passwordSecretRef && { secret: passwordSecretRef.name, key: passwordSecretRef.key ?? "password" },
    bfd: bfdFacts && {
      minRxMs: bfdFacts.minRxMs ?? 0,
      minTxMs: bfdFacts.minTxMs ?? 0,
      multiplier: bfdFacts.multiplier,
    },
    gracefulRestart: gracefulRestart && { restartTimeSeconds: restartTimeSeconds ?? 0 },
    advertisePodCidrs: spec.advertisePodCIDRs ?? true,
    problem: problems.length ? problems.join("; ") : undefined,
  };
}
