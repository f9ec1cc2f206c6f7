// The service controller's Prometheus metrics, each named `prefix` + name (the program gives the prefix).
import type { Registry } from "../cli/metrics.ts";

export function createServiceMetrics(registry: Registry, prefix: string) {
  return {
    syncs: registry.counter({
      name: `${prefix}syncs_total`,
      help:
        "Services of ours synced, by action (ensure, refuse, release) and rule (ensured, no-nodes; reserved-port, " +
        "node-selector, port-conflict, node-port, host-port, host-network-port, node-port-range; deleted, " +
        "not-load-balancer, classless-off).",
      labels: ["action", "rule"],
    }),
    writes: registry.counter({
      name: `${prefix}writes_total`,
      help:
        "Writes to Services, by write (finalizer-add, status, finalizer-remove) and result (ok, conflict, gone, " +
        "error).",
      labels: ["write", "result"],
    }),
    ingressSeconds: registry.histogram({
      name: `${prefix}ingress_write_seconds`,
      help:
        "Time from the change that queued a Service (its creation, a Node's, an EndpointSlice's) to its new " +
        "status.loadBalancer.ingress being written.",
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    }),
    planSeconds: registry.histogram({
      name: `${prefix}plan_seconds`,
      help: "Time to plan the ingress of every Service of ours, once per burst of changes.",
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    }),
    eligibleNodes: registry.gauge({
      name: `${prefix}eligible_nodes`,
      help:
        "Nodes that may carry LoadBalancer traffic (Ready, initialized, not excluded, matching --lb-node-selector).",
    }),
    unknownNodesHeld: registry.gauge({
      name: `${prefix}unknown_nodes_held`,
      help:
        "Nodes whose Ready is Unknown kept in the ingress, by rule: grace (for --lb-unknown-grace, to tell one " +
        "node from many), mass-unknown (at least --lb-unknown-threshold of the Nodes Unknown at once).",
      labels: ["rule"],
    }),
  };
}

export type ServiceMetrics = ReturnType<typeof createServiceMetrics>;
