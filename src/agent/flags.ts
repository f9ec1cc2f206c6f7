// The local-ccm agent's name and flags: the names and defaults of cozystack/local-ccm's flags, plus
// dual-stack lists and the CIDR / interface detection methods. This table also feeds --help, the
// docs' flag table and the Helm values.
import { type CommonFlags, commonFlags, commonFlagTable } from "../cli/common.ts";
import { type Env, flag, parseFlags, UsageError } from "../cli/flags.ts";
import { cidr, dnsLabel, dnsSubdomain, eachItem, oneOf, parses, positive } from "../cli/validate.ts";
import { type LabelSelector, parseLabelSelector } from "../kube/labelselector.ts";
import { canonicalIp, ipProblem } from "../net/ip.ts";
import { announcerLeaseName } from "../pools/announcement.ts";
import type { DetectionMethod } from "./detect.ts";
import type { MetadataMode } from "./metadata/client.ts";
import { PROVIDERS } from "./metadata/providers.ts";
import { type InitKind, type InitRule, parseInitRule, TAINT_EFFECTS } from "./metadata/nodeinit.ts";
import { type LabelField, parseRule, type Rule, type RulesConfig, templateProblem } from "./metadata/rules.ts";

export const PROGRAM = "local-ccm";

/** Between the control-plane components' ports (10257-10259) and anything common on a hostNetwork node. */
export const AGENT_HEALTH_PORT = 10263;
export const AGENT_METRICS_PORT = 10265;

export interface AgentFlags extends CommonFlags {
  nodeName: string;
  /** undefined: InternalIPs are left as kubelet wrote them. */
  internal: DetectionMethod | undefined;
  /** undefined only when --external-ip-target is set empty and no other method is given. */
  external: DetectionMethod | undefined;
  removeTaint: boolean;
  requireLocalNode: boolean;
  reconcileIntervalMs: number;
  runOnce: boolean;
  metadata: MetadataFlags;
  /** Set when the agent announces the LoadBalancer addresses assigned to its node (layer 2). */
  announce: AnnounceFlags | undefined;
  /** Set when the agent speaks BGP (--bgp-speaker). */
  bgp: BgpFlags | undefined;
}

export interface BgpFlags {
  /** Where the Secrets the BGPPeers' passwordSecretRef name live. */
  secretNamespace: string;
  /** Services without a loadBalancerClass are announced too (the pool controller's --lb-bgp-claim-classless). */
  claimClassless: boolean;
  /** This node's pod CIDRs are announced to the peers that take them (--bgp-advertise-pod-cidrs). */
  advertisePodCidrs: boolean;
  /** The Node's NetworkUnavailable condition follows its pod CIDRs' routes (--bgp-network-unavailable-condition). */
  networkUnavailableCondition: boolean;
}

export interface AnnounceFlags {
  /** Where the node's announcer Lease lives. */
  leaseNamespace: string;
  /** Announce only on these links; empty: on every link with a MAC. */
  interfaces: string[];
  /** Announce (and keep a Lease) only while this node's labels match; undefined: on every node. */
  nodeSelector: LabelSelector | undefined;
}

export interface MetadataFlags {
  mode: MetadataMode;
  timeoutMs: number;
  rules: RulesConfig;
  updateLabels: boolean;
  /** --node-label-rules then --node-taint-rules. */
  initRules: InitRule[];
}

// Checked as kube-apiserver checks an IP field (ipProblem), then kept in the form Kubernetes writes (canonicalIp).
const targetProblem = (text: string) => {
  const problem = ipProblem(text);
  if (problem) return problem;
  const ip = canonicalIp(text);
  return ip === "0.0.0.0" || ip === "::" ? `"${text}" is the unspecified address, not a target` : undefined;
};

// Linux interface names: 1-15 bytes, no '/' and no whitespace (dev_valid_name).
const interfaceProblem = (text: string) =>
  /^[^\s/]{1,15}$/.test(text) && text !== "." && text !== ".."
    ? undefined
    : `"${text}" is not an interface name (at most 15 characters, no '/' or spaces)`;

const ruleProblem = (field: LabelField) => (text: string) => {
  const rule = parseRule(field, text);
  return typeof rule === "string" ? rule : undefined;
};

