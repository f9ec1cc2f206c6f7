// The node-lifecycle-controller's name and flags: the names and defaults of cozystack/local-ccm's
// node-lifecycle-controller, plus probes, safety limits and leader election, the choice of controllers
// (kube-controller-manager's --controllers) and the kubelet-serving CSR approver's rules. This table also
// feeds --help, the README and the Helm values.
import { type CommonFlags, commonFlags, commonFlagTable } from "../cli/common.ts";
import { type Env, flag, parseFlags, UsageError } from "../cli/flags.ts";
import {
  all,
  atLeast,
  cidr,
  dnsLabel,
  dnsSubdomain,
  eachItem,
  inRange,
  noDuplicates,
  oneOf,
  parses,
  positive,
} from "../cli/validate.ts";
import type { CsrConfig } from "../csr/decide.ts";
import { parseDnsNamePattern } from "../csr/dnsnames.ts";
import { serviceAccountNamespace } from "../kube/config.ts";
import {
  type KeyValueMatcher,
  type LabelSelector,
  parseKeyValueList,
  parseLabelSelector,
} from "../kube/labelselector.ts";
import { type Cidr, parseCidr } from "../net/ip.ts";

export const PROGRAM = "node-lifecycle-controller";

/** Next to the agent's 10263, so both fit on one host even when run with hostNetwork. */
export const LIFECYCLE_HEALTH_PORT = 10264;
export const LIFECYCLE_METRICS_PORT = 10266;

/**
 * The controllers this program hosts, and whether `*` runs each. The CSR approver is off unless named:
 * approving certificates is a security decision the operator opts into (Helm: csrApproval.enabled), and a
 * cluster without serverTLSBootstrap kubelets has nothing for it to do.
 */
export const CONTROLLERS = { "node-lifecycle": true, "kubelet-serving-csr": false } as const;
export type ControllerName = keyof typeof CONTROLLERS;

const isControllerName = (name: string): name is ControllerName => Object.hasOwn(CONTROLLERS, name);

/**
 * kube-controller-manager's rule: `-name` turns a controller off, `name` on, and `*` turns on those on by
 * default; what no item names is off. Throws a one-line Error for an unknown name or an empty choice.
 */
export function parseControllers(items: readonly string[]): Set<ControllerName> {
  const named = new Map<string, boolean>();
  for (const item of items) {
    if (item === "*") continue;
    const name = item.replace(/^-/, "");
    if (!isControllerName(name))
      throw new Error(`unknown controller "${name}" (known: ${Object.keys(CONTROLLERS).join(", ")})`);
    named.set(name, !item.startsWith("-"));
  }
  const all = items.includes("*");
  const enabled = (Object.keys(CONTROLLERS) as ControllerName[]).filter(
    (name) => named.get(name) ?? (all && CONTROLLERS[name]),
  );
  if (enabled.length === 0) throw new Error("no controller enabled");
  return new Set(enabled);
}

/** The API's limits of spec.expirationSeconds: at least 10 minutes, at most an int32 of seconds. */
const MIN_EXPIRATION_MS = 600_000;
const MAX_EXPIRATION_MS = (2 ** 31 - 1) * 1000;

export const PROBES = ["icmp", "tcp"] as const;
export type Probe = (typeof PROBES)[number];

export interface LifecycleFlags extends CommonFlags {
  watchAutoscalerTaint: boolean;
  /** undefined: --node-selector is empty. */
  nodeSelector: LabelSelector | undefined;
  protectedLabels: KeyValueMatcher[];
  protectedAnnotations: KeyValueMatcher[];
  notReadyTimeoutMs: number;
  pingTimeoutMs: number;
  pingCount: number;
  probes: Probe[];
  kubeletPort: number;
  reconcileIntervalMs: number;
  maxDeletionsPerMinute: number;
  unhealthyThreshold: number;
  leaderElection: {
    enabled: boolean;
    leaseDurationMs: number;
    renewDeadlineMs: number;
    retryPeriodMs: number;
    resourceName: string;
    resourceNamespace: string;
  };
  dryRun: boolean;
  controllers: Set<ControllerName>;
  csr: CsrConfig;
}

const HELM = "nodeLifecycleController.controller.";
const CSR_HELM = "csrApproval.rules.";

