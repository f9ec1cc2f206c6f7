// Stale routes are the top complaint about kube-router: this is the churn test of issue 28 against FRR (Debian's frr,
// bgpd). Four simulated nodes, each the agent's BGP method (method.ts) with a real session of its own to one FRR, in
// the root namespace with addresses of their own; each cycle is a change of one node's Node object, turned into pod
// CIDRs by podcidrs.ts (as definition.ts does on each Node event) and handed to its method: a node joins (a Node with
// pod CIDRs, both families), its CIDR changes (the node re-registered under the same name), it is being deleted
// (deletionTimestamp: UPDATEs withdraw its CIDRs, the session stays), it leaves (its method stops: withdrawn, then
// Ceased), or it comes back with a fresh session. Some Nodes carry hostile entries beside their own (the default
// route, a host route, a non-canonical form): those never reach FRR. 1,000 cycles; every 100 the test waits until
// FRR's table is exactly the live nodes' CIDRs, each with one path, its next hop that node's address of the CIDR's
// family; at the end too. A node's session survives its CIDR changes: it is Established once per start.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { waitFor } from "../../localcluster/wait.ts";
import { createLogger } from "../../src/cli/log.ts";
import { decidePodCidrs } from "../../src/agent/announcer/bgp/podcidrs.ts";
import { type BgpMethod, startBgpMethod } from "../../src/agent/announcer/bgp/method.ts";
import { createNetwork, type Network } from "../netns/netns.ts";
import { MY_ASN, ROUTER_ASN, type Router, startFrr } from "./routers.ts";

const SUBNET = 246;
const NODES = 4;
const CYCLES = 1000;
const SAMPLE_EVERY = 100;
const WAIT_MS = 60_000;
const log = createLogger({ verbosity: 0, format: "text", write: () => {} });

let net: Network | undefined;
let router: Router | undefined;
const methods: (BgpMethod | undefined)[] = [];
after(async () => {
  for (const method of methods) await method?.stop(false);
  await router?.stop();
  await net?.remove();
});

/** A deterministic generator (mulberry32): a failure replays with the same cycles. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface SimulatedNode {
  /** Its Node as the agent's watch shows it; undefined: deleted (or never registered). */
  object: Node | undefined;
  method: BgpMethod | undefined;
  starts: number;
  established: number;
}

