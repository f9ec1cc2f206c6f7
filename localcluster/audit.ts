// The apiserver's audit log (startControlPlane({ audit: true }), one JSON line per request at the
// Metadata level), read by benchmarks and tests: who made which request, and when.
import { readFile } from "node:fs/promises";

interface AuditEntry {
  auditID: string;
  verb: string;
  userAgent: string;
  user: { username: string };
  requestReceivedTimestamp: string;
  objectRef?: { resource?: string; subresource?: string };
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

/** The matching requests as "verb resource[/subresource]" → count, each request once. */
export async function auditedRequests(logPath: string, query: AuditQuery): Promise<Map<string, number>> {
  const log = await readFile(logPath, "utf8");
  const needle = query.user ?? query.userAgentSuffix ?? "";
  const seen = new Set<string>();
  const counts = new Map<string, number>();
  for (const line of log.split("\n")) {
    if (!line || !line.includes(needle)) continue; // most lines are other clients': skip them unparsed
    const entry = JSON.parse(line) as AuditEntry;
    if (query.user && entry.user.username !== query.user) continue;
    if (query.userAgentSuffix && !entry.userAgent.endsWith(query.userAgentSuffix)) continue;
    if (seen.has(entry.auditID)) continue;
    const received = new Date(entry.requestReceivedTimestamp);
    if ((query.since && received < query.since) || (query.until && received >= query.until)) continue;
    seen.add(entry.auditID); // a watch has two entries (ResponseStarted, ResponseComplete)
    const { resource = "?", subresource } = entry.objectRef ?? {};
    const key = `${entry.verb} ${subresource ? `${resource}/${subresource}` : resource}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}