/** The Helm value of a metadata flag: metadata.<flag in camelCase>. */
const metadataValue = (name: string) => `metadata.${name.replace(/-(\w)/g, (_, c: string) => c.toUpperCase())}`;

// Rules are flags rather than a config file: the flag table stays the one source for --help, the
// docs and the Helm values, and no ConfigMap has to be mounted. The price: no commas in a pattern.
const ruleFlag = <N extends string>(name: N, field: LabelField, label: string, example: string) =>
  flag({
    name,
    type: "list",
    default: "",
    help:
      `Comma-separated rules giving ${label} where instance metadata does not: ` +
      `<cidr|name|product|dmi.<file>>:<pattern>=<value>, first match wins (cidr: an InternalIP inside; name: regular expression on the node name; product: on the DMI ` +
      `product name; dmi.<file>: on /sys/class/dmi/id/<file>, e.g. dmi.sys_vendor; $1-$9 in the value are the groups), e.g. ${example}.`,
    helm: metadataValue(name),
    validate: eachItem(ruleProblem(field)),
  });

const initRuleProblem = (kind: InitKind) => (text: string) => {
  const rule = parseInitRule(kind, text);
  return typeof rule === "string" ? rule : undefined;
};

const initRuleFlag = <N extends string>(name: N, kind: InitKind, form: string, example: string) =>
  flag({
    name,
    type: "list",
    default: "",
    help:
      `Comma-separated rules giving the Node ${kind}s once, while it still has the uninitialized taint: ` +
      `<matcher>=${form}, with the matchers of --zone-rules plus region:, zone: and instance-type: (regular ` +
      `expressions on the Node's resolved metadata); every rule that matches adds its ${kind} (the first ` +
      `per key${kind === "taint" ? " and effect" : ""}), never changed afterwards; the key is literal, $1-$9 in the value are the groups. ` +
      `Keys in kubernetes.io/ and k8s.io/ are refused${kind === "label" ? ", except node-role.kubernetes.io/<role> (not control-plane or master)" : ""}. E.g. ${example}.`,
    helm: metadataValue(name),
    validate: eachItem(initRuleProblem(kind)),
  });

const metadataFlags = [
  flag({
    name: "instance-metadata",
    type: "string",
    default: "none",
    help:
      "Where the Node's providerID, region, zone and instance type come from: none, auto (the first of hetzner, " +
      "gce, azure, openstack, aws whose link-local metadata service answers in its own format), or one of " +
      `${PROVIDERS.join(", ")}.`,
    helm: "metadata.instanceMetadata",
    validate: oneOf(["none", "auto", ...PROVIDERS]),
  }),
  flag({
    name: "metadata-timeout",
    type: "duration",
    default: "10s",
    help:
      "How long one metadata lookup may take, retries included. A configured provider that does not answer by then " +
      "keeps the uninitialized taint (Event, metric, --run-once exits 1) and is asked again with backoff.",
    helm: "metadata.timeout",
    validate: positive,
  }),
  flag({
    name: "provider-id",
    type: "string",
    default: "",
    help:
      "spec.providerID where instance metadata gives none, from the Node's facts: {nodeName}, {systemUUID}, " +
      "{machineID}, {productName}; e.g. local://{systemUUID}. Written only while the Node has none.",
    helm: "metadata.providerID",
    validate: (value) => {
      if (value === "") return undefined;
      // cluster-autoscaler and the cloud providers read a providerID as <scheme>://<id>.
      if (!/^[a-z][a-z0-9+.-]*:\/\/\S*$/.test(value)) return "must look like <scheme>://<id>, without spaces";
      return templateProblem(value);
    },
  }),
  ruleFlag("region-rules", "region", "topology.kubernetes.io/region", "name:^([a-z]+)-=$1"),
  ruleFlag("zone-rules", "zone", "topology.kubernetes.io/zone", "cidr:10.1.0.0/24=rack-1,cidr:10.2.0.0/24=rack-2"),
  ruleFlag("instance-type-rules", "instanceType", "node.kubernetes.io/instance-type", "product:^PowerEdge (R\\d+)$=$1"),
  flag({
    name: "update-metadata-labels",
    type: "bool",
    default: "false",
    help:
      "Keep region, zone and instance-type labels in line with metadata after initialisation, replacing other " +
      "values; by default they are only added while the Node is uninitialised and never changed.",
    helm: "metadata.updateLabels",
  }),
  initRuleFlag("node-label-rules", "label", "<key>=<value>", "cidr:10.1.0.0/24=example.com/rack=r1,dmi.product_name:^(PowerEdge) =example.com/family=$1"),
  initRuleFlag("node-taint-rules", "taint", `<key>=<value>:<${TAINT_EFFECTS.join("|")}>`, "name:^gpu-=nvidia.com/gpu=present:NoSchedule"),
] as const;