export const lifecycleFlagTable = [
  flag({
    name: "watch-autoscaler-taint",
    type: "bool",
    default: "true",
    help:
      "Without --node-selector: true watches only nodes with the ToBeDeletedByClusterAutoscaler:NoSchedule " +
      "taint, false all non-control-plane nodes.",
    helm: `${HELM}watchAutoscalerTaint`,
  }),
  flag({
    name: "node-selector",
    type: "string",
    default: "",
    help:
      "Label selector of the nodes to watch (e.g. node.kubernetes.io/pool=spot); when set, " +
      "--watch-autoscaler-taint is ignored.",
    helm: `${HELM}nodeSelector`,
    validate: parses(parseLabelSelector),
  }),
  flag({
    name: "protected-labels",
    type: "string",
    default: "",
    help: "Comma list of key or key=value: a node with a matching label is never deleted.",
    helm: `${HELM}protectedLabels`,
    validate: parses((text) => parseKeyValueList(text, "label")),
  }),
  flag({
    name: "protected-annotations",
    type: "string",
    default: "",
    help: "Comma list of key or key=value: a node with a matching annotation is never deleted.",
    helm: `${HELM}protectedAnnotations`,
    validate: parses((text) => parseKeyValueList(text, "annotation")),
  }),
  flag({
    name: "not-ready-timeout",
    type: "duration",
    default: "5m",
    help:
      "How long a node must have been NotReady (from its Ready condition's lastTransitionTime) before it " +
      "is probed and may be deleted.",
    helm: `${HELM}notReadyTimeout`,
  }),
  flag({
    name: "ping-timeout",
    type: "duration",
    default: "5s",
    help: "How long to wait for each ICMP echo reply and each TCP connect.",
    helm: `${HELM}pingTimeout`,
    validate: positive,
  }),
  flag({
    name: "ping-count",
    type: "int",
    default: "3",
    help: "ICMP echo attempts per address.",
    helm: `${HELM}pingCount`,
    validate: atLeast(1),
  }),
  flag({
    name: "probes",
    type: "list",
    default: "icmp,tcp",
    help:
      "Probes that can prove a node alive, any answer from any address counting: icmp (echo), " +
      "tcp (connect to --kubelet-port).",
    helm: `${HELM}probes`,
    validate: all<string[]>(
      (items) => (items.length === 0 ? `name at least one of: ${PROBES.join(", ")}` : undefined),
      eachItem(oneOf(PROBES)),
      noDuplicates,
    ),
  }),
  flag({
    name: "kubelet-port",
    type: "int",
    default: "10250",
    help: "Port of the TCP probe (kubelet's); a refused connection counts as alive, since the host answered.",
    helm: `${HELM}kubeletPort`,
    validate: inRange(1, 65535),
  }),
  flag({
    name: "reconcile-interval",
    type: "duration",
    default: "30s",
    help: "How often the watched nodes are checked, from the informer's cache (no LIST).",
    helm: `${HELM}reconcileInterval`,
    validate: positive,
  }),
  flag({
    name: "max-deletions-per-minute",
    type: "int",
    default: "10",
    help: "At most this many node deletions in any minute.",
    helm: `${HELM}maxDeletionsPerMinute`,
    validate: atLeast(1),
  }),
  flag({
    name: "unhealthy-threshold",
    type: "float",
    default: "0.55",
    help:
      "Pause deletions while more than 2 non-control-plane nodes exist and at least this fraction of them " +
      "is NotReady (0 < x <= 1).",
    helm: `${HELM}unhealthyThreshold`,
    validate: (value) => (value > 0 && value <= 1 ? undefined : "must be greater than 0 and at most 1"),
  }),
  flag({
    name: "leader-elect",
    type: "bool",
    default: "true",
    help: "Elect a leader on a Lease so that, of several replicas, only one probes, deletes and approves.",
    helm: `${HELM}leaderElection.enabled`,
  }),
  flag({
    name: "leader-elect-lease-duration",
    type: "duration",
    default: "15s",
    help: "How long a non-leader waits after the last renewal seen before it takes the lease.",
    helm: `${HELM}leaderElection.leaseDuration`,
    validate: positive,
  }),
  flag({
    name: "leader-elect-renew-deadline",
    type: "duration",
    default: "10s",
    help: "How long the leader keeps trying to renew before it stops leading; less than the lease duration.",
    helm: `${HELM}leaderElection.renewDeadline`,
    validate: positive,
  }),
  flag({
    name: "leader-elect-retry-period",
    type: "duration",
    default: "2s",
    help: "How often to try to acquire or renew the lease; less than the renew deadline.",
    helm: `${HELM}leaderElection.retryPeriod`,
    validate: positive,
  }),
  flag({
    name: "leader-elect-resource-name",
    type: "string",
    default: "node-lifecycle-controller",
    help: "Name of the Lease.",
    helm: `${HELM}leaderElection.resourceName`,
    validate: dnsSubdomain,
  }),
  flag({
    name: "leader-elect-resource-namespace",
    type: "string",
    default: "kube-system",
    env: "POD_NAMESPACE",
    help:
      "Namespace of the Lease. Unset: the pod's namespace (POD_NAMESPACE, else the service account's), " +
      "else kube-system.",
    helm: `${HELM}leaderElection.resourceNamespace`,
    validate: dnsLabel,
  }),
  flag({
    name: "dry-run",
    type: "bool",
    default: "false",
    help: 'Log and event what would be done ("would delete", "would approve", "would deny") and write nothing.',
    helm: `${HELM}dryRun`,
  }),
  flag({
    name: "controllers",
    type: "list",
    default: "*",
    help:
      "Controllers to run, as kube-controller-manager's: * runs those on by default, name turns one on, " +
      "-name turns one off. node-lifecycle (on by default) deletes dead Nodes; kubelet-serving-csr (off by " +
      "default; Helm csrApproval.enabled) approves kubelet serving certificates.",
    validate: parses(parseControllers),
  }),
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
  ...commonFlagTable({ healthPort: LIFECYCLE_HEALTH_PORT, metricsPort: LIFECYCLE_METRICS_PORT, helmPrefix: HELM }),
] as const;

