// The watches keep what the decisions read: the facts of a trimmed object are those of the whole one, for objects
// as the API holds them (with fields nothing here reads, which the trim drops).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { keepTransform } from "../kube/fields.ts";
import type { KubeObject } from "../kube/resource.ts";
import type { Watch } from "../kube/sharedinformers.ts";
import { parseLabelSelector } from "../kube/labelselector.ts";
import { LB_FINALIZER, NODE_ADDRESS_CLASS, NODE_SELECTOR_ANNOTATION, serviceFacts } from "./decide.ts";
import { serviceLoadBalancer } from "./definition.ts";
import { endpointSliceFacts, SERVICE_NAME_LABEL } from "./endpoints.ts";
import { AUTOSCALER_TAINT, loadBalancerNode } from "./nodes.ts";

const watches = serviceLoadBalancer.watches(undefined as never);

function trim<T extends KubeObject>(watch: Watch<T>, obj: T): T {
  assert.ok(Array.isArray(watch.keep), "kept fields, not a transform: the watches are shared");
  return keepTransform<T>(watch.keep)(obj);
}

test("a Service keeps what serviceFacts reads; its spec's other fields go", () => {
  const service: Service = {
    metadata: {
      namespace: "ns",
      name: "web",
      uid: "u1",
      resourceVersion: "9",
      creationTimestamp: "2026-01-01T00:00:00Z",
      deletionTimestamp: "2026-01-02T00:00:00Z",
      finalizers: ["example.com/other", LB_FINALIZER],
      labels: { app: "web" },
      annotations: { [NODE_SELECTOR_ANNOTATION]: "zone=a", "kubectl.kubernetes.io/last-applied-configuration": "{}" },
      managedFields: [{ manager: "kubectl" }],
    },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: NODE_ADDRESS_CLASS,
      externalTrafficPolicy: "Local",
      healthCheckNodePort: 30123,
      ipFamilies: ["IPv6", "IPv4"],
      clusterIPs: ["10.96.0.10", "fd00::10"],
      selector: { app: "web" },
      ports: [{ name: "http", port: 80, protocol: "TCP", targetPort: 8080, nodePort: 30080 }],
    },
    status: { loadBalancer: { ingress: [{ ip: "192.0.2.1", ipMode: "VIP" }] } },
  };
  const trimmed = trim(watches.services, service);
  assert.deepEqual(serviceFacts(trimmed), serviceFacts(service));
  const kept = ["externalTrafficPolicy", "ipFamilies", "loadBalancerClass", "ports", "type"];
  assert.deepEqual(Object.keys(trimmed.spec ?? {}).sort(), kept);
});

test("a Node keeps what loadBalancerNode reads (labels whole, for any selector); heartbeats and images go", () => {
  const node: Node = {
    metadata: { name: "n1", uid: "u", resourceVersion: "3", labels: { zone: "a" }, annotations: { big: "x" } },
    spec: { taints: [{ key: AUTOSCALER_TAINT, effect: "NoSchedule", value: "1" }], unschedulable: true },
    status: {
      conditions: [
        { type: "MemoryPressure", status: "False" },
        { type: "Ready", status: "True", lastHeartbeatTime: "2026-01-01T00:00:00Z" },
      ],
      addresses: [
        { type: "Hostname", address: "n1" },
        { type: "ExternalIP", address: "192.0.2.1" },
        { type: "InternalIP", address: "10.0.0.1" },
      ],
      images: [{ names: ["registry.k8s.io/pause:3.10"], sizeBytes: 1 }],
    },
  };
  const trimmed = trim(watches.nodes, node);
  const selector = parseLabelSelector("zone=a");
  assert.deepEqual(loadBalancerNode(trimmed, selector), loadBalancerNode(node, selector));
  assert.deepEqual(trimmed.status?.conditions, [{ type: "Ready", status: "True" }]);
  assert.equal(trimmed.status?.images, undefined);
});

test("an EndpointSlice keeps its Service's name and each endpoint's node and readiness", () => {
  const slice: EndpointSlice = {
    metadata: { namespace: "ns", name: "web-abc", resourceVersion: "4", labels: { [SERVICE_NAME_LABEL]: "web" } },
    addressType: "IPv4",
    endpoints: [
      { addresses: ["10.244.0.1"], nodeName: "n1", conditions: { ready: false, serving: true }, zone: "a" },
      { addresses: ["10.244.0.2"], nodeName: "n2", conditions: {} },
    ],
    ports: [{ port: 8080 }],
  };
  const trimmed = trim(watches.endpointSlices, slice);
  assert.deepEqual(endpointSliceFacts(trimmed), endpointSliceFacts(slice));
  assert.deepEqual(endpointSliceFacts(trimmed).readyNodes, ["n2"]);
  assert.equal(trimmed.ports, undefined);
});
