// The address pool controller's Prometheus metrics, each named `prefix` + name (the program gives the prefix).
import type { Registry } from "../cli/metrics.ts";

export function createPoolsMetrics(registry: Registry, prefix: string) {
  return {
    syncs: registry.counter({
      name: `${prefix}syncs_total`,
      help:
        "Services of ours synced, by action (allocate, refuse, release) and rule (kept, allocated; bad-request, " +
        "no-pool, pool-exhausted, address-in-no-pool, address-held, port-overlap, sharing-namespace, sharing-class, " +
        "and the exclusions: gateway, network-address, broadcast-address, service-cidr, pod-cidr, api-server, node-address; " +
        "deleted, not-ours).",
      labels: ["action", "rule"],
    }),
    notices: registry.counter({
      name: `${prefix}notices_total`,
      help:
        "Warnings told to a Service that keeps what it holds (never moved while it exists), by rule: why a kept " +
        "address would no longer be given (pool-gone, pool-deleting, pool-changed, or an exclusion such as " +
        "gateway or node-address), or why what it asks is refused (a refusal rule).",
      labels: ["rule"],
    }),
    announcers: registry.counter({
      name: `${prefix}announcer_decisions_total`,
      help:
        "Changes of the decision of which node announces a Service's addresses, by action (announce, wait, " +
        "refuse) and rule (sticky, held, assigned, failover; released, release-ack; no-announcer).",
      labels: ["action", "rule"],
    }),
    leaseGuard: registry.gauge({
      name: `${prefix}lease_guard`,
      help:
        "1 for the rule of the announcer Lease guard, 0 for the others: fresh (expiries are acted on), stale-view " +
        "(no renewal seen lately), mass-expiry (too many Leases expired at once); paused, an expiry moves nothing.",
      labels: ["rule"],
    }),
    refusedSegments: registry.gauge({
      name: `${prefix}announcer_segments_refused`,
      help: "Segments announcer Leases name in which their node's Node object has no address: not announced there.",
    }),
    liveAnnouncers: registry.gauge({
      name: `${prefix}live_announcers`,
      help: "Announcer Leases live by this controller's observation (renewed within their duration).",
    }),
    writes: registry.counter({
      name: `${prefix}writes_total`,
      help:
        "Writes, by write (record: finalizer and allocated-from annotation, status, announcer: its annotation " +
        "and label, release, pool-status, pool-finalizer) and result (ok, conflict, gone, error).",
      labels: ["write", "result"],
    }),
    // From the pools' status (status.ts), per pool; written by the replica that leads, which a replica that stopped
    // leading keeps exposing as last seen: read them with `and on(pod) node_lifecycle_controller_leader == 1`.
    poolSize: registry.gauge({
      name: `${prefix}pool_addresses`,
      help: "Addresses of a pool (its status.size), by pool; a pool gone is no longer exposed. The leader's figures.",
      labels: ["pool"],
    }),
    poolUsed: registry.gauge({
      name: `${prefix}pool_addresses_in_use`,
      help: "Addresses of a pool that Services hold (its status.used), by pool. The leader's figures.",
      labels: ["pool"],
    }),
    poolFree: registry.gauge({
      name: `${prefix}pool_addresses_free`,
      help:
        "Addresses a pool can still hand out (its status.free: not held, not excluded; 0 while it is invalid or " +
        "being deleted), by pool. The leader's figures.",
      labels: ["pool"],
    }),
    allocateSeconds: registry.histogram({
      name: `${prefix}allocate_seconds`,
      help: "Time to allocate the addresses of every Service of ours, once per burst of changes.",
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    }),
  };
}

export type PoolsMetrics = ReturnType<typeof createPoolsMetrics>;
