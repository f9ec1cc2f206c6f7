// The watches keep what the decisions read: the facts of a trimmed object are those of the whole one, for objects
// as the API holds them (with fields nothing here reads, which the trim drops).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node, Pod, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { keepTransform } from "../kube/fields.ts";
import type { KubeObject } from "../kube/resource.ts";
import type { Watch } from "../kube/sharedinformers.ts";
import { parseLabelSelector } from "../kube/labelselector.ts";
import { endpointSliceFacts, SERVICE_NAME_LABEL } from "../loadbalancer/endpoints.ts";
import { AUTOSCALER_TAINT, loadBalancerNode } from "../loadbalancer/nodes.ts";
import { LB_FINALIZER, NODE_SELECTOR_ANNOTATION } from "../loadbalancer/service.ts";
import { NODE_ADDRESS_CLASS, serviceFacts } from "./decide.ts";
import { serviceLoadBalancer } from "./definition.ts";
import { podPorts, serviceNodePorts } from "./holders.ts";
import { trimPod } from "./watches.ts";

const watches = serviceLoadBalancer.watches(undefined as never);

function trim<T extends KubeObject>(watch: Watch<T>, obj: T): T {
  assert.ok(Array.isArray(watch.keep), "kept fields, not a transform: the watches are shared");
  return keepTransform<T>(watch.keep)(obj);
}

test("only the pod watch has a transform of its own (nothing else watches pods), and the server selects", () => {
  const own = Object.entries(watches).filter(([, watch]) => !Array.isArray(watch.keep)).map(([name]) => name);
  assert.deepEqual(own, ["pods"]);
  assert.equal(watches.pods.fieldSelector, "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
});

test("a pod that holds a port on its node keeps what podPorts reads; any other pod is not cached", () => {
  const base: Pod = {
    metadata: {
      namespace: "ns",
      name: "p",
      uid: "u",
      resourceVersion: "5",
      creationTimestamp: "2026-01-01T00:00:00Z",
      labels: { app: "x" },
      managedFields: [{ manager: "kubelet" }],
    },
    spec: {
      nodeName: "n1",
      containers: [
        { name: "web", image: "x", env: [{ name: "A", value: "1" }], ports: [{ containerPort: 8080, hostPort: 80 }] },
        { name: "metrics", image: "x", ports: [{ containerPort: 9090, protocol: "TCP" }] },
        { name: "plain", image: "x" },
      ],
      initContainers: [{ name: "sidecar", image: "x", restartPolicy: "Always", ports: [{ containerPort: 53, hostPort: 53, protocol: "UDP" }] }],
    },
    status: { phase: "Running", podIP: "10.244.0.5" },
  };
  const hostNetwork: Pod = { ...base, spec: { ...base.spec, containers: base.spec?.containers ?? [], hostNetwork: true } };
  const plain: Pod = { ...base, spec: { nodeName: "n1", containers: [{ name: "web", image: "x", ports: [{ containerPort: 80 }] }] } };
  for (const pod of [base, hostNetwork]) {
    const trimmed = trimPod(pod) as Pod;
    assert.deepEqual(podPorts(trimmed), podPorts(pod));
    assert.ok(podPorts(pod).claims.length > 0);
    assert.equal(trimmed.status, undefined);
    assert.deepEqual(Object.keys(trimmed.metadata ?? {}).sort(), ["creationTimestamp", "name", "namespace", "resourceVersion"]);
  }
  // Without hostNetwork only the ports with a hostPort are kept, and the containers that have one.
  assert.deepEqual((trimPod(base) as Pod).spec?.containers?.map(({ name }) => name), ["web"]);
  assert.deepEqual((trimPod(hostNetwork) as Pod).spec?.containers?.map(({ name }) => name), ["web", "metrics"]);
  assert.equal(trimPod(plain), undefined);
  assert.equal(trimPod({ metadata: { name: "bare" } }), undefined);
});

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
  assert.deepEqual(serviceNodePorts(trimmed), serviceNodePorts(service));
  assert.equal(serviceNodePorts(trimmed).claims[0]?.claim, "TCP/30080");
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