test("1,000 cycles of node join/leave and CIDR change: FRR ends holding exactly the live nodes' CIDRs", async (t) => {
  net = await createNetwork();
  router = await startFrr(net, {
    index: 0,
    subnet: SUBNET,
    asn: ROUTER_ASN,
    peerAsn: MY_ASN,
    transport: 4,
    holdTime: 30,
    speakers: NODES,
  });
  const frr = router;
  const next = random(28);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
  const nodes: SimulatedNode[] = Array.from({ length: NODES }, () => ({
    object: undefined,
    method: undefined,
    starts: 0,
    established: 0,
  }));
  // Pod CIDRs as an IPAM hands them out: never one that a live node holds.
  let counter = 0;
  const fresh = (): [string, string] => {
    const held = new Set(nodes.flatMap((node) => node.object?.spec?.podCIDRs ?? []));
    for (;;) {
      const n = counter++ % 250;
      const pair: [string, string] = [`10.244.${n}.0/24`, `fd00:10:244:${n.toString(16)}::/64`];
      if (!held.has(pair[0])) return pair;
    }
  };
  const HOSTILE = [
    ["0.0.0.0/0"],
    ["::/0", `198.19.${SUBNET}.2/32`], // the default route; the router's own address as a host route
    ["10.245.0.7/24"], // host bits set
    ["FD00:10:245::/64"], // upper case
  ];
  const nodeObject = (k: number, deleting = false): Node => {
    const [v4, v6] = fresh();
    const hostile = next() < 0.1 ? pick(HOSTILE) : [];
    return {
      metadata: {
        name: `node-${k}`,
        ...(deleting ? { deletionTimestamp: new Date().toISOString() } : {}),
      },
      spec: { podCIDR: v4, podCIDRs: next() < 0.5 ? [v4, v6, ...hostile] : [...hostile, v4] },
    };
  };
  /** What definition.ts does on each event of the Node: its pod CIDRs decided again, handed to the method. */
  const follow = (k: number) => nodes[k]!.method?.setPodCidrs(decidePodCidrs(nodes[k]!.object).cidrs);
  const start = (k: number) => {
    const node = nodes[k]!;
    const speaker = frr.speakers[k]!;
    node.starts++;
    node.method = startBgpMethod({
      log,
      peers: [
        {
          name: "frr",
          session: {
            config: { myAsn: MY_ASN, peerAsn: ROUTER_ASN, routerId: speaker[4], holdTime: 30, families: [4, 6] },
            peerAddress: frr.address[4],
            localAddress: speaker[4],
            onDecision: (decision) => decision.rule === "established" && node.established++,
          },
          nextHops: speaker,
          podCidrs: true,
        },
      ],
    });
    methods[k] = node.method;
    follow(k);
  };
  const stop = async (k: number) => {
    const node = nodes[k]!;
    const method = node.method;
    node.method = undefined;
    methods[k] = undefined;
    await method?.stop(false);
  };

  /** What FRR should hold: each live node's own CIDRs (the canonical ones), next hop its address of that family. */
  const expected = (family: 4 | 6) => {
    const routes: Record<string, string[]> = {};
    nodes.forEach((node, k) => {
      if (!node.method) return;
      for (const cidr of decidePodCidrs(node.object).cidrs)
        if ((cidr.includes(":") ? 6 : 4) === family) routes[cidr] = [frr.speakers[k]![family]];
    });
    return routes;
  };
  const held = async (family: 4 | 6) =>
    Object.fromEntries([...(await frr.paths!(family))].sort(([a], [b]) => a.localeCompare(b)));
  const sorted = (routes: Record<string, string[]>) =>
    Object.fromEntries(Object.entries(routes).sort(([a], [b]) => a.localeCompare(b)));
  const converged = async (what: string) => {
    const want = { 4: sorted(expected(4)), 6: sorted(expected(6)) };
    let last: unknown;
    try {
      await waitFor(
        what,
        async () => {
          last = { 4: await held(4), 6: await held(6) };
          return JSON.stringify(last) === JSON.stringify(want);
        },
        WAIT_MS,
        200,
      );
    } catch (err) {
      const message = `${(err as Error).message}: expected ${JSON.stringify(want)}, FRR has ${JSON.stringify(last)}`;
      throw new Error(message, { cause: err });
    }
  };

  for (let k = 0; k < NODES; k++) {
    nodes[k]!.object = nodeObject(k);
    start(k);
  }
  await converged("the first four nodes' CIDRs");
  const actions = { join: 0, change: 0, deleting: 0, deleted: 0, leave: 0, back: 0 };
  for (let cycle = 1; cycle <= CYCLES; cycle++) {
    const k = Math.floor(next() * NODES);
    const node = nodes[k]!;
    const roll = next();
    if (!node.object) {
      // joins: registered with a pod CIDR; its agent peers already, or starts now
      node.object = nodeObject(k);
      if (node.method) follow(k);
      else start(k);
      actions.join++;
    } else if (node.object.metadata?.deletionTimestamp) {
      // deleted: the agent's loop stops its method (no Node: not selected), or it stays for the next Node
      node.object = undefined;
      if (roll < 0.5) await stop(k);
      else follow(k);
      actions.deleted++;
    } else if (!node.method) {
      start(k); // the agent back (a new process: a new session)
      actions.back++;
    } else if (roll < 0.6) {
      // re-registered with another CIDR (spec.podCIDRs is immutable: a new Node under the same name)
      node.object = nodeObject(k);
      follow(k);
      actions.change++;
    } else if (roll < 0.9) {
      node.object = { ...node.object, metadata: { ...node.object.metadata, deletionTimestamp: "2026-01-01T00:00:00Z" } };
      follow(k);
      actions.deleting++;
    } else {
      await stop(k); // the node leaves BGP (no BGPPeer selects it): withdrawn, then Ceased
      actions.leave++;
    }
    if (cycle % SAMPLE_EVERY === 0) await converged(`FRR holds exactly the live nodes' CIDRs after ${cycle} cycles`);
  }
  await converged("FRR holds exactly the live nodes' CIDRs at the end");
  const sessions = nodes.map((node, k) => `node-${k}: ${node.starts} starts, ${node.established} Established`);
  t.diagnostic(`cycles: ${JSON.stringify(actions)}; ${sessions.join("; ")}`);
  for (const action of Object.values(actions)) assert.ok(action > 0, `every kind of cycle ran: ${JSON.stringify(actions)}`);
  // A CIDR change, a deletion or a hostile entry is UPDATEs: each session came up once per start, never again.
  for (const [k, node] of nodes.entries())
    assert.ok(node.established <= node.starts, `node-${k}: ${node.established} sessions for ${node.starts} starts`);
  assert.ok(
    !Object.keys(await held(4)).some((prefix) => prefix === "0.0.0.0/0" || prefix.endsWith("/32")),
    "no hostile entry reached FRR",
  );
});
