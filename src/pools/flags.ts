// The address pool controller's flags (lb-l2-*). They join the central program's one flag table; Helm values
// under loadBalancer.l2.
import { type FlagValues, flag, UsageError } from "../cli/flags.ts";
import { dnsLabel } from "../cli/validate.ts";
import type { ServedClasses } from "./allocate.ts";

export interface PoolsConfig extends ServedClasses {
  /** Where the agents keep their announcer Leases (announcement.ts). */
  leaseNamespace: string;
}

export const poolsFlagTable = [
  flag({
    name: "lb-l2-claim-classless",
    type: "bool",
    default: "false",
    help:
      "Address pool controller: also give pool addresses to LoadBalancer Services without a loadBalancerClass. " +
      "Turn on at most one of this and --lb-claim-classless: one mode serves class-less Services. Services of " +
      "class local-ccm.io/l2 are always its own.",
    helm: "loadBalancer.l2.pools.claimClassless",
  }),
  flag({
    name: "lb-bgp",
    type: "bool",
    default: "false",
    help:
      "Address pool controller: also give pool addresses to LoadBalancer Services of class local-ccm.io/bgp, " +
      "as to local-ccm.io/l2 but with no announcer to assign (every eligible node's BGP speaker announces them). " +
      "Off, it leaves them alone as another controller's class.",
    helm: "bgp.enabled",
  }),
  flag({
    name: "lb-bgp-claim-classless",
    type: "bool",
    default: "false",
    help:
      "Address pool controller: also give pool addresses to LoadBalancer Services without a loadBalancerClass, " +
      "announced over BGP as class local-ccm.io/bgp (the agents' --bgp-claim-classless). Needs --lb-bgp; turn on " +
      "at most one of this, --lb-l2-claim-classless and --lb-claim-classless.",
    helm: "bgp.claimClassless",
  }),
  flag({
    name: "lb-l2-lease-namespace",
    type: "string",
    default: "kube-system",
    help:
      "Address pool controller: the namespace of the agents' announcer Leases, from which it picks the node " +
      "that announces each address. The chart passes its release namespace, where the agents run.",
    validate: dnsLabel,
  }),
] as const;

export function poolsConfig(values: FlagValues<typeof poolsFlagTable>): PoolsConfig {
  if (values["lb-bgp-claim-classless"] && !values["lb-bgp"])
    throw new UsageError("--lb-bgp-claim-classless needs --lb-bgp: class-less Services would go over BGP");
  return {
    claimClassless: values["lb-l2-claim-classless"],
    bgp: values["lb-bgp"],
    bgpClaimClassless: values["lb-bgp-claim-classless"],
    leaseNamespace: values["lb-l2-lease-namespace"],
  };
}
