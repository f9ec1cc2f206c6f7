// The agent's report of its BGP sessions on its own Node (the contract is src/bgppeers/sessions.ts): the
// annotation SESSIONS_ANNOTATION, each selected peer's state as RFC 4271 names it. Written through a keyed work
// queue (one key: this Node) only when the text changes, at most once per MIN_WRITE_INTERVAL_MS: a flapping session
// costs one write a second, whatever its transitions, and the last state is always the one written. A merge patch
// of that one annotation (the node-scope admission policy lets the agent write nothing else of its Node's metadata).
import type { Node } from "kubernetes-types/core/v1.js";
import { SESSIONS_ANNOTATION, type SessionState, sessionReportText } from "../../../bgppeers/sessions.ts";
import type { Logger } from "../../../cli/log.ts";
import type { Resource } from "../../../kube/resource.ts";
import { WorkQueue } from "../../../kube/workqueue.ts";
import type { Phase } from "./fsm.ts";

/** The shortest time between two writes of the report. */
export const MIN_WRITE_INTERVAL_MS = 1000;

/** Our session phases as RFC 4271 §8.2.2 names them: "connecting" is Connect (our TCP attempt under way). */
const RFC_STATE: Record<Phase, SessionState> = {
  idle: "Idle",
  connecting: "Connect",
  "open-sent": "OpenSent",
  "open-confirm": "OpenConfirm",
  established: "Established",
  stopped: "Idle",
};

/**
 * The report's text: each session's state by peer name, and Idle for a selected peer that has no session (no next
 * hop towards it, its password Secret unreadable: the agent selected it and refuses to peer, as Idle does).
 */
export function sessionReport(phases: ReadonlyMap<string, Phase>, withoutSession: readonly string[]): string {
  const states: Record<string, SessionState> = Object.fromEntries(withoutSession.map((name) => [name, "Idle"]));
  for (const [name, phase] of phases) states[name] = RFC_STATE[phase];
  return sessionReportText(states);
}

export interface SessionReportOptions {
  nodes: Pick<Resource<Node>, "patch">;
  node: string;
  /** The report on the Node as the agent's watch shows it now (undefined: none). */
  current: string | undefined;
  log: Logger;
  minIntervalMs?: number;
}

export interface SessionReportWriter {
  /** The report should say this from now on: written within minIntervalMs when it differs. */
  set(text: string): void;
  /**
   * Stops writing, and removes the report: one attempt, as it may run at SIGTERM; one that fails is logged, and the
   * next agent on the node that does not peer removes it (clearLeftovers). Until then the controller counts it only
   * while a BGPPeer selects the node.
   */
  remove(): Promise<void>;
}

export function sessionReportWriter(options: SessionReportOptions): SessionReportWriter {
  const { nodes, node, log, minIntervalMs = MIN_WRITE_INTERVAL_MS } = options;
  let written = options.current;
  let wanted = written;
  /** When the last write ended (0: none yet). */
  let lastWrite = 0;
  const write = async (text: string | undefined) => {
    await nodes.patch(node, "merge", { metadata: { annotations: { [SESSIONS_ANNOTATION]: text ?? null } } });
    written = text;
    lastWrite = Date.now();
    log.v(4)?.("BGP: session report written", { node, report: text ?? "(removed)" });
  };
  const queue = new WorkQueue({
    sync: async () => {
      if (wanted !== written) await write(wanted);
    },
    onError: (_, err, retryInMs) => log.error("BGP: writing the session report failed", { node, err, retryInMs }),
  });
  return {
    set(text) {
      wanted = text;
      if (wanted !== written) queue.addAfter(node, Math.max(0, lastWrite + minIntervalMs - Date.now()));
    },
    async remove() {
      await queue.stop();
      wanted = undefined;
      if (written === undefined) return;
      try {
        await write(undefined);
      } catch (err) {
        log.warn("BGP: removing the session report failed", { node, err });
      }
    },
  };
}
