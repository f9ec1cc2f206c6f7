// The apiserver's audit log (startControlPlane({ audit: true }), one JSON line per request at the
// Metadata level), read by benchmarks and tests: who made which request, and when.
import { readFile } from "node:fs/promises";

/** One request as the audit log has it (the fields the tests and benchmarks read). */
export interface AuditEvent {
  auditID: string;
  verb: string;
  userAgent?: string;
  /** A Pod-bound token's pod and node are in `extra` (see tokenPod). */
  user: { username: string; extra?: Record<string, string[]> };
  objectRef?: { resource?: string; subresource?: string; name?: string; namespace?: string };
  responseStatus?: { code: number };
  requestReceivedTimestamp: string;
  stageTimestamp: string;
}

export interface AuditQuery {
  /** Requests of this user (e.g. system:serviceaccount:kube-system:local-ccm). */
  user?: string;
  /** Requests whose user agent ends with this (e.g. "(node-lifecycle-controller)"). */
  userAgentSuffix?: string;
  /** Received in [since, until). */
  since?: Date;
  until?: Date;
}

/** The matching requests, each once (a watch has two entries: ResponseStarted, ResponseComplete). */
export async function auditEvents(logPath: string, query: AuditQuery = {}): Promise<AuditEvent[]> {
  const log = await readFile(logPath, "utf8");
  const needle = query.user ?? query.userAgentSuffix ?? "";
  const seen = new Set<string>();
  const events: AuditEvent[] = [];
  for (const line of log.split("\n")) {
    if (!line || !line.includes(needle)) continue; // most lines are other clients': skip them unparsed
    const event = JSON.parse(line) as AuditEvent;
    if (query.user && event.user.username !== query.user) continue;
    if (query.userAgentSuffix && !event.userAgent?.endsWith(query.userAgentSuffix)) continue;
    if (seen.has(event.auditID)) continue;
    const received = new Date(event.requestReceivedTimestamp);
    if ((query.since && received < query.since) || (query.until && received >= query.until)) continue;
    seen.add(event.auditID);
    events.push(event);
  }
  return events;
}

/** "verb resource[/subresource]", e.g. "update nodes/status". */
export function requestKey(event: AuditEvent): string {
  const { resource = "?", subresource } = event.objectRef ?? {};
  return `${event.verb} ${subresource ? `${resource}/${subresource}` : resource}`;
}

/** The matching requests as "verb resource[/subresource]" → count. */
export async function auditedRequests(logPath: string, query: AuditQuery): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const event of await auditEvents(logPath, query)) {
    const key = requestKey(event);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

/** The Pod and Node a Pod-bound token names, as the apiserver saw them. */
export const tokenPod = (event: AuditEvent) => ({
  pod: event.user.extra?.["authentication.kubernetes.io/pod-name"]?.[0],
  node: event.user.extra?.["authentication.kubernetes.io/node-name"]?.[0],
});
