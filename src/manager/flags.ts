// node-lifecycle-controller's flags: the program's own (the choice of controllers, as kube-controller-manager's
// --controllers; leader election; dry run; and the flags every program has), then each registered controller's.
// This one table feeds parsing, --help, docs/reference.md and the Helm values.
import { type CommonFlags, commonFlags, commonFlagTable } from "../cli/common.ts";
import { type Env, type FlagSpec, type FlagValues, flag, parseFlags, UsageError } from "../cli/flags.ts";
import { dnsLabel, dnsSubdomain, parses, positive } from "../cli/validate.ts";
import { serviceAccountNamespace } from "../kube/config.ts";
import type { AnyController } from "../controller/definition.ts";
import { CONTROLLERS } from "./registry.ts";

export const PROGRAM = "node-lifecycle-controller";

/** Next to the agent's 10263, so both fit on one host even when run with hostNetwork. */
export const MANAGER_HEALTH_PORT = 10264;
export const MANAGER_METRICS_PORT = 10266;

const HELM = "nodeLifecycleController.controller.";

const controllerHelp = ({ name, enabledByDefault, helmEnabled, summary }: AnyController) =>
  `${name} (${enabledByDefault ? "on" : "off"} by default${helmEnabled ? `; Helm ${helmEnabled.join(" or ")}` : ""}): ` +
  summary;

/**
 * kube-controller-manager's rule: `-name` turns a controller off, `name` on, and `*` turns on those on by
 * default; what no item names is off. Throws a one-line Error for an unknown name or an empty choice.
 */
export function parseControllers(items: readonly string[]): AnyController[] {
  const named = new Map<string, boolean>();
  for (const item of items) {
    if (item === "*") continue;
    const name = item.replace(/^-/, "");
    if (!CONTROLLERS.some((controller) => controller.name === name))
      throw new Error(`unknown controller "${name}" (known: ${CONTROLLERS.map((each) => each.name).join(", ")})`);
    named.set(name, !item.startsWith("-"));
  }
  const all = items.includes("*");
  const enabled = CONTROLLERS.filter(({ name, enabledByDefault }) => named.get(name) ?? (all && enabledByDefault));
  if (enabled.length === 0) throw new Error("no controller enabled");
  return enabled;
}

const programFlagTable = [
  flag({
    name: "controllers",
    type: "list",
    default: "*",
    help:
      "Controllers to run, as kube-controller-manager's: * runs those on by default, name turns one on, " +
      `-name turns one off. ${CONTROLLERS.map(controllerHelp).join(" ")}`,
    validate: parses(parseControllers),
  }),
  flag({
    name: "dry-run",
    type: "bool",
    default: "false",
    help:
      "A trial: log and event what would be done and write nothing, for " +
      CONTROLLERS.filter(({ dryRun }) => dryRun).map(({ name, dryRun }) => `${name} (${dryRun})`).join(" and ") +
      `; ${CONTROLLERS.filter(({ dryRun }) => !dryRun).map(({ name }) => name).join(" and ")} write as usual.`,
    helm: `${HELM}dryRun`,
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
] as const;

const commonTable = commonFlagTable({
  healthPort: MANAGER_HEALTH_PORT,
  metricsPort: MANAGER_METRICS_PORT,
  helmPrefix: HELM,
  network: "the pod",
  healthWhy: "its own network namespace, where kubelet probes the pod IP",
});

/** The program's one table: its own flags, each registered controller's, then the common ones. */
export const managerFlagTable: readonly FlagSpec[] = [
  ...programFlagTable,
  ...CONTROLLERS.flatMap((controller) => controller.flags),
  ...commonTable,
];

export interface LeaderElectionFlags {
  enabled: boolean;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  resourceName: string;
  resourceNamespace: string;
}

export interface ManagerFlags extends CommonFlags {
  leaderElection: LeaderElectionFlags;
  dryRun: boolean;
  /** The controllers --controllers turns on, in registry order. */
  controllers: AnyController[];
  /** Every registered controller's config, by its name, parsed from its flags. */
  configs: Map<string, unknown>;
}

type ProgramValues = FlagValues<typeof programFlagTable> & FlagValues<typeof commonTable>;

export function parseManagerFlags(
  argv: readonly string[],
  env: Env,
  podNamespace: () => string | undefined = serviceAccountNamespace,
): ManagerFlags {
  const { values, given } = parseFlags(managerFlagTable, argv, env);
  const own = values as unknown as ProgramValues;
  // Checked by the table's parses(…): this parses without error.
  const controllers = parseControllers(own.controllers);
  const classless = controllers.flatMap(({ classlessFlags = [] }) =>
    classlessFlags.filter((flag) => (values as Record<string, unknown>)[flag] === true).map((flag) => `--${flag}`),
  );
  if (classless.length > 1) {
    throw new UsageError(`${classless.join(" and ")} both claim Services without a loadBalancerClass: turn on one`);
  }
  return {
    leaderElection: leaderElection(own, given.has("leader-elect-resource-namespace"), podNamespace),
    dryRun: own["dry-run"],
    controllers,
    // Parsed once, whether or not it runs, as every flag is checked whether or not it is read.
    configs: new Map(CONTROLLERS.map((definition) => [definition.name, definition.parse(values)])),
    ...commonFlags(own),
  };
}

/** The config of a registered controller, typed by its definition. */
export function configOf<C>(flags: ManagerFlags, definition: { name: string; parse(values: never): C }): C {
  return flags.configs.get(definition.name) as C;
}

function leaderElection(
  values: ProgramValues,
  namespaceGiven: boolean,
  podNamespace: () => string | undefined,
): LeaderElectionFlags {
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
  return {
    enabled: values["leader-elect"],
    leaseDurationMs,
    renewDeadlineMs,
    retryPeriodMs,
    resourceName: values["leader-elect-resource-name"],
    resourceNamespace: namespaceGiven
      ? values["leader-elect-resource-namespace"]
      : (podNamespace() ?? values["leader-elect-resource-namespace"]),
  };
}
