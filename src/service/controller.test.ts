// The controller's loop with fake caches and a fake API: what replans and what does not (the plan is the costly
// part at 5,000 nodes), dry run, and a write that lost leadership being done after a resync.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { createLogger } from "../cli/log.ts";
import { Registry } from "../cli/metrics.ts";
import { SERVICE_NAME_LABEL } from "../loadbalancer/endpoints.ts";
import { LB_FINALIZER } from "../loadbalancer/service.ts";
import { ServiceController } from "./controller.ts";
import { NODE_ADDRESS_CLASS, type ServiceConfig } from "./decide.ts";
import { createServiceMetrics } from "./metrics.ts";

const CONFIG: ServiceConfig = {
  claimClassless: false,
  maxNodes: 16,
  reservedPorts: [],
  nodePortRange: { from: 30000, to: 32767 },
  unknownGuard: { threshold: 0.55, graceMs: 20_000 },
};

class FakeCache<T extends { metadata?: { namespace?: string; name?: string } }> {
  readonly items = new Map<string, T>();
  get = (key: string) => this.items.get(key);
  list = () => [...this.items.values()];
  put(item: T): void {
    const { namespace, name } = item.metadata ?? {};
    this.items.set(namespace ? `${namespace}/${name}` : String(name), item);
  }
}

function nodeObject(name: string, ready: string, heartbeat = "2026-01-01T00:00:00Z"): Node {
  return {
    metadata: { name, resourceVersion: heartbeat },
    status: {
      conditions: [{ type: "Ready", status: ready, lastHeartbeatTime: heartbeat }],
      addresses: [{ type: "InternalIP", address: `10.0.0.${name.slice(1)}` }],
    },
  };
}

function serviceObject(name: string, local = false, ipFamilies = ["IPv4"]): Service {
  return {
    metadata: {
      namespace: "ns", name, uid: `uid-${name}`, resourceVersion: "1",
      creationTimestamp: "2026-01-01T00:00:00Z",
    },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: NODE_ADDRESS_CLASS,
      externalTrafficPolicy: local ? "Local" : "Cluster",
      ipFamilies,
      ports: [{ port: Number(name.slice(1)), protocol: "TCP" }],
    },
  };
}

/** The status a patch writes (undefined: a patch of the object, not of its status). */
const statusOf = (patch: { body: unknown } | undefined) => (patch?.body as Service | undefined)?.status;

function world(
  options: { leader?: () => boolean; lagging?: boolean; config?: Partial<ServiceConfig> } = {},
) {
  const services = new FakeCache<Service>();
  const nodes = new FakeCache<Node>();
  const endpointSlices = new FakeCache<EndpointSlice>();
  const stored = new Map<string, Service>();
  const lagged: (() => void)[] = [];
  const patches: { name: string; body: unknown }[] = [];
  const logs: Record<string, unknown>[] = [];
  const events: { type: string; reason: string; message: string }[] = [];
  const registry = new Registry();
  const controller = new ServiceController({
    config: { ...CONFIG, ...options.config },
    services,
    nodes,
    endpointSlices,
    // The API's answer, and its watch event: the Service with the finalizers or status written, a new version.
    // The API's copy is the last one written (or the cache's). lagging: the cache gets a written version only when
    // the test delivers its watch event (deliverNext).
    serviceResource: (namespace) => ({
      patch: async (name, _type, body) => {
        patches.push({ name, body });
        const key = `${namespace}/${name}`;
        const before = stored.get(key) ?? (services.get(key) as Service);
        const { metadata, status = before.status } = body as Service;
        const finalizers = metadata?.finalizers ?? before.metadata?.finalizers;
        const resourceVersion = String(patches.length + 1);
        const after: Service = { ...before, metadata: { ...before.metadata, finalizers, resourceVersion }, status };
        stored.set(key, after);
        const deliver = () => {
          services.put(after);
          controller.serviceHandlers.onUpdate?.(before, after);
        };
        if (options.lagging) lagged.push(deliver);
        else {
          services.put(after);
          setImmediate(deliver);
        }
        return after;
      },
    }),
    isLeader: options.leader ?? (() => true),
    events: { record: (_object, type, reason, message) => events.push({ type, reason, message }) },
    log: createLogger({ verbosity: 0, format: "json", write: (line) => logs.push(JSON.parse(line)) }),
    metrics: createServiceMetrics(registry, "test_service_"),
  });
  const plans = () => Number(/test_service_plan_seconds_count (\d+)/.exec(registry.expose())?.[1]);
  const addNode = (node: Node) => {
    const before = nodes.get(node.metadata?.name ?? "");
    nodes.put(node);
    if (before) controller.nodeHandlers.onUpdate?.(before, node);
    else controller.nodeHandlers.onAdd?.(node);
  };
  const addService = (service: Service) => {
    services.put(service);
    controller.serviceHandlers.onAdd?.(service);
  };
  const addSlice = (slice: EndpointSlice) => {
    const before = endpointSlices.get(`${slice.metadata?.namespace}/${slice.metadata?.name}`);
    endpointSlices.put(slice);
    if (before) controller.endpointSliceHandlers.onUpdate?.(before, slice);
    else controller.endpointSliceHandlers.onAdd?.(slice);
  };
  const deliverNext = () => lagged.shift()?.();
  return { controller, patches, logs, events, plans, addNode, addService, addSlice, deliverNext };
}

