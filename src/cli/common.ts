// The flags both programs share (kubeconfig, verbosity, logging, health endpoint), so their names,
// defaults and checks are written once.
import { flag } from "./flags.ts";
import { type BindAddress, parseBindAddress } from "./health.ts";
import { LOG_FORMATS, type LogFormat } from "./log.ts";
import { inRange, oneOf, parses } from "./validate.ts";

export interface CommonFlags {
  /** "" = in-cluster, then $KUBECONFIG, then ~/.kube/config (loadClientConfig's order). */
  kubeconfig: string;
  verbosity: number;
  logFormat: LogFormat;
  /** undefined = no health server. */
  healthBindAddress: BindAddress | undefined;
}

/** `helmPrefix` ends with a dot: "controller.", "nodeLifecycleController.controller.". */
export function commonFlagTable(options: { healthPort: number; helmPrefix: string }) {
  return [
    flag({
      name: "kubeconfig",
      type: "string",
      default: "",
      help: "Path to a kubeconfig file. Empty: in-cluster service account, then $KUBECONFIG, then ~/.kube/config.",
    }),
    flag({
      name: "v",
      type: "int",
      default: "0",
      help: "Log verbosity, 0-5 (klog levels: 2 changes, 4 debug, 5 trace).",
      helm: `${options.helmPrefix}verbosity`,
      validate: inRange(0, 5),
    }),
    flag({
      name: "log-format",
      type: "string",
      default: "text",
      help: "Log format: text (klog-like) or json (one object per line).",
      helm: `${options.helmPrefix}logFormat`,
      validate: oneOf(LOG_FORMATS),
    }),
    flag({
      name: "health-bind-address",
      type: "string",
      default: `:${options.healthPort}`,
      help:
        "Address serving /healthz, /readyz and /metrics: host:port, [ipv6]:port, :port for all addresses; " +
        "empty disables it.",
      helm: `${options.helmPrefix}healthBindAddress`,
      validate: parses(parseBindAddress),
    }),
  ] as const;
}

/** The typed common values out of a parsed table that includes commonFlagTable(). */
export function commonFlags(values: {
  kubeconfig: string;
  v: number;
  "log-format": string;
  "health-bind-address": string;
}): CommonFlags {
  return {
    kubeconfig: values.kubeconfig,
    verbosity: values.v,
    logFormat: values["log-format"] as LogFormat, // checked by oneOf(LOG_FORMATS)
    healthBindAddress: parseBindAddress(values["health-bind-address"]),
  };
}
