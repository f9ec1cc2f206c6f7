// The local-ccm agent's name and flags: the names and defaults of cozystack/local-ccm's flags, plus
// dual-stack lists and the CIDR / interface detection methods. This table also feeds --help, the
// README and the Helm values.
import { isIP } from "node:net";
import { type CommonFlags, commonFlags, commonFlagTable } from "../cli/common.ts";
import { type Env, flag, parseFlags, UsageError } from "../cli/flags.ts";
import { dnsSubdomain, eachItem, positive } from "../cli/validate.ts";
import { canonicalIP } from "./addresses.ts";
import type { DetectionMethod } from "./detect.ts";

export const PROGRAM = "local-ccm";

/** Between the control-plane components' ports (10257-10259) and anything common on a hostNetwork node. */
export const AGENT_HEALTH_PORT = 10263;

export interface AgentFlags extends CommonFlags {
  nodeName: string;
  /** undefined: InternalIPs are left as kubelet wrote them. */
  internal: DetectionMethod | undefined;
  /** undefined only when --external-ip-target is set empty and no other method is given. */
  external: DetectionMethod | undefined;
  removeTaint: boolean;
  reconcileIntervalMs: number;
  runOnce: boolean;
}

const targetProblem = (text: string) => {
  const ip = canonicalIP(text);
  if (ip === undefined) return `"${text}" is not an IP address`;
  return ip === "0.0.0.0" || ip === "::" ? `"${text}" is the unspecified address, not a target` : undefined;
};

const cidrProblem = (text: string) => {
  const match = /^([^/%]+)\/(\d{1,3})$/.exec(text);
  const family = match ? isIP(match[1] as string) : 0;
  if (!match || family === 0) return `"${text}" is not a CIDR (e.g. 198.18.0.0/15 or fd00::/8)`;
  const max = family === 4 ? 32 : 128;
  return Number(match[2]) > max ? `"${text}" has a prefix length above ${max}` : undefined;
};

// Linux interface names: 1-15 bytes, no '/' and no whitespace (dev_valid_name).
const interfaceProblem = (text: string) =>
  /^[^\s/]{1,15}$/.test(text) && text !== "." && text !== ".."
    ? undefined
    : `"${text}" is not an interface name (at most 15 characters, no '/' or spaces)`;

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
      validate: eachItem(cidrProblem),
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
    helm: "controller.removeTaint",
  }),
  flag({
    name: "reconcile-interval",
    type: "duration",
    default: "10s",
    help: "How often the local detection re-runs as a safety net; the API is called only when the addresses differ.",
    helm: "controller.reconcileInterval",
    validate: positive,
  }),
  flag({
    name: "run-once",
    type: "bool",
    default: "false",
    help: "Reconcile once and exit: 0 on success, 1 with the reason otherwise (usable as an init container).",
  }),
  ...commonFlagTable({ healthPort: AGENT_HEALTH_PORT, helmPrefix: "controller." }),
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
    reconcileIntervalMs: values["reconcile-interval"],
    runOnce: values["run-once"],
    ...commonFlags(values),
  };
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
      return { kind: "target", targets: items.map((ip) => canonicalIP(ip) as string) }; // validated
    case "cidr":
      return { kind: "cidr", cidrs: items };
    case "interface":
      return { kind: "interface", interfaces: items };
  }
}
