// The kubelet-serving CSR approver's flags (csr-*): the rules an operator adds to the built-in ones. They join
// the program's one flag table (manager/flags.ts).
import { type FlagValues, flag } from "../cli/flags.ts";
import { cidr, dnsSubdomain, eachItem, parses, positive } from "../cli/validate.ts";
import { type Cidr, parseCidr } from "../net/ip.ts";
import type { CsrConfig } from "./decide.ts";
import { parseDnsNamePattern } from "./dnsnames.ts";

/** The API's limits of spec.expirationSeconds: at least 10 minutes, at most an int32 of seconds. */
const MIN_EXPIRATION_MS = 600_000;
const MAX_EXPIRATION_MS = (2 ** 31 - 1) * 1000;

const CSR_HELM = "csrApproval.rules.";

export const csrFlagTable = [
  flag({
    name: "csr-ip-allowlist",
    type: "list",
    default: "",
    help:
      "CSR approver: comma list of CIDRs; every IP SAN must also lie in one of them (on top of being the " +
      "node's own address). Empty: no allowlist. Production clusters should set their node networks.",
    helm: `${CSR_HELM}ipAllowlist`,
    validate: eachItem(cidr),
  }),
  flag({
    name: "csr-dns-pattern",
    type: "string",
    default: "",
    help:
      "CSR approver: extra DNS SANs a node may hold besides its name and DNS addresses, as a regular " +
      "expression over the whole lower-case name in which {node} is the node's name (e.g. " +
      "{node}\\.nodes\\.example\\.com). Empty: none.",
    helm: `${CSR_HELM}dnsPattern`,
    validate: parses((text) => text && parseDnsNamePattern(text)),
  }),
  flag({
    name: "csr-api-server-names",
    type: "list",
    default: "",
    help:
      "CSR approver: DNS names of the API server that no serving certificate may carry, besides kubernetes, " +
      "kubernetes.default and kubernetes.default.svc[.<domain>] (e.g. the control plane endpoint's name).",
    helm: `${CSR_HELM}apiServerNames`,
    validate: eachItem(dnsSubdomain),
  }),
  flag({
    name: "csr-max-expiration",
    type: "duration",
    default: "8760h",
    maxMs: MAX_EXPIRATION_MS,
    help:
      "CSR approver: the longest spec.expirationSeconds approved (kubelets ask for none; the signer " +
      "caps every certificate at kube-controller-manager's --cluster-signing-duration, 8760h by default).",
    helm: `${CSR_HELM}maxExpiration`,
    validate: (ms) => (ms >= MIN_EXPIRATION_MS ? undefined : "must be at least 10m (the API's minimum)"),
  }),
  flag({
    name: "csr-pending-timeout",
    type: "duration",
    default: "10m",
    help:
      "CSR approver: how long after its creation a CSR may wait for its uninitialized Node's addresses " +
      "before an address rule denies it.",
    helm: `${CSR_HELM}pendingTimeout`,
    validate: positive,
  }),
] as const;

/** The approver's config; the table's checks have passed, so the pattern and CIDRs parse without error. */
export function csrConfig(values: FlagValues<typeof csrFlagTable>): CsrConfig {
  return {
    apiServerNames: values["csr-api-server-names"],
    ...(values["csr-dns-pattern"] ? { extraDnsNames: parseDnsNamePattern(values["csr-dns-pattern"]) } : {}),
    ipAllowlist: values["csr-ip-allowlist"].map((text) => parseCidr(text) as Cidr),
    maxExpirationSeconds: Math.floor(values["csr-max-expiration"] / 1000),
    pendingTimeoutMs: values["csr-pending-timeout"],
  };
}
