// What the tests of a controller run in-process against a real kube-apiserver share: its service account bound to
// a ClusterRole of exactly its RBAC rules (a missing grant fails the tests), namespaces of their own, the Events
// about an object, and the controller itself created from its definition as the program creates it, on
// informers that keep only the fields (and select what) it declares, with a client of its own whose writes count.
import type { Event, Namespace, Node, NodeAddress, Taint } from "kubernetes-types/core/v1.js";
import type { FlagSpec } from "../../src/cli/flags.ts";
import { createLogger } from "../../src/cli/log.ts";
import { Registry } from "../../src/cli/metrics.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { EventRecorder } from "../../src/kube/events.ts";
import { keepTransform } from "../../src/kube/fields.ts";
import { Informer } from "../../src/kube/informer.ts";
import { type KubeObject, Resource } from "../../src/kube/resource.ts";
import type { Watch } from "../../src/kube/sharedinformers.ts";
import type {
  Caches,
  ControllerDefinition,
  PolicyRule,
  RunningController,
  Watches,
} from "../../src/controller/definition.ts";
import type { ControlPlane } from "../../localcluster/controlplane.ts";

/**
 * A kubeconfig of kube-system's ServiceAccount `name`, bound to a ClusterRole of the same name with `rules`, and to
 * a Role of that name in each namespace of `namespaced`.
 */
export async function controllerKubeconfig(
  plane: ControlPlane,
  name: string,
  rules: PolicyRule[],
  namespaced: Record<string, PolicyRule[]> = {},
): Promise<string> {
  const account = { namespace: "kube-system", name };
  const rbac = "rbac.authorization.k8s.io";
  const grant = (kind: "ClusterRole" | "Role", rules: PolicyRule[], namespace?: string) => [
    { apiVersion: `${rbac}/v1`, kind, metadata: { name, namespace }, rules },
    {
      apiVersion: `${rbac}/v1`,
      kind: `${kind}Binding`,
      metadata: { name, namespace },
      roleRef: { apiGroup: rbac, kind, name },
      subjects: [{ kind: "ServiceAccount", ...account }],
    },
  ];
  const items = [
    ...grant("ClusterRole", rules),
    ...Object.entries(namespaced).flatMap(([namespace, rules]) => grant("Role", rules, namespace)),
  ];
  await plane.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items }));
  return plane.serviceAccountKubeconfig(account);
}

/** A Node as the kubelet and the agent would register it. */
export interface NodeSpec {
  addresses: NodeAddress[];
  ready?: "True" | "False" | "Unknown";
  labels?: Record<string, string>;
  taints?: Taint[];
  unschedulable?: boolean;
}

/** Registers a Node and writes its status (addresses, Ready). */
export async function createNode(nodes: Resource<Node>, name: string, spec: NodeSpec): Promise<void> {
  await nodes.create({
    metadata: { name, labels: spec.labels ?? {} },
    spec: { taints: spec.taints ?? [], unschedulable: spec.unschedulable },
  });
  const now = new Date().toISOString();
  const ready = { type: "Ready", status: spec.ready ?? "True", lastHeartbeatTime: now, lastTransitionTime: now };
  const status = { addresses: spec.addresses, conditions: [ready] };
  await nodes.patch(name, "merge", { status }, { subresource: "status" });
}

export async function setNodeReady(nodes: Resource<Node>, name: string, status: "True" | "False" | "Unknown") {
  const now = new Date().toISOString();
  const condition = { type: "Ready", status, lastHeartbeatTime: now, lastTransitionTime: now };
  await nodes.patch(name, "strategic", { status: { conditions: [condition] } }, { subresource: "status" });
}

let namespaces = 0;

/** A fresh namespace named `prefix`-pid-n. */
export async function createNamespace(admin: KubeClient, prefix: string): Promise<string> {
  const name = `${prefix}-${process.pid}-${++namespaces}`;
  await new Resource<Namespace>(admin, { group: "", version: "v1", plural: "namespaces" }).create({ metadata: { name } });
  return name;
}

