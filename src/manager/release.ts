// What `node-lifecycle-controller release-all` (the chart's post-delete hook) lets go once the controllers are gone,
// as a pure function: which Services lose the load-balancer-cleanup finalizer.
//
// The finalizer is k8s.io/cloud-provider's, shared by every controller built on it: a Service is released only when
// it is surely ours (our class, our pool's allocated-from annotation, or a class-less ingress made only of node
// addresses, as the service controller's own classless-off rule reads it). A Service kept by mistake can still be
// released by hand; another controller's finalizer removed by mistake would leak that controller's load balancer.
import type { Service } from "kubernetes-types/core/v1.js";
import { LB_FINALIZER } from "../loadbalancer/service.ts";
import { ALLOCATED_FROM_ANNOTATION, BGP_CLASS, L2_CLASS } from "../pools/allocate.ts";
import { NODE_ADDRESS_CLASS } from "../service/decide.ts";

export type ReleaseRule =
  | "no-finalizer"
  | "class"
  | "allocated-from"
  | "classless-node-addresses"
  | "other-class"
  | "not-ours";

export interface ReleaseDecision {
  release: boolean;
  rule: ReleaseRule;
  reason: string;
}

const OUR_CLASSES = [NODE_ADDRESS_CLASS, L2_CLASS, BGP_CLASS];

/** Whether the Service's load-balancer-cleanup finalizer is ours to remove now that the controllers are gone. */
export function releaseDecision(service: Service, isNodeAddress: (ip: string) => boolean): ReleaseDecision {
  const { metadata = {}, spec = {}, status } = service;
  if (!(metadata.finalizers ?? []).includes(LB_FINALIZER))
    return { release: false, rule: "no-finalizer", reason: `no ${LB_FINALIZER} finalizer` };
  const lbClass = spec.loadBalancerClass;
  if (lbClass !== undefined && OUR_CLASSES.includes(lbClass))
    return { release: true, rule: "class", reason: `loadBalancerClass ${lbClass}` };
  const from = metadata.annotations?.[ALLOCATED_FROM_ANNOTATION];
  // Written with the finalizer, in one patch, by the pool controller only: whatever the class is now.
  if (from !== undefined) return { release: true, rule: "allocated-from", reason: `allocated from pool ${from}` };
  if (lbClass !== undefined)
    return { release: false, rule: "other-class", reason: `loadBalancerClass ${lbClass} is not ours` };
  const ips = (status?.loadBalancer?.ingress ?? []).map(({ ip }) => ip);
  // An empty ingress could be another controller's Service, pending: it would add its finalizer again and fight.
  if (ips.length > 0 && ips.every((ip) => ip !== undefined && isNodeAddress(ip)))
    return { release: true, rule: "classless-node-addresses", reason: `class-less, ingress ${ips.join(",")} on nodes` };
  return { release: false, rule: "not-ours", reason: "class-less, and its ingress is not made of node addresses" };
}
