// The flags both programs share (kubeconfig, verbosity, logging, health and metrics endpoints), so their names,
// defaults and checks are written once.
import { flag, UsageError } from "./flags.ts";
import { type BindAddress, parseBindAddress } from "./health.ts";
import { LOG_FORMATS, type LogFormat } from "./log.ts";
import { eachItem, inRange, oneOf, parses } from "./validate.ts";

export interface CommonFlags {
  /** "" = in-cluster, then $KUBECONFIG, then ~/.kube/config (loadClientConfig's order). */
  kubeconfig: string;
  verbosity: number;
  logFormat: LogFormat;
  /** undefined = no health server. */
  healthBindAddress: BindAddress | undefined;
  /** undefined = no /metrics. */
  metrics: MetricsFlags | undefined;
}

export interface MetricsFlags {
  address: BindAddress;
  /** HTTPS, TokenReview + SubjectAccessReview; false: plain HTTP, anyone may read. */
  secure: boolean;
  /** Served by the health server (not secure, same address as --health-bind-address), as before the flag existed. */
  withHealth: boolean;
  /** Both or neither; neither: a self-signed certificate made at start. */
  certFile?: string;
  keyFile?: string;
  /** TokenReview spec.audiences; empty: the API server's own. */
  tokenAudiences: string[];
}

/**
 * `helmPrefix` ends with a dot: "agent.", "nodeLifecycleController.controller.". `network`: whose addresses
 * ":port" binds where the program runs ("the host", "the pod"); `healthWhy`: why the default binds them all.
 * The health flag's help is the one statement of where health listens (--help, the README table, the chart's
 * values refer to it), so it is made from the default itself.
 */
export function commonFlagTable(options: {
  healthPort: number;
  metricsPort: number;
  helmPrefix: string;
  network: string;
  healthWhy: string;
}) {
  const healthDefault = `:${options.healthPort}`;
  const healthHost = parseBindAddress(healthDefault)?.host;
  const healthBinds = healthHost === undefined ? `every address of ${options.network}` : `only ${healthHost}`;
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
      default: healthDefault,
      help:
        "Address serving /healthz and /readyz over plain HTTP, unauthenticated (kubelet's probes carry no " +
        `credentials): host:port, [ip]:port, :port for every address; empty disables it. The default binds ` +
        `${healthBinds}: ${options.healthWhy}.`,
      helm: `${options.helmPrefix}healthBindAddress`,
      validate: parses(parseBindAddress),
    }),
    flag({
      name: "metrics-bind-address",
      type: "string",
      default: `:${options.metricsPort}`,
      help:
        "Address serving /metrics, as --health-bind-address; empty disables it. The same address as " +
        "--health-bind-address with --secure-metrics=false: one plain HTTP server for both.",
      helm: `${options.helmPrefix}metricsBindAddress`,
      validate: parses(parseBindAddress),
    }),
    flag({
      name: "secure-metrics",
      type: "bool",
      default: "true",
      help:
        "Serve /metrics over HTTPS to callers whose bearer token the API server authenticates (TokenReview) and " +
        "authorizes for get on the non-resource URL /metrics (SubjectAccessReview). false: plain HTTP, no checks.",
      helm: `${options.helmPrefix}secureMetrics`,
    }),
    flag({
      name: "metrics-cert-file",
      type: "string",
      default: "",
      help: "PEM certificate (chain) for secure /metrics, with --metrics-key-file. Empty: self-signed, made at start.",
    }),
    flag({
      name: "metrics-key-file",
      type: "string",
      default: "",
      help: "PEM private key of --metrics-cert-file.",
    }),
    flag({
      name: "metrics-token-audiences",
      type: "list",
      default: "",
      help:
        "Secure /metrics accept only bearer tokens minted for one of these audiences (TokenReview spec.audiences), " +
        "e.g. a projected ServiceAccount token the API server itself refuses. Empty: the API server's own audiences.",
      helm: `${options.helmPrefix}metricsTokenAudiences`,
      // An audience is matched as written: blanks are a typo, never part of one.
      validate: eachItem((audience) => (/\s/.test(audience) ? `"${audience}" has a blank in it` : undefined)),
    }),
  ] as const;
}

/** The typed common values out of a parsed table that includes commonFlagTable(). */
export function commonFlags(values: {
  kubeconfig: string;
  v: number;
  "log-format": string;
  "health-bind-address": string;
  "metrics-bind-address": string;
  "secure-metrics": boolean;
  "metrics-cert-file": string;
  "metrics-key-file": string;
  "metrics-token-audiences": string[];
}): CommonFlags {
  return {
    kubeconfig: values.kubeconfig,
    verbosity: values.v,
    logFormat: values["log-format"] as LogFormat, // checked by oneOf(LOG_FORMATS)
    healthBindAddress: parseBindAddress(values["health-bind-address"]),
    metrics: metricsFlags(values),
  };
}

function metricsFlags(values: Parameters<typeof commonFlags>[0]): MetricsFlags | undefined {
  const address = parseBindAddress(values["metrics-bind-address"]);
  const secure = values["secure-metrics"];
  const certFile = values["metrics-cert-file"] || undefined;
  const keyFile = values["metrics-key-file"] || undefined;
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new UsageError("--metrics-cert-file and --metrics-key-file go together: give both or neither");
  }
  if (!address) return undefined;
  if (!secure && certFile) throw new UsageError("--metrics-cert-file needs --secure-metrics (HTTPS)");
  const tokenAudiences = values["metrics-token-audiences"].filter((audience) => audience !== "");
  if (!secure && tokenAudiences.length > 0) {
    throw new UsageError("--metrics-token-audiences needs --secure-metrics (tokens are reviewed only then)");
  }
  const sameAddress = values["metrics-bind-address"] === values["health-bind-address"];
  const withHealth = sameAddress && !secure;
  // Port 0 asks for any free port: two servers get two.
  if (sameAddress && secure && address.port !== 0) {
    throw new UsageError(
      `--metrics-bind-address=${values["metrics-bind-address"]} is --health-bind-address: secure metrics (HTTPS) ` +
        "need an address of their own, or --secure-metrics=false to serve both over plain HTTP",
    );
  }
  return { address, secure, withHealth, tokenAudiences, ...(certFile && keyFile ? { certFile, keyFile } : {}) };
}
