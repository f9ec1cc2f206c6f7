// What this node must announce, whatever the method, from plain data (a table and a property).
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Service } from "kubernetes-types/core/v1.js";
import { canonicalIp, ipProblem } from "../../net/ip.ts";
import { decideDesired, newSkips, type Refusal } from "./desired.ts";

function service(name: string, ips: string[], changes: { type?: string; deleting?: boolean; mine?: boolean } = {}) {
  return {
    metadata: {
      namespace: "default",
      name,
      annotations: { mine: String(changes.mine ?? true) },
      ...(changes.deleting ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}),
    },
    spec: { type: changes.type ?? "LoadBalancer" },
    status: { loadBalancer: { ingress: ips.map((ip) => ({ ip })) } },
  } satisfies Service;
}

/** A method's own rule: the "mine" annotation. */
const refuse = (s: Service): Refusal<"not-mine"> | undefined =>
  s.metadata?.annotations?.mine === "true" ? undefined : { rule: "not-mine", reason: "not mine" };

test("desired: each address once with the Services holding it; the method's rule first, then the shared ones", () => {
  const services = [
    service("web", ["198.18.0.50", "FD00:198:18::50"]),
    service("shared", ["198.18.0.50"]), // a sharing key: one address, two Services
    service("other", ["198.18.0.60"], { mine: false, type: "ClusterIP" }), // the method's rule is checked first
    service("cluster-ip", ["198.18.0.61"], { type: "ClusterIP" }),
    service("gone", ["198.18.0.62"], { deleting: true }),
    service("odd", ["198.18.0.063", "::ffff:198.18.0.64", "203.0.113.1"]),
    { ...service("named", []), status: { loadBalancer: { ingress: [{ hostname: "lb.example" }] } } },
  ];
  const desired = decideDesired(services, refuse);
  assert.deepEqual(desired.addresses, [
    { address: "198.18.0.50", services: ["default/web", "default/shared"] },
    { address: "fd00:198:18::50", services: ["default/web"] },
    { address: "203.0.113.1", services: ["default/odd"] },
  ]);
  assert.deepEqual(
    desired.skipped.map((skip) => [skip.service, skip.address, skip.rule]),
    [
      ["default/other", undefined, "not-mine"],
      ["default/cluster-ip", undefined, "not-load-balancer"],
      ["default/gone", undefined, "deleting"],
      ["default/odd", "198.18.0.063", "not-an-ip"],
      ["default/odd", "::ffff:198.18.0.64", "not-an-ip"],
    ],
  );
});

test("desired (property): every ingress IP of a Service kept is desired once, canonical, naming that Service", () => {
  const ip = fc.oneof(fc.ipV4(), fc.ipV6(), fc.constantFrom("198.18.0.063", "::ffff:1.2.3.4", "fe80::1%eth0"));
  const spec = fc.record({ ips: fc.array(ip, { maxLength: 4 }), mine: fc.boolean(), deleting: fc.boolean() });
  fc.assert(
    fc.property(fc.array(spec, { maxLength: 6 }), (specs) => {
      const services = specs.map((s, i) => service(`s${i}`, s.ips, s));
      const desired = decideDesired(services, refuse);
      const addresses = desired.addresses.map((entry) => entry.address);
      assert.equal(new Set(addresses).size, addresses.length, "each address once");
      for (const [i, s] of specs.entries()) {
        const name = `default/s${i}`;
        const named = desired.addresses.filter((entry) => entry.services.includes(name)).map((e) => e.address);
        const invalid = desired.skipped.filter((skip) => skip.service === name && skip.rule === "not-an-ip");
        const kept = s.mine && !s.deleting;
        const valid = kept ? s.ips.filter((text) => !ipProblem(text)) : [];
        assert.deepEqual(new Set(named), new Set(valid.map((text) => canonicalIp(text))), name);
        assert.deepEqual(
          invalid.map((skip) => skip.address),
          kept ? s.ips.filter((text) => ipProblem(text)) : [],
        );
      }
    }),
  );
});

test("newSkips: each skip logged once, when it first appears or its rule or reason changes", () => {
  const unlogged = newSkips();
  const skip = (service: string, rule = "not-eligible", reason = "excluded") => ({ service, rule, reason });
  const many = Array.from({ length: 1000 }, (_, i) => skip(`default/s${i}`));
  assert.equal(unlogged(many).length, 1000, "the first decision: all");
  let lines = 0;
  // a Service at a time, as 1,000 Services arrive: one line each, not the whole list again (O(n²) before)
  for (let i = 1000; i < 1100; i++) lines += unlogged([...many, skip(`default/s${i}`)]).length;
  assert.equal(lines, 100);
  assert.deepEqual(unlogged([skip("default/s1", "no-ready-endpoint", "no endpoint")]), [
    skip("default/s1", "no-ready-endpoint", "no endpoint"),
  ]);
  assert.deepEqual(unlogged([skip("default/s1", "no-ready-endpoint", "no endpoint")]), [], "unchanged: nothing");
  assert.deepEqual(unlogged([]), []);
  assert.equal(unlogged([skip("default/s1", "no-ready-endpoint", "no endpoint")]).length, 1, "skipped again: again");
});
