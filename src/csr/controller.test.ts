// The approver's loop with fake caches (no API): it decides nothing before the caches of the cluster's addresses
// have synced, and a change of those addresses decides again a CSR that waits for its Node, as a Node change does.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { createLogger } from "../cli/log.ts";
import { Registry } from "../cli/metrics.ts";
import { UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { ServiceCidr } from "./cluster.ts";
import { type ClusterCaches, CsrController, type ListCache } from "./controller.ts";
import { csrObject, opensslCsr } from "./csr.fixture.ts";
import { createCsrApproverMetrics } from "./metrics.ts";

class FakeCache<T> implements ListCache<T> {
  items: T[] = [];
  synced = false;
  list = () => this.items;
  hasSynced = () => this.synced;
}

function world() {
  const csrs = new Map<string, CertificateSigningRequest>();
  const cluster = {
    serviceCidrs: new FakeCache<ServiceCidr>(),
    services: new FakeCache<Service>(),
    endpointSlices: new FakeCache<EndpointSlice>(),
  } satisfies ClusterCaches;
  const written: { csr: string; type: string; message: string }[] = [];
  const controller = new CsrController({
    config: { apiServerNames: [], ipAllowlist: [], maxExpirationSeconds: 86_400, pendingTimeoutMs: 600_000 },
    dryRun: false,
    cache: { get: (name) => csrs.get(name), list: () => [...csrs.values()] },
    cluster,
    csrs: {
      update: async (csr) => {
        const condition = csr.status?.conditions?.at(-1);
        written.push({ csr: csr.metadata?.name ?? "", type: condition?.type ?? "", message: condition?.message ?? "" });
        return csr;
      },
    },
    isLeader: () => true,
    events: { record: () => {} },
    log: createLogger({ verbosity: 0, format: "text", write: () => {} }),
    metrics: createCsrApproverMetrics(new Registry(), "csr_"),
  });
  const addCsr = (name: string, node: string, sans: string) => {
    const object = csrObject(opensslCsr({ subject: `/O=system:nodes/CN=system:node:${node}`, sans }), {
      username: `system:node:${node}`,
    }, new Date().toISOString());
    object.metadata = { ...object.metadata, name, resourceVersion: "1" };
    csrs.set(name, object);
    controller.csrHandlers.onAdd?.(object);
  };
  const addNode = (name: string, ips: string[], uninitialized = false) => {
    const node: Node = {
      metadata: { name },
      spec: { taints: uninitialized ? [{ key: UNINITIALIZED_TAINT, effect: "NoSchedule" }] : [] },
      status: { addresses: ips.map((address) => ({ type: "InternalIP", address })) },
    };
    controller.nodeHandlers.onAdd?.(node);
  };
  const syncCluster = (cidrs: string[]) => {
    cluster.serviceCidrs.items = [{ metadata: { name: "kubernetes" }, spec: { cidrs } }];
    for (const cache of Object.values(cluster)) cache.synced = true;
    controller.clusterHandlers.onAdd?.(cluster.serviceCidrs.items[0] ?? {});
  };
  return { controller, cluster, written, addCsr, addNode, syncCluster };
}

/** A few turns of the event loop: enough for the loop's setImmediate pump and the fake write. */
const turns = async () => {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
};

test("nothing is decided before the cluster's addresses have synced; then the held CSRs are", async () => {
  const { controller, written, addCsr, addNode, syncCluster } = world();
  addNode("n1", ["198.18.0.1", "10.96.0.1"]);
  addCsr("honest", "n1", "DNS:n1,IP:198.18.0.1");
  addCsr("service-ip", "n1", "DNS:n1,IP:10.96.0.1");
  controller.start();
  await turns();
  assert.equal(written.length, 0, "no approval and no denial while the cluster caches are unsynced");
  syncCluster(["10.96.0.0/12"]);
  await waitFor("both decided", () => written.length === 2);
  assert.deepEqual(
    written.sort((a, b) => a.csr.localeCompare(b.csr)),
    [
      { csr: "honest", type: "Approved", message: 'rules 1–8 hold for node "n1": DNS n1; IP 198.18.0.1' },
      {
        csr: "service-ip",
        type: "Denied",
        message: 'rule 5b (cluster IPs): 10.96.0.1 is in the Service CIDR 10.96.0.0/12 (ServiceCIDR "kubernetes")',
      },
    ],
  );
  await controller.stop();
});

test("a CSR waiting for its Node is decided again when the cluster's addresses change", async () => {
  const { controller, cluster, written, addCsr, addNode, syncCluster } = world();
  syncCluster(["10.96.0.0/12"]);
  addNode("late", [], true);
  controller.start();
  addCsr("waits", "late", "DNS:late,IP:10.200.0.5");
  await turns();
  assert.equal(written.length, 0, "waits for its uninitialized Node (rule 9)");
  // A second Service CIDR appears: its address can never become the node's, so the CSR is denied now.
  cluster.serviceCidrs.items.push({ metadata: { name: "extra" }, spec: { cidrs: ["10.200.0.0/24"] } });
  controller.clusterHandlers.onAdd?.({});
  await waitFor("the denial", () => written.length === 1);
  assert.deepEqual(written, [
    {
      csr: "waits",
      type: "Denied",
      message: 'rule 5b (cluster IPs): 10.200.0.5 is in the Service CIDR 10.200.0.0/24 (ServiceCIDR "extra")',
    },
  ]);
  await controller.stop();
});
