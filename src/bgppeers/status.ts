// A BGPPeer's status, as a pure function of the peer and the Nodes' facts: the nodes its nodeSelector selects, how
// many of them are Ready and report the session Established, and up to NOT_ESTABLISHED_SHOWN of the others by
// name, each with its rule's line. A node that is not Ready counts as not established whatever it reported: its
// agent may be gone, and its last report with it.
import type { Node } from "kubernetes-types/core/v1.js";
import { labelSelectorFrom, matchesLabels } from "../kube/labelselector.ts";
import type { BGPPeer, BGPPeerStatus } from "./peer.ts";
import { parseSessionReport, SESSIONS_ANNOTATION, type SessionReport, type SessionState } from "./sessions.ts";

/** The CRD's maxItems of status.notEstablished; the counts are complete whatever the list leaves out. */
export const NOT_ESTABLISHED_SHOWN = 10;

/** What the status reads of a Node. */
export interface NodeSessionFacts {
  name: string;
  labels: Record<string, string>;
  ready: boolean;
  /** Undefined: the Node has no report. */
  report: SessionReport | undefined;
}

export function nodeSessionFacts(node: Node): NodeSessionFacts {
  const { metadata, status } = node;
  return {
    name: metadata?.name ?? "",
    labels: metadata?.labels ?? {},
    ready: status?.conditions?.some(({ type, status }) => type === "Ready" && status === "True") ?? false,
    report: parseSessionReport(metadata?.annotations?.[SESSIONS_ANNOTATION]),
  };
}

/** How a selected node counts: the state its agent reports, or why it has none (a metrics label, a log key). */
export type SessionRule = SessionState | "not-ready" | "no-report" | "report-refused";

export interface NodeSession {
  node: string;
  rule: SessionRule;
  /** "node: state" or "node: why none", as status.notEstablished shows it (undefined when established). */
  line: string | undefined;
}

export interface PeerStatusDecision {
  status: BGPPeerStatus;
  /** Each selected node's session, by node name. */
  sessions: NodeSession[];
}

/** The session of `peer` on one node. */
export function nodeSession(peer: string, node: NodeSessionFacts): NodeSession {
  const { name, ready, report } = node;
  const [rule, why]: [SessionRule, string | undefined] = !ready
    ? ["not-ready", "not Ready"]
    : report === undefined
      ? ["no-report", "no report"]
      : "rule" in report
        ? ["report-refused", `report refused (${report.rule})`]
        : sessionRule(report.sessions.get(peer));
  return { node: name, rule, line: why && `${name}: ${why}` };
}

/** A report that does not name the peer is no report of its session (an agent that has not read the peer yet). */
function sessionRule(state: SessionState | undefined): [SessionRule, string | undefined] {
  if (state === undefined) return ["no-report", "no report"];
  return [state, state === "Established" ? undefined : state];
}

export function decidePeerStatus(peer: BGPPeer, nodes: readonly NodeSessionFacts[]): PeerStatusDecision {
  const name = peer.metadata?.name ?? "";
  const { nodeSelector } = peer.spec ?? {};
  // A selector the CRD's schema would have refused selects nothing: no agent peers by it either (peerFacts).
  const selector = nodeSelector && labelSelectorFrom(nodeSelector, "nodeSelector");
  const selected = nodes.filter(
    (node) => selector === undefined || (typeof selector !== "string" && matchesLabels(selector, node.labels)),
  );
  const sessions = selected
    .map((node) => nodeSession(name, node))
    .sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  const lines = sessions.flatMap(({ line }) => line ?? []);
  return {
    status: {
      nodes: sessions.length,
      established: sessions.length - lines.length,
      notEstablished: lines.slice(0, NOT_ESTABLISHED_SHOWN),
    },
    sessions,
  };
}

/** Whether a written status says the same. */
export function sameStatus(current: Partial<BGPPeerStatus> | undefined, wanted: BGPPeerStatus): boolean {
  return (
    current?.nodes === wanted.nodes &&
    current.established === wanted.established &&
    JSON.stringify(current.notEstablished ?? []) === JSON.stringify(wanted.notEstablished)
  );
}