const announceFlags = [
  flag({
    name: "lb-l2-announce",
    type: "bool",
    default: "false",
    help:
      "Announce the LoadBalancer addresses the address pool controller assigns to this node (ARP, NDP), only " +
      "while this node's announcer Lease is surely valid; needs CAP_NET_RAW. Renewing the Lease (every second) " +
      "is then the agent's only API request at rest.",
    // One switch for both halves of layer-2 mode: the pool controller runs, and the agents announce.
    helm: "loadBalancer.l2.enabled",
  }),
  flag({
    name: "lb-l2-lease-namespace",
    type: "string",
    default: "",
    env: "POD_NAMESPACE",
    help: "Namespace of the announcer Leases (the chart: the release namespace); needed with --lb-l2-announce.",
    validate: (value) => (value === "" ? undefined : dnsLabel(value)),
  }),
  flag({
    name: "lb-l2-interfaces",
    type: "list",
    default: "",
    help: "Comma-separated interface names: announce only on these links. Empty: on every link with a MAC.",
    helm: "loadBalancer.l2.interfaces",
    validate: eachItem(interfaceProblem),
  }),
  flag({
    name: "lb-l2-node-selector",
    type: "string",
    default: "",
    help:
      "Label selector of the nodes that announce (e.g. node-role.kubernetes.io/edge); only those keep an announcer " +
      "Lease, watch their Services and open raw sockets, following their Node's labels. Empty: every node.",
    helm: "loadBalancer.l2.announcerNodes",
    validate: parses(parseLabelSelector),
  }),
  flag({
    name: "bgp-speaker",
    type: "bool",
    default: "false",
    help:
      "(experimental) Peer with the routers of the BGPPeers that select this node (their nodeSelector) and " +
      "announce there the addresses of LoadBalancer Services of class local-ccm.io/bgp while this node is " +
      "eligible (Ready, initialised, not excluded; for externalTrafficPolicy Local, while it has a ready endpoint).",
    // One switch for both halves of BGP mode: the pool controller serves the class, and the agents speak.
    helm: "bgp.enabled",
  }),
  flag({
    name: "bgp-secret-namespace",
    type: "string",
    default: "",
    env: "POD_NAMESPACE",
    help:
      "Namespace of the Secrets that BGPPeers' passwordSecretRef name (the chart: the release namespace); needed " +
      "with --bgp-speaker.",
    validate: (value) => (value === "" ? undefined : dnsLabel(value)),
  }),
  flag({
    name: "bgp-claim-classless",
    type: "bool",
    default: "false",
    help:
      "Also announce LoadBalancer Services without a loadBalancerClass, as class local-ccm.io/bgp: those the " +
      "address pool controller gives addresses with --lb-bgp-claim-classless. Needs --bgp-speaker.",
    helm: "bgp.claimClassless",
  }),
  flag({
    name: "bgp-advertise-pod-cidrs",
    type: "bool",
    default: "false",
    help:
      "Also announce this node's own pod CIDRs (its Node's spec.podCIDRs, both families), next hop this node, to " +
      "the peers that select it and do not opt out (BGPPeer spec.advertisePodCIDRs: false), as a cloud's route " +
      "controller would: for a CNI in native routing mode across subnets. Withdrawn once the Node is being deleted. " +
      "Needs --bgp-speaker.",
    helm: "bgp.advertisePodCIDRs",
  }),
  flag({
    name: "bgp-network-unavailable-condition",
    type: "bool",
    default: "false",
    help:
      "Keep this Node's NetworkUnavailable condition as cloud-provider's route controller does: False " +
      "(RouteCreated) once every pod CIDR is held by a peer whose session is Established, True (NoRouteCreated) " +
      "when one is not. Not with a CNI that sets the condition itself (Calico, Cilium, flannel, ...). Needs " +
      "--bgp-advertise-pod-cidrs.",
    helm: "bgp.networkUnavailableCondition",
  }),
] as const;

