// The bgppeer-status controller's Prometheus metrics, each named `prefix` + name (the program gives the prefix).
import type { Registry } from "../cli/metrics.ts";

export function createPeerStatusMetrics(registry: Registry, prefix: string) {
  return {
    sessions: registry.gauge({
      name: `${prefix}sessions`,
      help:
        "Sessions of the BGPPeers with the nodes each selects, summed over the peers, by state as the node's agent " +
        "reports it (Idle, Connect, Active, OpenSent, OpenConfirm, Established) or why it counts as none: " +
        "not-ready (the Node is not Ready), no-report, report-refused.",
      labels: ["state"],
    }),
    refusedReports: registry.gauge({
      name: `${prefix}reports_refused`,
      help:
        "Nodes whose local-ccm.io/bgp-sessions report is refused whole, by rule (report-too-long, report-malformed, " +
        "report-unknown-state).",
      labels: ["rule"],
    }),
    writes: registry.counter({
      name: `${prefix}writes_total`,
      help: "Writes of a BGPPeer's status (only when it differs), by result (ok, gone, error).",
      labels: ["result"],
    }),
  };
}

export type PeerStatusMetrics = ReturnType<typeof createPeerStatusMetrics>;