export function parseLifecycleFlags(
  argv: readonly string[],
  env: Env,
  podNamespace: () => string | undefined = serviceAccountNamespace,
): LifecycleFlags {
  const { values, given } = parseFlags(lifecycleFlagTable, argv, env);
  const leaseDurationMs = values["leader-elect-lease-duration"];
  const renewDeadlineMs = values["leader-elect-renew-deadline"];
  const retryPeriodMs = values["leader-elect-retry-period"];
  // The elector's own rule (src/kube/leaderelection.ts), reported as a usage error before it runs.
  if (!(leaseDurationMs > renewDeadlineMs)) {
    throw new UsageError("--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline");
  }
  if (!(renewDeadlineMs > retryPeriodMs)) {
    throw new UsageError("--leader-elect-renew-deadline must be greater than --leader-elect-retry-period");
  }
  const resourceNamespace = given.has("leader-elect-resource-namespace")
    ? values["leader-elect-resource-namespace"]
    : (podNamespace() ?? values["leader-elect-resource-namespace"]);
  return {
    watchAutoscalerTaint: values["watch-autoscaler-taint"],
    // Checked by the table's parses(…) above: these parse without error.
    nodeSelector: values["node-selector"] ? parseLabelSelector(values["node-selector"]) : undefined,
    protectedLabels: parseKeyValueList(values["protected-labels"], "label"),
    protectedAnnotations: parseKeyValueList(values["protected-annotations"], "annotation"),
    notReadyTimeoutMs: values["not-ready-timeout"],
    pingTimeoutMs: values["ping-timeout"],
    pingCount: values["ping-count"],
    probes: values.probes as Probe[], // checked by oneOf(PROBES)
    kubeletPort: values["kubelet-port"],
    reconcileIntervalMs: values["reconcile-interval"],
    maxDeletionsPerMinute: values["max-deletions-per-minute"],
    unhealthyThreshold: values["unhealthy-threshold"],
    leaderElection: {
      enabled: values["leader-elect"],
      leaseDurationMs,
      renewDeadlineMs,
      retryPeriodMs,
      resourceName: values["leader-elect-resource-name"],
      resourceNamespace,
    },
    dryRun: values["dry-run"],
    // Checked by the table's parses(…) and eachItem(…) above: these parse without error.
    controllers: parseControllers(values.controllers),
    csr: {
      apiServerNames: values["csr-api-server-names"],
      ...(values["csr-dns-pattern"] ? { extraDnsNames: parseDnsNamePattern(values["csr-dns-pattern"]) } : {}),
      ipAllowlist: values["csr-ip-allowlist"].map((text) => parseCidr(text) as Cidr),
      maxExpirationSeconds: Math.floor(values["csr-max-expiration"] / 1000),
      pendingTimeoutMs: values["csr-pending-timeout"],
    },
    ...commonFlags(values),
  };
}