type AddressType = "internal" | "external";
type Method = "target" | "cidr" | "interface";

const detectionFlags = <T extends AddressType>(type: T, label: string, defaultTarget: string) =>
  [
    flag({
      name: `${type}-ip-target`,
      type: "list",
      default: defaultTarget,
      help:
        `Comma-separated IPs of either family; for each, the source address the kernel would use to reach it becomes an ${label}.` +
        (type === "external"
          ? " The default applies only when neither --external-ip-cidr nor --external-ip-interface is set; set it empty to manage no ExternalIP."
          : " Empty: InternalIPs are left to kubelet."),
      helm: `ipDetection.${type}IPTarget`,
      validate: eachItem(targetProblem),
    }),
    flag({
      name: `${type}-ip-cidr`,
      type: "list",
      default: "",
      help: `Comma-separated CIDRs; the host's addresses inside each become ${label}s. Excludes --${type}-ip-target and --${type}-ip-interface.`,
      helm: `ipDetection.${type}IPCIDR`,
      validate: eachItem(cidr),
    }),
    flag({
      name: `${type}-ip-interface`,
      type: "list",
      default: "",
      help: `Comma-separated interface names; their addresses become ${label}s. Excludes --${type}-ip-target and --${type}-ip-cidr.`,
      helm: `ipDetection.${type}IPInterface`,
      validate: eachItem(interfaceProblem),
    }),
  ] as const;

export const agentFlagTable = [
  flag({
    name: "node-name",
    type: "string",
    default: "",
    env: "NODE_NAME",
    required: true,
    help: "Name of the Node this agent manages (the DaemonSet sets NODE_NAME from spec.nodeName).",
    validate: dnsSubdomain,
  }),
  ...detectionFlags("internal", "InternalIP", ""),
  ...detectionFlags("external", "ExternalIP", "8.8.8.8"),
  flag({
    name: "remove-taint",
    type: "bool",
    default: "true",
    help: "Remove the node.cloudprovider.kubernetes.io/uninitialized taint once the Node has an InternalIP.",
    helm: "agent.removeTaint",
  }),
  flag({
    name: "reconcile-interval",
    type: "duration",
    default: "10s",
    help: "How often the local detection re-runs as a safety net; the API is called only when the addresses differ.",
    helm: "agent.reconcileInterval",
    validate: positive,
  }),
  flag({
    name: "run-once",
    type: "bool",
    default: "false",
    help: "Reconcile once and exit: 0 on success, 1 with the reason otherwise (usable as an init container).",
  }),
  flag({
    name: "require-local-node",
    type: "bool",
    default: "true",
    help:
      "Write the Node only if one of its IPs (kubelet's provided-node-ip, else its InternalIPs and ExternalIPs) is an " +
      "address of this host; a Node with no IP yet is written. false: manage a Node from another machine on purpose.",
  }),
  ...metadataFlags,
  ...announceFlags,
  ...commonFlagTable({
    healthPort: AGENT_HEALTH_PORT,
    metricsPort: AGENT_METRICS_PORT,
    helmPrefix: "agent.",
    network: "the host (the agent's pod uses the host network)",
    healthWhy:
      "the agent starts before its Node has an address (kubelet under --cloud-provider=external without " +
      "--node-ip sets none), and until then kubelet probes localhost, after that the node IP it reports. " +
      'Where every kubelet has --node-ip, "[$(POD_IP)]:' +
      AGENT_HEALTH_PORT +
      '" (the chart passes POD_IP) binds only that node IP',
  }),
] as const;

