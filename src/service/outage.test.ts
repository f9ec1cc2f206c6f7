import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  decideUnknownGuard,
  INITIAL_GUARD_STATE,
  isMassUnknown,
  type UnknownGuardConfig,
  type UnknownGuardState,
  type UnknownNode,
} from "./outage.ts";

const CONFIG: UnknownGuardConfig = { threshold: 0.55, graceMs: 20_000 };

const unknown = (name: string, sinceMs: number, carried = true): UnknownNode => ({ name, sinceMs, carried });

test("a mass Unknown: at least the threshold of the Nodes, or all of them", () => {
  const rows: [unknown: number, nodes: number, threshold: number, mass: boolean][] = [
    [0, 0, 0.55, false],
    [0, 10, 0.55, false],
    [1, 1, 0.55, true], // all of one: dropping it would leave nothing to carry anyway
    [1, 2, 0.55, false],
    [2, 2, 0.55, true],
    [2, 3, 0.55, true],
    [5, 10, 0.55, false],
    [6, 10, 0.55, true],
    [9, 10, 1, false], // 1: only all of them
    [10, 10, 1, true],
    [1, 1000, 0.001, true],
  ];
  for (const [count, nodes, threshold, mass] of rows)
    assert.equal(isMassUnknown(count, nodes, threshold), mass, `${count} of ${nodes} at ${threshold}`);
});

