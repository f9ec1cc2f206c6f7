// What the agent benchmarks (bench:agent, bench:churn) share: the bundled agent run as the DaemonSet runs it,
// a default route whose source address flips, and the agent's requests as the audit log has them.
import path from "node:path";
import { bundleProgram } from "../localcluster/bundle.ts";
import { type AuditEvent, auditEvents } from "../localcluster/audit.ts";
import type { NodeHost } from "../test/agent/harness.ts";
import { shippedCommand } from "../test/deploy/shipped.ts";

/** Node's own flags: as the DaemonSet gives them, unless BENCH_NODE_ARGS says otherwise ("" for none). */
export const NODE_ARGS = (process.env.BENCH_NODE_ARGS ?? shippedCommand("local-ccm").nodeArgs.join(" "))
  .split(" ")
  .filter(Boolean);
/** This Node, unless BENCH_RUNTIME names another runtime's executable. */
export const RUNTIME = process.env.BENCH_RUNTIME ?? process.execPath;
/**
 * Where the bundle goes (BENCH_DIR, default .cache/bench). The bundle loads the native addons from the
 * node_modules above its real path: with .cache shared between checkouts (a symlink), point BENCH_DIR into this
 * checkout to measure its own addons.
 */
export const BENCH_DIR = process.env.BENCH_DIR ?? path.join(import.meta.dirname, "../.cache/bench");

/** The agent's bundle, as the image holds it. */
export const bundledAgent = () => bundleProgram("local-ccm", BENCH_DIR);

/** The command line the agent runs under, for the benchmark's heading. */
export function agentCommand(): string {
  const runtime = RUNTIME === process.execPath ? `node ${process.version}` : RUNTIME;
  return [runtime, ...NODE_ARGS].join(" ");
}

/**
 * Gives the node `alternate` beside its external address and returns a switch of the default route's source
 * between the two (even: alternate, odd: the external address): to the agent, the node's ExternalIP changed.
 */
export async function defaultSourceSwitch(node: NodeHost, alternate: string): Promise<(i: number) => Promise<string>> {
  const route = await node.host.ip("-o", "-4", "route", "get", "8.8.8.8");
  const device = /dev (\S+)/.exec(route)?.[1];
  const gateway = /via (\S+)/.exec(route)?.[1];
  if (!device || !gateway) throw new Error(`no default route in the node's namespace: ${route}`);
  await node.host.ip("address", "add", `${alternate}/24`, "dev", device);
  return async (i) => {
    const source = i % 2 === 0 ? alternate : node.external.v4;
    await node.host.ip("route", "replace", "default", "via", gateway, "src", source);
    return source;
  };
}

/** The agent's requests received in [since, until), each once. */
export const agentRequests = (auditLogPath: string, since: Date, until: Date): Promise<AuditEvent[]> =>
  auditEvents(auditLogPath, { userAgentSuffix: "(local-ccm)", since, until });

export const isWrite = (event: AuditEvent) => !["get", "list", "watch"].includes(event.verb);
