// The agents' per-node report of their BGP sessions, the contract between the speaker (src/agent/announcer/bgp/)
// and the bgppeer-status controller (status.ts): each agent keeps, on its own Node, the annotation
// SESSIONS_ANNOTATION, a JSON object from BGPPeer name to the session's state as RFC 4271 names it, rewritten only
// when a state changes. On the Node because the agents already patch their own Node (no new object per node),
// the controller program already watches Nodes, and `kubectl describe node` is then the per-node view.
// A report is taken whole or refused whole, with a rule: half of a forged or broken report is no truer than all.

/** RFC 4271 section 8.2.2's states, in the order a session goes through them. */
export const SESSION_STATES = ["Idle", "Connect", "Active", "OpenSent", "OpenConfirm", "Established"] as const;
export type SessionState = (typeof SESSION_STATES)[number];

export const SESSIONS_ANNOTATION = "local-ccm.io/bgp-sessions";

/**
 * The longest report taken, in UTF-16 code units of the annotation's value (the API's own limit is 256 KiB for
 * all of a Node's annotations): some 200 peers of 60-character names. A longer one is refused, not cut.
 */
export const MAX_REPORT_LENGTH = 16_384;

/** What a Node's report says: each peer's state, or why it is refused as a whole. */
export type SessionReport =
  | { sessions: ReadonlyMap<string, SessionState> }
  | { rule: "report-too-long" | "report-malformed" | "report-unknown-state"; reason: string };

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const STATES: ReadonlySet<string> = new Set(SESSION_STATES);

/** A Node's report as its annotation's value says it; undefined when the Node has none. */
export function parseSessionReport(text: string | undefined): SessionReport | undefined {
  if (text === undefined) return undefined;
  if (text.length > MAX_REPORT_LENGTH)
    return { rule: "report-too-long", reason: `${text.length} characters, more than ${MAX_REPORT_LENGTH}` };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { rule: "report-malformed", reason: "not JSON" };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return { rule: "report-malformed", reason: "not a JSON object of BGPPeer names" };
  const sessions = new Map<string, SessionState>();
  for (const [peer, state] of Object.entries(value)) {
    if (peer.length > 253 || !DNS_SUBDOMAIN.test(peer))
      return { rule: "report-malformed", reason: `${JSON.stringify(peer.slice(0, 64))} is not a BGPPeer name` };
    if (typeof state !== "string" || !STATES.has(state))
      return {
        rule: "report-unknown-state",
        reason: `peer ${peer}: ${JSON.stringify(state).slice(0, 64)} is not one of ${SESSION_STATES.join(", ")}`,
      };
    sessions.set(peer, state as SessionState);
  }
  return { sessions };
}

/** The annotation's value for these sessions, by peer name: the same sessions always give the same text. */
export function sessionReportText(sessions: Readonly<Record<string, SessionState>>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(sessions).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))));
}
