import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { addressesInUse, type InUseInput, inUseWarning } from "./inuse.ts";
import { ExclusionSet } from "./exclusions.ts";
import { poolFacts } from "./pool.ts";
import { poolStatus } from "./status.ts";

const MAC = "02:00:00:00:00:99";
const services: InUseInput["services"] = [
  { key: "team-a/web", ips: ["198.18.0.10", "fd00::10"], announcer: "node-a" },
  { key: "team-b/db", ips: ["198.18.0.11"], announcer: "node-b" },
  { key: "team-b/new", ips: ["198.18.0.12"], announcer: undefined },
];

test("a report is taken only from the node that announces the Service holding the address", () => {
  const rows: [string, string, string | undefined][] = [
    ["node-a", "198.18.0.10", "team-a/web"],
    ["node-a", "fd00::10", "team-a/web"],
    ["node-a", "198.18.0.11", undefined], // node-b's Service: a node reports only on its own
    ["node-b", "198.18.0.10", undefined],
    ["node-a", "198.18.0.12", undefined], // nobody announces it yet
    ["node-c", "198.18.0.99", undefined], // no Service holds it
  ];
  for (const [node, address, service] of rows) {
    const { byService, ignored } = addressesInUse({ services, reports: [{ node, conflicts: [{ address, mac: MAC }] }] });
    const taken = [...byService.values()].flat();
    assert.deepEqual(
      taken.map((each) => each.service),
      service === undefined ? [] : [service],
      `${node} ${address}`,
    );
    assert.deepEqual(
      ignored.map(({ rule }) => rule),
      service === undefined ? ["not-its-announcer"] : [],
    );
  }
});

test("the Service's Warning names the address, the other host's MAC and the announcer; none without a report", () => {
  assert.equal(inUseWarning([]), undefined);
  const warning = inUseWarning([{ service: "team-a/web", address: "198.18.0.10", mac: MAC, node: "node-a" }]);
  assert.equal(warning?.reason, "AddressInUseOnNetwork");
  const named = "another host (02:00:00:00:00:99) answers for 198.18.0.10 on the segment of node node-a";
  assert.ok(warning?.message.includes(named), warning?.message);
  assert.match(warning?.message ?? "", /moves nowhere/);
});

test("property: whatever the nodes report, only their own Services are named, each report taken or ignored", () => {
  const node = fc.constantFrom("node-a", "node-b", "node-c");
  const address = fc.constantFrom("198.18.0.10", "fd00::10", "198.18.0.11", "198.18.0.12", "198.18.0.99");
  const reports = fc.array(
    fc.record({ node, conflicts: fc.array(fc.record({ address, mac: fc.constant(MAC) }), { maxLength: 5 }) }),
    { maxLength: 5 },
  );
  fc.assert(
    fc.property(reports, (reported) => {
      const { byService, ignored } = addressesInUse({ services, reports: reported });
      const taken = [...byService.values()].flat();
      assert.equal(taken.length + ignored.length, reported.flatMap(({ conflicts }) => conflicts).length);
      for (const each of taken) {
        const service = services.find(({ key }) => key === each.service);
        assert.equal(service?.announcer, each.node);
        assert.ok(service?.ips.includes(each.address));
      }
    }),
  );
});

test("pool status: an address in use listed in its conflicts; Ready stays True, reason AddressesInUse", () => {
  const pool = poolFacts({ metadata: { name: "lan", generation: 1 }, spec: { addresses: ["198.18.0.10-198.18.0.20"] } });
  const now = new Date("2026-11-27T12:00:00Z");
  const base = { pool, pools: [pool], used: new Set(["198.18.0.10"]), retained: [], exclusions: new ExclusionSet([]) };
  const inUse = [{ service: "team-a/web", address: "198.18.0.10", mac: MAC, node: "node-a" }];
  const status = poolStatus({ ...base, inUse, current: undefined, now });
  assert.deepEqual(status.conflicts, [
    "198.18.0.10 (Service team-a/web) is answered by another host, 02:00:00:00:00:99, on the segment of node node-a",
  ]);
  const [ready] = status.conditions ?? [];
  assert.deepEqual(
    [ready?.status, ready?.reason, ready?.message],
    ["True", "AddressesInUse", "serves its addresses; another host answers for 1 of its address(es): 198.18.0.10"],
  );
  assert.equal(status.free, "10");
  const ended = poolStatus({ ...base, inUse: [], current: ready, now });
  assert.deepEqual([ended.conflicts, ended.conditions?.[0]?.reason], [[], "Serving"]);
});
