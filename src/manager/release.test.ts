import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Service } from "kubernetes-types/core/v1.js";
import { LB_FINALIZER } from "../loadbalancer/service.ts";
import { ALLOCATED_FROM_ANNOTATION, BGP_CLASS, L2_CLASS } from "../pools/allocate.ts";
import { NODE_ADDRESS_CLASS } from "../service/decide.ts";
import { type ReleaseRule, releaseDecision } from "./release.ts";

const NODE_ADDRESSES = new Set(["192.0.2.10", "2001:db8::10"]);
const isNodeAddress = (ip: string) => NODE_ADDRESSES.has(ip);

interface Spec {
  finalizers?: string[];
  lbClass?: string;
  allocatedFrom?: string;
  ingress?: string[];
}

function service({ finalizers = [LB_FINALIZER], lbClass, allocatedFrom, ingress = [] }: Spec): Service {
  return {
    metadata: {
      name: "web",
      namespace: "default",
      finalizers,
      ...(allocatedFrom === undefined ? {} : { annotations: { [ALLOCATED_FROM_ANNOTATION]: allocatedFrom } }),
    },
    spec: { type: "LoadBalancer", ...(lbClass === undefined ? {} : { loadBalancerClass: lbClass }) },
    status: { loadBalancer: { ingress: ingress.map((ip) => ({ ip })) } },
  };
}

test("releaseDecision: only a Service surely ours loses the finalizer", () => {
  const cases: [string, Spec, boolean, ReleaseRule][] = [
    ["no finalizer", { finalizers: ["example.com/other"], lbClass: NODE_ADDRESS_CLASS }, false, "no-finalizer"],
    ["node-address class", { lbClass: NODE_ADDRESS_CLASS }, true, "class"],
    ["l2 class, pending", { lbClass: L2_CLASS }, true, "class"],
    ["bgp class, pending", { lbClass: BGP_CLASS }, true, "class"],
    ["class-less, allocated from a pool", { allocatedFrom: "main", ingress: ["198.51.100.7"] }, true, "allocated-from"],
    ["another class, even with our annotation", { lbClass: "example.com/lb", allocatedFrom: "main" }, true,
      "allocated-from"],
    ["another class", { lbClass: "example.com/lb", ingress: ["192.0.2.10"] }, false, "other-class"],
    ["class-less on node addresses", { ingress: ["192.0.2.10", "2001:db8::10"] }, true, "classless-node-addresses"],
    ["class-less, one address not a node's", { ingress: ["192.0.2.10", "198.51.100.7"] }, false, "not-ours"],
    ["class-less, pending (another controller's?)", {}, false, "not-ours"],
  ];
  for (const [name, spec, release, rule] of cases) {
    const decision = releaseDecision(service(spec), isNodeAddress);
    assert.deepEqual([decision.release, decision.rule], [release, rule], name);
    assert.ok(decision.reason.length > 0, name);
  }
});

test("releaseDecision: another class's Service is never released unless the pool controller marked it", () => {
  const ours = new Set([NODE_ADDRESS_CLASS, L2_CLASS, BGP_CLASS]);
  fc.assert(
    fc.property(
      fc.string({ minLength: 1 }).filter((lbClass) => !ours.has(lbClass)),
      fc.array(fc.constantFrom(...NODE_ADDRESSES, "198.51.100.7"), { maxLength: 3 }),
      fc.array(fc.constantFrom(LB_FINALIZER, "example.com/other"), { maxLength: 2 }),
      (lbClass, ingress, finalizers) =>
        !releaseDecision(service({ lbClass, ingress, finalizers }), isNodeAddress).release,
    ),
  );
});