const slice = (service: string, nodes: string[]): EndpointSlice => ({
  metadata: { namespace: "ns", name: `${service}-1`, labels: { [SERVICE_NAME_LABEL]: service } },
  addressType: "IPv4",
  endpoints: nodes.map((nodeName, i) => ({ addresses: [`10.244.0.${i + 1}`], nodeName })),
});

test("one plan per burst; a heartbeat replans nothing; a Cluster Service's EndpointSlice replans nothing", async () => {
  const w = world();
  for (const name of ["n1", "n2"]) w.addNode(nodeObject(name, "True"));
  for (const name of ["s80", "s81", "s82"]) w.addService(serviceObject(name));
  w.controller.start();
  await w.controller.idle();
  assert.equal(w.plans(), 1);
  w.addNode(nodeObject("n1", "True", "2026-01-01T00:05:00Z"));
  w.addSlice(slice("s80", ["n1"]));
  await w.controller.idle();
  assert.equal(w.plans(), 1, "replanned for a heartbeat or an EndpointSlice no plan reads");
  w.addNode(nodeObject("n2", "False"));
  await w.controller.idle();
  assert.equal(w.plans(), 2, "one plan for the three Services after a Node's change");
});

test("a Local Service's EndpointSlice replans, and writes its new ingress", async () => {
  const w = world();
  for (const name of ["n1", "n2"]) w.addNode(nodeObject(name, "True"));
  w.addService(serviceObject("s80", true));
  w.controller.start();
  await w.controller.idle();
  w.addSlice(slice("s80", ["n2"]));
  await w.controller.idle();
  assert.equal(w.patches.at(-1)?.name, "s80");
  assert.deepEqual(statusOf(w.patches.at(-1)), { loadBalancer: { ingress: [{ ip: "10.0.0.2", ipMode: "VIP" }] } });
});

test("a new Service is written once (finalizer, status) when the finalizer's version reaches the cache late", async () => {
  const w = world({ lagging: true });
  w.addNode(nodeObject("n1", "True"));
  w.addService(serviceObject("s80"));
  w.controller.start();
  await w.controller.idle();
  // The watch delivers the finalizer's version (no status yet) after both writes were answered, then the status's.
  for (let i = 0; i < 2; i++) {
    w.deliverNext();
    await w.controller.idle();
  }
  const writes = w.patches.map((patch) => (statusOf(patch) ? "status" : "finalizer"));
  assert.deepEqual(writes, ["finalizer", "status"]);
});

test("a write that lost leadership before it was sent is done after the resync of a new term", async () => {
  let leader = true;
  let checks = 0;
  // Leads for the decision, loses the lease right before the write.
  const w = world({ leader: () => (checks++ === 0 ? true : leader) });
  w.addNode(nodeObject("n1", "True"));
  w.addService(serviceObject("s80"));
  leader = false;
  w.controller.start();
  await w.controller.idle();
  assert.deepEqual(w.patches, []);
  leader = true;
  w.controller.resync();
  await w.controller.idle();
  const finalizers = w.patches.map(({ body }) => JSON.stringify(body)).filter((body) => body.includes(LB_FINALIZER));
  assert.equal(finalizers.length, 1);
});

test("a family without node addresses is left out, and told once in a Warning", async () => {
  const w = world();
  w.addNode(nodeObject("n1", "True"));
  w.addService(serviceObject("s80", false, ["IPv6", "IPv4"]));
  w.controller.start();
  await w.controller.idle();
  w.controller.resync();
  await w.controller.idle();
  const ingress = [{ ip: "10.0.0.1", ipMode: "VIP" }];
  assert.deepEqual(statusOf(w.patches.at(-1)), { loadBalancer: { ingress } });
  assert.deepEqual(
    w.events.filter(({ type }) => type === "Warning"),
    [
      {
        type: "Warning",
        reason: "IPFamilyWithoutAddresses",
        message: "left out IPv6: no chosen node has an address of that family",
      },
    ],
  );
});

test("a Node turning the Services to ExternalIPs replans them, even where it ranks below their choice", async () => {
  // For uid-s80, n2 outranks n1: by rank alone n1 joining would change nothing at --lb-max-nodes=1.
  const w = world({ config: { maxNodes: 1 } });
  const withExternalIP = (node: Node): Node => {
    const addresses = [...(node.status?.addresses ?? []), { type: "ExternalIP", address: "192.0.2.1" }];
    return { ...node, status: { ...node.status, addresses } };
  };
  w.addNode(nodeObject("n2", "True"));
  w.addNode(withExternalIP(nodeObject("n1", "False")));
  w.addService(serviceObject("s80"));
  w.controller.start();
  await w.controller.idle();
  const ingress = (ip: string) => ({ loadBalancer: { ingress: [{ ip, ipMode: "VIP" }] } });
  assert.deepEqual(statusOf(w.patches.at(-1)), ingress("10.0.0.2"));
  w.addNode(withExternalIP(nodeObject("n1", "True")));
  await w.controller.idle();
  assert.deepEqual(statusOf(w.patches.at(-1)), ingress("192.0.2.1"));
});
