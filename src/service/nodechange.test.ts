import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Node } from "kubernetes-types/core/v1.js";
import { type LoadBalancerNode, loadBalancerNode } from "../loadbalancer/nodes.ts";
import {
  type Intent,
  NO_HOLDERS,
  NODE_ADDRESS_CLASS,
  planIngress,
  type ServiceConfig,
  serviceFacts,
} from "./decide.ts";
import { type ExternalFamilies, intentHolds } from "./nodechange.ts";

interface NodeSpec {
  id: number;
  ready: boolean;
  external4: boolean;
  internal6: boolean;
  external6: boolean;
}

function node({ id, ready, external4, internal6, external6 }: NodeSpec): LoadBalancerNode {
  const addresses = [
    { type: "InternalIP", address: `10.0.0.${id}` },
    ...(external4 ? [{ type: "ExternalIP", address: `192.0.2.${id}` }] : []),
    ...(internal6 ? [{ type: "InternalIP", address: `fd00::${id}` }] : []),
    ...(external6 ? [{ type: "ExternalIP", address: `2001:db8::${id}` }] : []),
  ];
  const object: Node = {
    metadata: { name: `node-${id}`, labels: { zone: `z${id % 2}` } },
    status: { addresses, conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
  };
  return loadBalancerNode(object, undefined);
}

interface ServiceSpec {
  uid: string;
  local: boolean;
  ipFamilies: readonly string[];
  selector: boolean;
  port: number;
}

function service({ uid, local, ipFamilies, selector, port }: ServiceSpec, i: number) {
  return serviceFacts({
    metadata: {
      namespace: "ns",
      name: `s${i}`,
      uid,
      creationTimestamp: `2026-01-0${1 + (i % 9)}T00:00:00Z`,
      annotations: selector ? { "local-ccm.io/node-selector": "zone=z1" } : {},
    },
    spec: {
      type: "LoadBalancer",
      loadBalancerClass: NODE_ADDRESS_CLASS,
      externalTrafficPolicy: local ? "Local" : "Cluster",
      ipFamilies: [...ipFamilies],
      ports: [{ protocol: "TCP", port }],
    },
  });
}

const external = (nodes: LoadBalancerNode[]): ExternalFamilies => ({
  IPv4: nodes.some((each) => !each.ineligible && each.ips.IPv4.ExternalIP),
  IPv6: nodes.some((each) => !each.ineligible && each.ips.IPv6.ExternalIP),
});

/** Plans the Services over `before`, keeps the intents that hold after one Node's change, and plans over `after`. */
function replan(services: ReturnType<typeof service>[], before: LoadBalancerNode[], after: LoadBalancerNode[], maxNodes: number) {
  const config: ServiceConfig = {
    claimClassless: false,
    maxNodes,
    reservedPorts: [{ from: 22, to: 22 }],
    nodePortRange: { from: 30000, to: 32767 },
    unknownGuard: { threshold: 0.55, graceMs: 20_000 },
  };
  // Local Services have endpoints on the nodes of even id.
  const readyNodes = () => ["node-2", "node-4", "node-6", "node-8"];
  const plan = (nodes: LoadBalancerNode[], alone?: Map<string, Intent>) =>
    planIngress(
      { services, nodes: nodes.filter((each) => !each.ineligible), readyNodes, holders: NO_HOLDERS, config },
      alone,
    );
  const alone = new Map<string, Intent>();
  plan(before, alone);
  const facts = (list: LoadBalancerNode[], name: string | undefined) => list.find((each) => each.name === name);
  const changed = [...new Set([...before, ...after].map(({ name }) => name))].filter(
    (name) => JSON.stringify(facts(before, name)) !== JSON.stringify(facts(after, name)),
  );
  assert.ok(changed.length <= 1, "one Node's change at a time");
  const change = { before: facts(before, changed[0]), after: facts(after, changed[0]) };
  const context = { maxNodes, external: { before: external(before), after: external(after) } };
  const byKey = new Map(services.map((facts) => [facts.key, facts]));
  for (const [key, intent] of alone)
    if (!intentHolds(byKey.get(key) as ReturnType<typeof service>, intent, change, context)) alone.delete(key);
  return { kept: alone.size, incremental: plan(after, alone), fresh: plan(after) };
}

const plain = (id: number, ready = true) =>
  node({ id, ready, external4: false, internal6: false, external6: false });

describe("intentHolds", () => {
  const clusterServices = Array.from({ length: 20 }, (_, i) =>
    service({ uid: `uid-${i}`, local: false, ipFamilies: ["IPv4"], selector: false, port: 80 + i }, i),
  );
  const nodes = Array.from({ length: 50 }, (_, i) => plain(i + 1));
  const chosen = (name: string) => {
    const { fresh } = replan(clusterServices, nodes, nodes, 3);
    return [...fresh.values()].filter((intent) => intent.action === "ensure" && intent.nodes.includes(name)).length;
  };

  test("a node leaving replans only the Services that chose it", () => {
    for (const id of [1, 17, 42]) {
      const after = nodes.map((each) => (each.name === `node-${id}` ? plain(id, false) : each));
      const { kept, incremental, fresh } = replan(clusterServices, nodes, after, 3);
      assert.equal(kept, clusterServices.length - chosen(`node-${id}`));
      assert.deepEqual(incremental, fresh);
    }
  });

  test("a node joining replans only the Services where it outranks the last node chosen", () => {
    const joining = plain(51);
    const { kept, incremental, fresh } = replan(clusterServices, nodes, [...nodes, joining], 3);
    const gained = [...fresh.values()].filter((each) => each.action === "ensure" && each.nodes.includes("node-51"));
    assert.equal(kept, clusterServices.length - gained.length);
    assert.ok(gained.length < clusterServices.length, "node-51 outranks some Services' choice only");
    assert.deepEqual(incremental, fresh);
  });

  const arbitraryNode = (id: number) =>
    fc.record({
      id: fc.constant(id),
      ready: fc.boolean(),
      external4: fc.boolean(),
      internal6: fc.boolean(),
      external6: fc.boolean(),
    });
  const arbitraryNodes = fc
    .uniqueArray(fc.integer({ min: 1, max: 12 }), { maxLength: 12 })
    .chain((ids) => fc.tuple(...ids.map(arbitraryNode)));
  const arbitraryServices = fc.array(
    fc.record({
      uid: fc.uuid(),
      local: fc.boolean(),
      ipFamilies: fc.constantFrom(["IPv4"], ["IPv6"], ["IPv4", "IPv6"], ["IPv6", "IPv4"]),
      selector: fc.boolean(),
      port: fc.constantFrom(22, 80, 443),
    }),
    { maxLength: 8 },
  );

  test("the plan after any one Node's change is the plan from scratch", () => {
    fc.assert(
      fc.property(
        arbitraryNodes,
        arbitraryServices,
        fc.integer({ min: 1, max: 4 }),
        fc.nat(),
        fc.option(fc.integer({ min: 1, max: 13 }).chain(arbitraryNode)),
        (specs, serviceSpecs, maxNodes, pick, replacement) => {
          const before = specs.map(node);
          const services = serviceSpecs.map(service);
          let after: LoadBalancerNode[];
          if (replacement === null) after = before.filter((_, i) => i !== pick % Math.max(1, before.length));
          else if (specs.some(({ id }) => id === replacement.id))
            after = before.map((each) => (each.name === `node-${replacement.id}` ? node(replacement) : each));
          else after = [...before, node(replacement)];
          const { incremental, fresh } = replan(services, before, after, maxNodes);
          assert.deepEqual(incremental, fresh);
        },
      ),
      { numRuns: 2000 },
    );
  });
});
