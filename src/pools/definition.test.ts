// The watches keep what the decisions read: the facts of a trimmed object are those of the whole one.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { keepTransform } from "../kube/fields.ts";
import type { KubeObject } from "../kube/resource.ts";
import type { Watch } from "../kube/sharedinformers.ts";
import { SERVICE_NAME_LABEL } from "../loadbalancer/endpoints.ts";
import { LB_FINALIZER, NODE_SELECTOR_ANNOTATION } from "../loadbalancer/service.ts";
import {
  ALLOCATED_FROM_ANNOTATION,
  L2_CLASS,
  l2ServiceFacts,
  SETTING_ANNOTATIONS,
  POOL_ANNOTATION,
  REQUESTED_IPS_ANNOTATION,
  SHARING_ANNOTATION,
} from "./allocate.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LEASE_PREFIX,
  GATEWAYS_ANNOTATION,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";
import { announcedFacts } from "./announcers.ts";
import { servicePools } from "./definition.ts";
import { AnnouncerLeases } from "./leases.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER, poolFacts } from "./pool.ts";
import type { ServiceCIDR } from "./watches.ts";

const watches = servicePools.watches({ claimClassless: false, bgp: false, bgpClaimClassless: false, leaseNamespace: "kube-system" });

const trim = <T extends KubeObject>(watch: Watch<T>, obj: T) => keepTransform(watch.keep)(obj) as T;

test("a Service keeps what l2ServiceFacts and announcedFacts read; other annotations and spec fields go", () => {
  const service: Service = {
    metadata: {
      namespace: "ns",
      name: "web",
      uid: "u1",
      resourceVersion: "9",
      creationTimestamp: "2026-01-01T00:00:00Z",
      deletionTimestamp: "2026-01-02T00:00:00Z",
      finalizers: [LB_FINALIZER],
      labels: { tier: "edge" },
      annotations: {
        [REQUESTED_IPS_ANNOTATION]: "198.51.100.1",
        [POOL_ANNOTATION]: "p",
        [SHARING_ANNOTATION]: "k",
        [ALLOCATED_FROM_ANNOTATION]: "p",
        [ANNOUNCER_ANNOTATION]: "n1",
        [NODE_SELECTOR_ANNOTATION]: "zone=a",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
      },
    },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: L2_CLASS,
      loadBalancerIP: "198.51.100.1",
      externalTrafficPolicy: "Local",
      ipFamilies: ["IPv4"],
      ports: [{ port: 80, protocol: "UDP", targetPort: 8080, nodePort: 30080 }],
      selector: { app: "web" },
    },
    status: { loadBalancer: { ingress: [{ ip: "198.51.100.1", ipMode: "VIP" }] } },
  };
  const trimmed = trim(watches.services, service);
  assert.deepEqual(l2ServiceFacts(trimmed), l2ServiceFacts(service));
  assert.deepEqual(announcedFacts(trimmed), announcedFacts(service));
  assert.equal(trimmed.metadata?.annotations?.["kubectl.kubernetes.io/last-applied-configuration"], undefined);
  assert.equal(trimmed.spec?.selector, undefined);
  // MetalLB's spellings of the three settings are kept too, each alone (ours unset) read as the setting.
  for (const spellings of Object.values(SETTING_ANNOTATIONS))
    for (const spelling of spellings.slice(1)) {
      const annotations = { ...service.metadata?.annotations, [spellings[0]]: undefined, [spelling]: "x" };
      const theirs = { ...service, metadata: { ...service.metadata, annotations } } as Service;
      const facts = l2ServiceFacts(trim(watches.services, theirs));
      assert.deepEqual(facts, l2ServiceFacts(theirs));
      assert.equal(Object.values(facts.readFrom ?? {}).join(), spelling);
    }
});

test("a pool keeps its spec, status, finalizers; a Node its addresses, pod CIDRs and what the node rules read", () => {
  const pool: LoadBalancerIPPool = {
    metadata: {
      name: "p",
      generation: 4,
      finalizers: [POOL_FINALIZER, "other"],
      deletionTimestamp: "2026-01-02T00:00:00Z",
      managedFields: [{ manager: "kubectl" }],
    },
    spec: { addresses: ["198.51.100.0/24"], namespaces: ["ns"], autoAssign: false, avoidBuggyIPs: true },
    status: { size: "256", used: "0", free: "256", conflicts: [] },
  };
  assert.deepEqual(poolFacts(trim(watches.pools, pool)), poolFacts(pool));
  const node: Node = {
    metadata: { name: "n1", labels: { a: "b" } },
    spec: { podCIDRs: ["10.244.1.0/24"], providerID: "x" },
    status: { addresses: [{ type: "InternalIP", address: "10.0.0.1" }], capacity: { cpu: "4" } },
  };
  const addresses = node.status?.addresses;
  assert.deepEqual(trim(watches.nodes, node), {
    metadata: { name: "n1", labels: { a: "b" } },
    spec: { podCIDRs: ["10.244.1.0/24"] },
    status: { addresses },
  });
});

test("an EndpointSlice keeps its endpoints' addresses (the API server's are excluded); a ServiceCIDR its cidrs", () => {
  const slice: EndpointSlice = {
    metadata: { namespace: "default", name: "kubernetes", labels: { [SERVICE_NAME_LABEL]: "kubernetes", x: "y" } },
    addressType: "IPv4",
    endpoints: [{ addresses: ["192.168.1.2"], conditions: { ready: true }, nodeName: "cp" }],
    ports: [{ port: 6443 }],
  };
  assert.deepEqual(trim(watches.endpointSlices, slice), {
    metadata: { namespace: "default", name: "kubernetes", labels: { [SERVICE_NAME_LABEL]: "kubernetes" } },
    endpoints: [{ addresses: ["192.168.1.2"], conditions: { ready: true }, nodeName: "cp" }],
  });
  const cidr: ServiceCIDR = { metadata: { name: "kubernetes" }, spec: { cidrs: ["10.96.0.0/12"] } };
  assert.deepEqual(trim(watches.serviceCidrs, { ...cidr, status: { conditions: [] } } as ServiceCIDR), cidr);
});

test("an announcer Lease keeps what AnnouncerLeases reads, and is watched by its label in its namespace", () => {
  const lease: Lease = {
    metadata: {
      name: `${ANNOUNCER_LEASE_PREFIX}n1`,
      namespace: "kube-system",
      annotations: { [SEGMENTS_ANNOTATION]: "192.0.2.0/24", [GATEWAYS_ANNOTATION]: "192.0.2.1", other: "x" },
      managedFields: [{ manager: "agent" }],
    },
    spec: { holderIdentity: "n1", renewTime: "2026-01-01T00:00:00.000000Z", leaseDurationSeconds: 5 },
  };
  const read = (each: Lease) => {
    const leases = new AnnouncerLeases();
    leases.seen(each, 0);
    return leases.announcers(1000);
  };
  assert.deepEqual(read(trim(watches.leases, lease)), read(lease));
  const network = (each: Lease) => {
    const leases = new AnnouncerLeases();
    leases.seen(each, 0);
    return leases.network();
  };
  const told = [{ node: "n1", segments: ["192.0.2.0/24"], gateways: ["192.0.2.1"] }];
  assert.deepEqual(network(trim(watches.leases, lease)), told);
  assert.equal(watches.leases.resource.namespace, "kube-system");
  assert.equal(watches.leases.labelSelector, "local-ccm.io/l2-announcer=true");
});