export function parseAgentFlags(argv: readonly string[], env: Env): AgentFlags {
  const { values, given } = parseFlags(agentFlagTable, argv, env);
  const lists = (type: AddressType) => ({
    target: values[`${type}-ip-target`],
    cidr: values[`${type}-ip-cidr`],
    interface: values[`${type}-ip-interface`],
  });
  const isGiven = (type: AddressType) => (method: Method) => given.has(`${type}-ip-${method}`);
  return {
    nodeName: values["node-name"],
    internal: detection("internal", lists("internal"), isGiven("internal")),
    external: detection("external", lists("external"), isGiven("external")),
    removeTaint: values["remove-taint"],
    requireLocalNode: values["require-local-node"],
    reconcileIntervalMs: values["reconcile-interval"],
    runOnce: values["run-once"],
    metadata: {
      mode: values["instance-metadata"] as MetadataMode, // validated
      timeoutMs: values["metadata-timeout"],
      updateLabels: values["update-metadata-labels"],
      initRules: [...initRules("label", values["node-label-rules"]), ...initRules("taint", values["node-taint-rules"])],
      rules: {
        providerIDTemplate: values["provider-id"],
        rules: [
          ...rules("region", values["region-rules"]),
          ...rules("zone", values["zone-rules"]),
          ...rules("instanceType", values["instance-type-rules"]),
        ],
      },
    },
    announce: announce(values["node-name"], values["lb-l2-announce"], {
      leaseNamespace: values["lb-l2-lease-namespace"],
      interfaces: values["lb-l2-interfaces"],
      nodeSelector: values["lb-l2-node-selector"] ? parseLabelSelector(values["lb-l2-node-selector"]) : undefined,
    }),
    bgp: bgp(values["bgp-speaker"], values["bgp-secret-namespace"], {
      claimClassless: values["bgp-claim-classless"],
      advertisePodCidrs: values["bgp-advertise-pod-cidrs"],
      networkUnavailableCondition: values["bgp-network-unavailable-condition"],
    }),
    ...commonFlags(values),
  };
}

/** The speaker's settings when it is on; refused without a Secret namespace, or with an option it lacks. */
function bgp(
  on: boolean,
  secretNamespace: string,
  options: Omit<BgpFlags, "secretNamespace">,
): BgpFlags | undefined {
  if (options.networkUnavailableCondition && !options.advertisePodCidrs)
    throw new UsageError("--bgp-network-unavailable-condition needs --bgp-advertise-pod-cidrs");
  if (!on) {
    if (options.claimClassless) throw new UsageError("--bgp-claim-classless needs --bgp-speaker");
    if (options.advertisePodCidrs) throw new UsageError("--bgp-advertise-pod-cidrs needs --bgp-speaker");
    return undefined;
  }
  if (secretNamespace === "") throw new UsageError("--bgp-speaker needs --bgp-secret-namespace (or env POD_NAMESPACE)");
  return { secretNamespace, ...options };
}

/** Announcing's settings when it is on; its bad input (no namespace, a node name too long for a Lease) refused. */
function announce(node: string, on: boolean, flags: AnnounceFlags): AnnounceFlags | undefined {
  if (!on) return undefined;
  if (flags.leaseNamespace === "")
    throw new UsageError("--lb-l2-announce needs --lb-l2-lease-namespace (or env POD_NAMESPACE)");
  if (announcerLeaseName(node) === undefined)
    throw new UsageError(`--lb-l2-announce: node name "${node}" is too long for its announcer Lease's name`);
  return flags;
}

/**
 * At most one method per address type. The default external target (8.8.8.8) is only a default:
 * an explicit --external-ip-cidr or --external-ip-interface replaces it, while an explicit
 * --external-ip-target next to either is a conflict.
 */
function detection(
  type: AddressType,
  lists: Record<Method, string[]>,
  isGiven: (method: Method) => boolean,
): DetectionMethod | undefined {
  const methods: Method[] = ["target", "cidr", "interface"];
  const chosen = methods.filter((method) => isGiven(method) && lists[method].length > 0);
  if (chosen.length > 1) {
    const names = chosen.map((method) => `--${type}-ip-${method}`).join(" and ");
    const what = type === "internal" ? "InternalIPs" : "ExternalIPs";
    throw new UsageError(`${names} both choose how ${what} are found: use one`);
  }
  const method = chosen[0] ?? "target"; // none given: the target flag's default, if any
  const items = lists[method];
  if (items.length === 0) return undefined;
  switch (method) {
    case "target":
      return { kind: "target", targets: items.map((ip) => canonicalIp(ip) as string) }; // validated
    case "cidr":
      return { kind: "cidr", cidrs: items };
    case "interface":
      return { kind: "interface", interfaces: items };
  }
}

/** Node init rule texts the flag layer validated, parsed. */
function initRules(kind: InitKind, texts: string[]): InitRule[] {
  return texts.map((text) => parseInitRule(kind, text) as InitRule);
}

/** Rule texts the flag layer validated, parsed. */
function rules(field: LabelField, texts: string[]): Rule[] {
  return texts.map((text) => parseRule(field, text) as Rule);
}
