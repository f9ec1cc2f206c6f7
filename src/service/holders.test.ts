// Which ports a pod or a Service holds on the nodes, and the index that says which ports' holders changed.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Pod, Service } from "kubernetes-types/core/v1.js";
import { type Held, HolderIndex, holderId, podPorts, serviceNodePorts } from "./holders.ts";

const CREATED = "2026-01-01T00:00:00Z";
const claims = ({ node, claims: list }: Held) => [node, list.map(({ claim, holder }) => `${claim} ${holder.rule}`)];

function pod(spec: Pod["spec"]): Pod {
  return { metadata: { namespace: "ns", name: "p", creationTimestamp: CREATED }, spec };
}

describe("podPorts", () => {
  const cases: [string, Pod["spec"], unknown[]][] = [
    ["not bound: nothing yet", { containers: [{ name: "c", ports: [{ containerPort: 80, hostPort: 80 }] }] }, [undefined, []]],
    [
      "hostPorts only, protocol defaulting to TCP, each once",
      {
        nodeName: "n1",
        containers: [
          { name: "c", ports: [{ containerPort: 8080, hostPort: 80 }, { containerPort: 9090 }] },
          { name: "d", ports: [{ containerPort: 8080, hostPort: 80, protocol: "TCP" }, { containerPort: 53, hostPort: 53, protocol: "UDP" }] },
        ],
      },
      ["n1", ["TCP/80 host-port", "UDP/53 host-port"]],
    ],
    [
      "hostNetwork: every declared port, init containers too",
      {
        nodeName: "n1",
        hostNetwork: true,
        containers: [{ name: "c", ports: [{ containerPort: 18443 }, { containerPort: 9100, hostPort: 9100 }] }],
        initContainers: [{ name: "s", restartPolicy: "Always", ports: [{ containerPort: 4240, protocol: "SCTP" }] }],
      },
      ["n1", ["TCP/18443 host-network-port", "TCP/9100 host-network-port", "SCTP/4240 host-network-port"]],
    ],
  ];
  for (const [name, spec, expected] of cases) test(name, () => assert.deepEqual(claims(podPorts(pod(spec))), expected));

  test("the holder names the pod and its age", () => {
    const [first] = podPorts(pod({ nodeName: "n1", hostNetwork: true, containers: [{ name: "c", ports: [{ containerPort: 1 }] }] })).claims;
    assert.deepEqual(first?.holder, { rule: "host-network-port", kind: "Pod", key: "ns/p", created: CREATED });
  });
});

test("serviceNodePorts: every NodePort, on every node, whatever the Service's type", () => {
  const service: Service = {
    metadata: { namespace: "ns", name: "s", creationTimestamp: CREATED },
    spec: { type: "NodePort", ports: [{ port: 80, nodePort: 30080 }, { port: 53, protocol: "UDP", nodePort: 30053 }, { port: 81 }] },
  };
  assert.deepEqual(claims(serviceNodePorts(service)), [undefined, ["TCP/30080 node-port", "UDP/30053 node-port"]]);
  assert.equal(holderId("Service", service), "Service/ns/s");
});

describe("HolderIndex", () => {
  const hostNetworkPod = (name: string, node: string, ports: number[]): Pod => ({
    metadata: { namespace: "ns", name, creationTimestamp: CREATED },
    spec: { nodeName: node, hostNetwork: true, containers: [{ name: "c", ports: ports.map((containerPort) => ({ containerPort })) }] },
  });
  const none: Held = { node: undefined, claims: [] };

  test("tells the ports whose holders changed, and nothing when an object holds what it held", () => {
    const index = new HolderIndex();
    const a = hostNetworkPod("a", "n1", [80, 443]);
    assert.deepEqual([...index.set("Pod/ns/a", podPorts(a))], ["TCP/80", "TCP/443"]);
    assert.deepEqual([...index.set("Pod/ns/a", podPorts(a))], []);
    assert.deepEqual([...index.set("Pod/ns/a", podPorts(hostNetworkPod("a", "n1", [443, 8443])))].sort(), ["TCP/443", "TCP/80", "TCP/8443"]);
    assert.deepEqual([...index.set("Pod/ns/b", none)], [], "an object that never held anything");
    assert.deepEqual([...index.holders.onNode.get("n1")?.keys() ?? []].sort(), ["TCP/443", "TCP/8443"]);
    assert.deepEqual([...index.set("Pod/ns/a", none)].sort(), ["TCP/443", "TCP/8443"]);
    assert.equal(index.holders.onNode.size, 0, "an empty node's table goes");
  });

  test("after any sequence of sets, the index holds exactly the last claims of each object", () => {
    const step = fc.record({
      name: fc.constantFrom("a", "b", "c"),
      node: fc.constantFrom("n1", "n2", "*"),
      ports: fc.uniqueArray(fc.constantFrom(80, 443, 30080), { maxLength: 2 }),
    });
    fc.assert(
      fc.property(fc.array(step, { maxLength: 20 }), (steps) => {
        const index = new HolderIndex();
        const last = new Map<string, Held>();
        for (const { name, node, ports } of steps) {
          const held: Held =
            node === "*"
              ? serviceNodePorts({ metadata: { namespace: "ns", name }, spec: { ports: ports.map((nodePort) => ({ port: 1, nodePort })) } })
              : podPorts(hostNetworkPod(name, node, ports));
          const id = `${node === "*" ? "Service" : "Pod"}/ns/${name}`;
          index.set(id, held);
          last.set(id, held);
        }
        const expected = new Map<string, string[]>();
        for (const { node, claims: list } of last.values())
          for (const { claim, holder } of list) {
            const where = `${node ?? "*"} ${claim}`;
            expected.set(where, [...(expected.get(where) ?? []), `${holder.kind}/${holder.key}`].sort());
          }
        const actual = new Map<string, string[]>();
        const add = (where: string, holders: readonly { kind: string; key: string }[]) =>
          actual.set(where, holders.map(({ kind, key }) => `${kind}/${key}`).sort());
        for (const [claim, holders] of index.holders.everywhere) add(`* ${claim}`, holders);
        for (const [node, table] of index.holders.onNode) for (const [claim, holders] of table) add(`${node} ${claim}`, holders);
        assert.deepEqual(new Map([...actual].sort()), new Map([...expected].sort()));
      }),
    );
  });
});