test("the guard's decisions, row by row", () => {
  const rows: {
    name: string;
    nowMs: number;
    nodes: number;
    unknown: UnknownNode[];
    before?: UnknownGuardState;
    held: Record<string, string>;
    dropped: string[];
    mass: boolean;
    nextMs: number | undefined;
  }[] = [
    {
      name: "one node of ten Unknown, within its grace: held until the grace ends",
      nowMs: 15_000,
      nodes: 10,
      unknown: [unknown("a", 1000)],
      held: { a: "grace" },
      dropped: [],
      mass: false,
      nextMs: 21_000,
    },
    {
      name: "one node of ten Unknown past its grace: dropped, as a dead node",
      nowMs: 21_000,
      nodes: 10,
      unknown: [unknown("a", 1000)],
      held: {},
      dropped: ["a"],
      mass: false,
      nextMs: undefined,
    },
    {
      name: "every node Unknown long since: all held, no timer",
      nowMs: 100_000,
      nodes: 3,
      unknown: [unknown("a", 0), unknown("b", 0), unknown("c", 10)],
      held: { a: "mass-unknown", b: "mass-unknown", c: "mass-unknown" },
      dropped: [],
      mass: true,
      nextMs: undefined,
    },
    {
      name: "a node that carried nothing (dropped before, or ineligible) is never held, though it counts",
      nowMs: 100_000,
      nodes: 3,
      unknown: [unknown("a", 0), unknown("b", 0, false), unknown("c", 99_000, false)],
      held: { a: "mass-unknown" },
      dropped: [],
      mass: true,
      nextMs: undefined,
    },
    {
      name: "the mass ends now: the nodes still Unknown get a full grace from now",
      nowMs: 100_000,
      nodes: 4,
      unknown: [unknown("a", 0), unknown("b", 0)],
      before: { mass: true, massEndedMs: -Infinity },
      held: { a: "grace", b: "grace" },
      dropped: [],
      mass: false,
      nextMs: 120_000,
    },
    {
      name: "a grace from the mass's end runs out: dropped",
      nowMs: 120_000,
      nodes: 4,
      unknown: [unknown("a", 0)],
      before: { mass: false, massEndedMs: 100_000 },
      held: {},
      dropped: ["a"],
      mass: false,
      nextMs: undefined,
    },
  ];
  for (const row of rows) {
    const decision = decideUnknownGuard(
      { nowMs: row.nowMs, nodes: row.nodes, unknown: row.unknown },
      row.before ?? INITIAL_GUARD_STATE,
      CONFIG,
    );
    assert.deepEqual(Object.fromEntries(decision.held), row.held, row.name);
    assert.deepEqual(decision.dropped, row.dropped, row.name);
    assert.equal(decision.state.mass, row.mass, row.name);
    assert.equal(decision.nextMs, row.nextMs, row.name);
  }
  const mass = decideUnknownGuard({ nowMs: 0, nodes: 4, unknown: [unknown("a", 0), unknown("b", 0), unknown("c", 0)] },
    INITIAL_GUARD_STATE, CONFIG);
  assert.match(mass.reason, /^3 of 4 Nodes Ready=Unknown \(at least 55%, or all\): kube-controller-manager's view/);
});

const configArb = fc.record({
  threshold: fc.double({ min: 0.01, max: 1, noNaN: true }),
  graceMs: fc.integer({ min: 0, max: 60_000 }),
});
const stateArb = fc.record({
  mass: fc.boolean(),
  massEndedMs: fc.oneof(fc.constant(-Infinity), fc.integer({ min: 0, max: 200_000 })),
});
const viewArb = fc
  .uniqueArray(
    fc.record({ name: fc.string({ minLength: 1, maxLength: 4 }), sinceMs: fc.integer({ min: 0, max: 200_000 }),
      carried: fc.boolean() }),
    { selector: (node) => node.name, maxLength: 30 },
  )
  .chain((list) =>
    fc.record({
      nowMs: fc.integer({ min: 200_000, max: 400_000 }),
      nodes: fc.integer({ min: list.length, max: list.length + 50 }),
      unknown: fc.constant(list),
    }),
  );

test("property: it never holds a node that carried nothing, and on a mass Unknown holds every one that did", () => {
  fc.assert(
    fc.property(viewArb, stateArb, configArb, (view, before, config) => {
      const decision = decideUnknownGuard(view, before, config);
      const carried = new Set(view.unknown.filter((node) => node.carried).map((node) => node.name));
      for (const name of decision.held.keys()) assert.ok(carried.has(name), `${name} held, but it carried nothing`);
      for (const name of decision.dropped) assert.ok(carried.has(name) && !decision.held.has(name));
      // Every node that carried is either held or dropped: none falls between.
      assert.equal(decision.held.size + decision.dropped.length, carried.size);
      if (isMassUnknown(view.unknown.length, view.nodes, config.threshold)) {
        assert.deepEqual(decision.dropped, [], "dropped a node on a mass Unknown");
        assert.equal(decision.state.mass, true);
      }
    }),
  );
});

test("property: one dead node among Ready ones is dropped once its grace ends, never before", () => {
  fc.assert(
    fc.property(
      configArb,
      fc.integer({ min: 2, max: 5000 }),
      fc.integer({ min: 0, max: 100_000 }),
      fc.integer({ min: 0, max: 100_000 }),
      (config, nodes, sinceMs, afterMs) => {
        fc.pre(1 / nodes < config.threshold);
        const view = { nowMs: sinceMs + afterMs, nodes, unknown: [unknown("dead", sinceMs)] };
        const decision = decideUnknownGuard(view, INITIAL_GUARD_STATE, config);
        if (afterMs >= config.graceMs) assert.deepEqual(decision.dropped, ["dead"]);
        else assert.deepEqual([...decision.held], [["dead", "grace"]]);
      },
    ),
  );
});

/**
 * The controller's loop over a sequence of Node events: Ready nodes carry; a node turning Unknown carries if it did;
 * each decision keeps `carried` only for the nodes it holds, and the guard's state. Returns the nodes ever dropped.
 */
function run(
  nodes: number,
  events: { atMs: number; node: number; ready: "True" | "Unknown" }[],
  config: UnknownGuardConfig,
  endMs: number,
): Set<number> {
  const unknownNodes = new Map<number, UnknownNode>();
  let state = INITIAL_GUARD_STATE;
  const dropped = new Set<number>();
  const decideAt = (nowMs: number) => {
    const decision = decideUnknownGuard({ nowMs, nodes, unknown: [...unknownNodes.values()] }, state, config);
    state = decision.state;
    for (const [index, node] of unknownNodes) {
      if (decision.dropped.includes(node.name)) dropped.add(index);
      node.carried = decision.held.has(node.name);
    }
    return decision.nextMs;
  };
  let timer: number | undefined;
  const sorted = [...events].sort((a, b) => a.atMs - b.atMs);
  for (const event of sorted) {
    // The timer the controller sets fires before a later event.
    while (timer !== undefined && timer <= event.atMs) timer = decideAt(timer);
    if (event.ready === "Unknown" && !unknownNodes.has(event.node))
      unknownNodes.set(event.node, { name: `n${event.node}`, sinceMs: event.atMs, carried: true });
    if (event.ready === "True") unknownNodes.delete(event.node);
    timer = decideAt(event.atMs);
  }
  while (timer !== undefined && timer <= endMs) timer = decideAt(timer);
  return dropped;
}

test("property: kube-controller-manager marking every node Unknown, then kubelets correcting it, drops none", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 40 }).chain((nodes) =>
        fc.record({
          nodes: fc.constant(nodes),
          // Each node marked within the grace of the first mark, and Ready again within the grace of the last
          // mark (the fraction falls as they come back): the order of both is arbitrary.
          marks: fc.array(fc.integer({ min: 0, max: 19_999 }), { minLength: nodes, maxLength: nodes }),
          backs: fc.array(fc.integer({ min: 0, max: 19_999 }), { minLength: nodes, maxLength: nodes }),
        }),
      ),
      ({ nodes, marks, backs }) => {
        const lastMark = Math.max(...marks);
        const events = [
          ...marks.map((atMs, node) => ({ atMs, node, ready: "Unknown" as const })),
          ...backs.map((atMs, node) => ({ atMs: lastMark + 1 + atMs, node, ready: "True" as const })),
        ];
        assert.deepEqual([...run(nodes, events, CONFIG, 200_000)], []);
      },
    ),
  );
});

test("property: after a mass Unknown, a node that stays Unknown while the others come back is dropped", () => {
  fc.assert(
    fc.property(fc.integer({ min: 3, max: 40 }), fc.integer({ min: 0, max: 39 }), (nodes, deadIndex) => {
      const dead = deadIndex % nodes;
      const events = [
        ...Array.from({ length: nodes }, (_, node) => ({ atMs: node, node, ready: "Unknown" as const })),
        ...Array.from({ length: nodes }, (_, node) => node)
          .filter((node) => node !== dead)
          .map((node) => ({ atMs: 5000 + node, node, ready: "True" as const })),
      ];
      assert.deepEqual([...run(nodes, events, CONFIG, 200_000)], [dead]);
    }),
  );
});