/** The component name startController() reports a controller's Events as. */
export const reportingComponent = (definition: { name: string }) => `${definition.name}-test`;

/**
 * The type, reason and message of each Event `component` reported about an object. Others report about the same
 * objects (kube-apiserver's ClusterIP repair, for one), so a test that reads them all would depend on their timing.
 */
export async function eventsAbout(
  admin: KubeClient,
  component: string,
  namespace: string,
  name: string,
): Promise<{ type: string; reason: string; message: string; count: number }[]> {
  const events = new Resource<Event>(admin, { group: "", version: "v1", plural: "events", namespace });
  const { items } = await events.list({ fieldSelector: `involvedObject.name=${name},source=${component}` });
  return items.map(({ type, reason, message, count }) => ({
    type: type ?? "",
    reason: reason ?? "",
    message: message ?? "",
    count: count ?? 1,
  }));
}

/** An informer of a controller's watch, trimmed to the fields it keeps, through `client`. */
export function trimmedInformer<T extends KubeObject>(client: KubeClient, watch: Watch<T>): Informer<T> {
  const { resource, keep, labelSelector, fieldSelector } = watch;
  const transform = keepTransform(keep);
  return new Informer(new Resource<T>(client, resource), { transform, labelSelector, fieldSelector });
}

/** A controller run in this process by startController(). */
export interface ControllerRun<R, M> {
  controller: R;
  metrics: M;
  registry: Registry;
  /** Patches the controller's client has sent (its Events go through a client of their own). */
  writes(): number;
  /** Sets whether it leads (it starts as `leader`). */
  lead(leader: boolean): void;
  stop(): Promise<void>;
}

export interface ControllerRunOptions<C> {
  /** Of the controller's service account (controllerKubeconfig). */
  kubeconfig: string;
  config: C;
  /** Default true. */
  leader?: boolean;
  dryRun?: boolean;
}

/** Creates a controller from its definition on informers of its declared watches; starts it once synced. */
export async function startController<
  F extends readonly FlagSpec[],
  C,
  M,
  W extends Watches,
  R extends RunningController,
>(
  definition: ControllerDefinition<F, C, M, W, R>,
  options: ControllerRunOptions<C>,
): Promise<ControllerRun<R, M>> {
  const config = await loadClientConfig({ kubeconfig: options.kubeconfig, env: {} });
  const component = reportingComponent(definition);
  let writes = 0;
  const client = new KubeClient(config, {
    component,
    onResponse: (verb) => {
      if (verb === "patch") writes++;
    },
  });
  const eventsClient = new KubeClient(config, { component });
  const events = new EventRecorder(eventsClient, { component });
  const informers = Object.entries(definition.watches(options.config)).map(
    ([name, watch]) => [name, trimmedInformer(client, watch as Watch<KubeObject>)] as const,
  );
  const registry = new Registry();
  const metrics = definition.createMetrics(registry, `test_${definition.metricsSubsystem}`);
  let leader = options.leader ?? true;
  const controller = definition.create(
    {
      client,
      caches: Object.fromEntries(informers) as unknown as Caches<W>,
      events,
      log: createLogger({ verbosity: 2, format: "text", write: () => {} }),
      metrics,
      isLeader: () => leader,
      dryRun: options.dryRun ?? false,
    },
    options.config,
  );
  for (const [, informer] of informers) informer.start();
  await Promise.all(informers.map(([, informer]) => informer.waitForSync()));
  controller.start();
  return {
    controller,
    metrics,
    registry,
    writes: () => writes,
    lead: (next) => {
      leader = next;
    },
    async stop() {
      await controller.stop();
      await Promise.all(informers.map(([, informer]) => informer.stop()));
      await events.flush();
      client.close();
      eventsClient.close();
    },
  };
}
