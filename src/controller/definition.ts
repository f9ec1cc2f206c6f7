// What a controller hosted by node-lifecycle-controller is: one definition object, listed once in
// src/manager/registry.ts.
// From it come its flags (parsed into its config), its metrics names, its RBAC in the chart, the watches the
// program shares between controllers, and the running controller itself. The program has no branch per
// controller: anything a controller needs that is not here belongs in its definition.
import type { FlagSpec, FlagValues } from "../cli/flags.ts";
import type { Logger } from "../cli/log.ts";
import type { Registry } from "../cli/metrics.ts";
import type { KubeClient } from "../kube/client.ts";
import type { EventRecorder } from "../kube/events.ts";
import type { AnyWatch, Cache, Watch } from "../kube/sharedinformers.ts";

/**
 * The source.component and reportingComponent of a controller's Events, as kube-controller-manager's controllers
 * each have their own ("node-controller", "service-controller"): node-lifecycle's stays the program's name.
 */
export const eventSource = (definition: { name: string }): string => `${definition.name}-controller`;

/** A ClusterRole or Role rule, as the chart writes it. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  resourceNames?: string[];
  verbs: string[];
}

/** The rules a controller needs: cluster-wide, and in named namespaces (Roles). */
export interface Rbac {
  cluster: PolicyRule[];
  namespaced?: Record<string, PolicyRule[]>;
  /** Rules in the namespace the chart is installed in (a flag of the controller names it to the program). */
  releaseNamespace?: PolicyRule[];
}

/** A controller's watches by the name it reads its cache under. */
export type Watches = Record<string, AnyWatch>;

export type Caches<W extends Watches> = { [K in keyof W]: W[K] extends Watch<infer T> ? Cache<T> : never };

export interface ControllerContext<M, W extends Watches> {
  client: KubeClient;
  /** One cache per declared watch, shared with other controllers' watches of the same resource. */
  caches: Caches<W>;
  /** Its own recorder, its Events' source being eventSource(definition). */
  events: Pick<EventRecorder, "record">;
  /** With controller=<name>. */
  log: Logger;
  /** Its own metrics, named node_lifecycle_controller_<metricsSubsystem><name>. */
  metrics: M;
  /** True while this replica may act (always, without leader election). */
  isLeader(): boolean;
  /** --dry-run, for a controller whose definition has `dryRun`; always false for one without. */
  dryRun: boolean;
}

/** A controller once created: the program starts it when the caches have synced and stops it at shutdown. */
export interface RunningController {
  /** Called once, when every cache has synced. */
  start(): void;
  /** Called when this replica starts leading: act on everything cached. */
  resync(): void;
  /** Stops acting, and waits for what is in flight (a write already sent completes). */
  stop(): Promise<void>;
}

export interface ControllerDefinition<
  F extends readonly FlagSpec[],
  C,
  M,
  W extends Watches,
  R extends RunningController = RunningController,
> {
  /** The --controllers item and the `controller` log key. */
  name: string;
  /** Whether --controllers=* runs it. */
  enabledByDefault: boolean;
  /**
   * The Helm values that run it, any one of them true (the chart grants its RBAC only then, and turns it off in
   * --controllers if need be).
   */
  helmEnabled?: readonly string[];
  /** One line for docs/reference.md's table of controllers. */
  summary: string;
  /** Its flags, appended to the program's one table. */
  flags: F;
  /**
   * Its bool flags that make it serve LoadBalancer Services without a loadBalancerClass, if it has any: of these
   * flags of the controllers that run, at most one may be on, or two would write the same Services.
   */
  classlessFlags?: readonly F[number]["name"][];
  /** Its config from its flags' parsed values (their validate checks have passed). */
  parse(values: FlagValues<F>): C;
  /**
   * What it says instead of writing under --dry-run (for --help), if --dry-run holds its writes back. Without it,
   * it writes as usual in dry run: --dry-run is a trial of node deletion and CSR decisions, never a reason to leave
   * LoadBalancer Services pending.
   */
  dryRun?: string;
  /** Its metrics names' part after node_lifecycle_controller_ ("" keeps the first controller's names). */
  metricsSubsystem: string;
  /** Registers its metrics, each named `prefix` + name. */
  createMetrics(registry: Registry, prefix: string): M;
  rbac: Rbac;
  /** The resources it reads, with selectors and the fields it keeps. */
  watches(config: C): W;
  create(context: ControllerContext<M, W>, config: C): R;
}

/** Any controller definition, as the registry lists them. */
export type AnyController = ControllerDefinition<readonly FlagSpec[], unknown, unknown, Watches>;

/** Identity that checks a definition against its own types. */
export function defineController<
  const F extends readonly FlagSpec[],
  C,
  M,
  W extends Watches,
  R extends RunningController,
>(definition: ControllerDefinition<F, C, M, W, R>): ControllerDefinition<F, C, M, W, R> {
  return definition;
}
