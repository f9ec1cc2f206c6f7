// local-ccm's Prometheus metrics (served on /metrics by the health server).
import { createProgramMetrics, type Registry } from "../cli/metrics.ts";
import { PROGRAM } from "./flags.ts";

/** What the agent's reconcile loop counts (agent.ts). */
export function createAgentMetrics(registry: Registry) {
  return {
    reconciles: registry.counter({
      name: "local_ccm_reconciles_total",
      help: "Reconciles by result: ok, refused (the Node is not this host, nothing written), error.",
      labels: ["result"],
    }),
    errors: registry.counter({
      name: "local_ccm_reconcile_errors_total",
      help: "Failed reconciles by reason.",
      labels: ["reason"],
    }),
    writes: registry.counter({
      name: "local_ccm_node_writes_total",
      help: "Writes to the Node by what was written.",
      labels: ["what"],
    }),
    conflicts: registry.counter({
      name: "local_ccm_write_conflicts_total",
      help: "Writes refused because the Node changed meanwhile.",
    }),
    detectionProblems: registry.counter({
      name: "local_ccm_detection_problems_total",
      help: "Detection items that yielded no address, by address type and reason.",
      labels: ["type", "reason"],
    }),
    detectionSeconds: registry.histogram({
      name: "local_ccm_detection_duration_seconds",
      help: "Time to detect the node's addresses over netlink.",
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5],
    }),
    metadataLookups: registry.counter({
      name: "local_ccm_metadata_lookups_total",
      help: "Instance metadata lookups by provider (or the mode, when none was found) and result: found, skipped, unavailable.",
      labels: ["provider", "result"],
    }),
    metadataFields: registry.counter({
      name: "local_ccm_metadata_fields_total",
      help: "Metadata fields written to the Node, by field (providerID, region, zone, instanceType) and source (instance-metadata, template, rule).",
      labels: ["field", "source"],
    }),
    metadataFindings: registry.counter({
      name: "local_ccm_metadata_findings_total",
      help:
        "Metadata not written, by reason: ProviderIDMismatch, MetadataLabelKept, MetadataLabelNotAdded, MetadataRuleUnmatched, " +
        "MetadataUnavailable, MetadataSkipped, NodeInitLabelKept, NodeInitTaintKept, NodeInitValueInvalid.",
      labels: ["reason"],
    }),
    nodeInitWrites: registry.counter({
      name: "local_ccm_node_init_total",
      help: "Labels and taints the node init rules (--node-label-rules, --node-taint-rules) added to the Node, by kind: label, taint.",
      labels: ["kind"],
    }),
    uninitialized: registry.gauge({
      name: "local_ccm_node_uninitialized",
      help:
        "1 while the agent keeps its Node's node.cloudprovider.kubernetes.io/uninitialized taint (no InternalIP or " +
        "no metadata yet; its TaintKept or MetadataUnavailable Event says why), else 0.",
    }),
    lastSuccess: registry.gauge({
      name: "local_ccm_last_success_timestamp_seconds",
      help: "When the last reconcile succeeded (Unix time).",
    }),
  };
}

export type AgentMetrics = ReturnType<typeof createAgentMetrics>;

/** What the L2 announcer counts (announcer/arp-ndp/method.ts); all stay 0 without --lb-l2-announce. */
export function createAnnouncerMetrics(registry: Registry) {
  return {
    announced: registry.gauge({
      name: "local_ccm_l2_announced_addresses",
      help: "LoadBalancer addresses this node announces now (ARP, NDP).",
    }),
    skipped: registry.gauge({
      name: "local_ccm_l2_skipped_addresses",
      help:
        "Addresses (or Services) assigned to this node that it does not announce, by rule: other-announcer, " +
        "not-load-balancer, deleting, not-an-ip, host-address, no-segment, yielded, catching-up.",
      labels: ["rule"],
    }),
    holding: registry.gauge({
      name: "local_ccm_l2_links",
      help:
        "Links with addresses assigned, by the rule that says whether they are announced there: not-renewed, " +
        "lease-valid, peers-reachable (the API out of reach, a peer answered lately), cut-off (neither: withdrawn).",
      labels: ["rule"],
    }),
    selection: registry.gauge({
      name: "local_ccm_l2_node_selection",
      help:
        "1 for the rule that decides whether this node announces (--lb-l2-node-selector), 0 for the others: " +
        "every-node, node-unknown, selected, not-selected.",
      labels: ["rule"],
    }),
    conflicts: registry.counter({
      name: "local_ccm_l2_address_conflicts_total",
      help:
        "Another host's claims of an address this node probed for (phase probing: refused, not announced) or " +
        "announces (phase announced: reported, not fought over), by phase and rule: arp-sender, arp-probe, " +
        "advertisement, duplicate-detection.",
      labels: ["phase", "rule"],
    }),
    renewals: registry.counter({
      name: "local_ccm_l2_lease_renewals_total",
      help: "Renewals of this node's announcer Lease by result: ok, error.",
      labels: ["result"],
    }),
  };
}

export type AnnouncerMetrics = ReturnType<typeof createAnnouncerMetrics>;

/** What the BGP speaker counts (announcer/bgp/); all stay 0 without --bgp-speaker. */
export function createBgpMetrics(registry: Registry) {
  return {
    selection: registry.gauge({
      name: "local_ccm_bgp_node_selection",
      help:
        "1 for the rule that decides whether this node speaks BGP (a BGPPeer's nodeSelector), 0 for the others: " +
        "node-unknown, peer-selects, no-peer-selects.",
      labels: ["rule"],
    }),
    routes: registry.gauge({
      name: "local_ccm_bgp_routes",
      help: "Routes this node's speaker asks each peer (by BGPPeer name) to have now; 0 once the peer is gone.",
      labels: ["peer"],
    }),
    sessions: registry.gauge({
      name: "local_ccm_bgp_sessions",
      help: "BGP sessions of this node by state: idle, connecting, open-sent, open-confirm, established, stopped.",
      labels: ["state"],
    }),
  };
}

export type BgpMetrics = ReturnType<typeof createBgpMetrics>;

/** Everything local-ccm serves: the program's part, then the agent's (run.ts and docs/reference.md use this). */
export function createMetrics() {
  const program = createProgramMetrics(PROGRAM);
  return {
    ...program,
    agent: createAgentMetrics(program.registry),
    announcer: createAnnouncerMetrics(program.registry),
    bgp: createBgpMetrics(program.registry),
  };
}
