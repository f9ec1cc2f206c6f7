// The node-lifecycle controller's flags: the names and defaults of cozystack/local-ccm's node-lifecycle-controller,
// plus probes and safety limits. They join the program's one flag table (manager/flags.ts), which also feeds
// --help, docs/reference.md and the Helm values.
import { type FlagValues, flag } from "../cli/flags.ts";
import { all, atLeast, eachItem, inRange, noDuplicates, oneOf, parses, positive } from "../cli/validate.ts";
import {
  type KeyValueMatcher,
  type LabelSelector,
  parseKeyValueList,
  parseLabelSelector,
} from "../kube/labelselector.ts";

export const PROBES = ["icmp", "tcp"] as const;
export type Probe = (typeof PROBES)[number];

export interface LifecycleFlags {
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
}

const HELM = "nodeLifecycleController.controller.";

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
    helm: "nodeLifecycleController.nodeDeletion.nodes",
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
] as const;

/** The typed values; the table's checks have passed, so the selector and lists parse without error. */
export function lifecycleFlags(values: FlagValues<typeof lifecycleFlagTable>): LifecycleFlags {
  return {
    watchAutoscalerTaint: values["watch-autoscaler-taint"],
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
  };
}
