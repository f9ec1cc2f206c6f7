import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { EACH, type FieldPath, projection } from "./fields.ts";

const node = {
  metadata: { name: "a", uid: "u", labels: { x: "1", y: "2" }, annotations: { keep: "k", drop: "d" } },
  spec: { taints: [{ key: "t", effect: "NoSchedule", value: "v" }] },
  status: {
    conditions: [
      { type: "Ready", status: "True", lastHeartbeatTime: "h" },
      { type: "MemoryPressure", status: "False" },
    ],
    addresses: [{ type: "InternalIP", address: "10.0.0.1" }],
    images: [{ names: ["big"] }],
  },
};

test("projection keeps the paths named (and the fields a filter reads), whole where a path ends on an object", () => {
  const trim = projection([
    ["metadata", "name"],
    ["metadata", "labels"],
    ["metadata", "annotations", "keep"],
    ["metadata", "annotations", "absent"],
    ["spec", "taints", EACH, "key"],
    ["status", "conditions", { where: { type: "Ready" } }, "status"],
  ]);
  assert.deepEqual(trim(node), {
    metadata: { name: "a", labels: { x: "1", y: "2" }, annotations: { keep: "k" } },
    spec: { taints: [{ key: "t" }] },
    status: { conditions: [{ type: "Ready", status: "True" }] },
  });
});

test("projection unions element filters that both match one element", () => {
  const trim = projection<typeof node>([
    ["status", "conditions", EACH, "type"],
    ["status", "conditions", { where: { type: "Ready" } }, "status"],
  ]);
  assert.deepEqual(trim(node).status, {
    conditions: [{ type: "Ready", status: "True" }, { type: "MemoryPressure" }],
  });
});

// Small alphabets, so that generated paths and objects meet often.
const key = fc.constantFrom("a", "b", "c");
const leaf = fc.constantFrom("x", "y");
const value = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(key, tie("value"), { maxKeys: 3 }),
    fc.record({ a: leaf, b: tie("value") }),
  ),
})).value;
const segment = fc.oneof(key, fc.constant(EACH), fc.record({ where: fc.record({ a: leaf }) }));
const paths = fc.array(fc.array(segment, { maxLength: 4 }) as fc.Arbitrary<FieldPath>, { maxLength: 4 });

test("property: what a consumer's own paths keep, the union's cache keeps too", () => {
  fc.assert(
    fc.property(value, paths, paths, (object, mine, others) => {
      const own = projection(mine);
      const shared = projection([...others, ...mine]);
      // The consumer reads its fields from the shared cache: trimming that again by its own paths must give
      // exactly what its own projection of the full object gives.
      assert.deepEqual(own(shared(object)), own(object));
    }),
    { numRuns: 2000 },
  );
});
