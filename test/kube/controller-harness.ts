// What the tests of a controller run in-process against a real kube-apiserver share: its service account bound to
// a ClusterRole of exactly its RBAC rules (a missing grant fails the tests), namespaces of their own, the Events
// about an object, and the controller itself created from its definition as the program creates it, on
// informers that keep only the fields (and select what) it declares, with a client of its own whose writes count.
import type { Event, Namespace } from "kubernetes-types/core/v1.js";
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
} from "../../src/manager/controller.ts";
import type { ControlPlane } from "../../localcluster/controlplane.ts";

/** A kubeconfig of kube-system's ServiceAccount `name`, bound to a ClusterRole of the same name with `rules`. */
export async function controllerKubeconfig(plane: ControlPlane, name: string, rules: PolicyRule[]): Promise<string> {
  const account = { namespace: "kube-system", name };
  const rbac = "rbac.authorization.k8s.io";
  const role = { apiVersion: `${rbac}/v1`, kind: "ClusterRole", metadata: { name }, rules };
  const binding = {
    apiVersion: `${rbac}/v1`,
    kind: "ClusterRoleBinding",
    metadata: { name },
    roleRef: { apiGroup: rbac, kind: "ClusterRole", name },
    subjects: [{ kind: "ServiceAccount", ...account }],
  };
  await plane.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: [role, binding] }));
  return plane.serviceAccountKubeconfig(account);
}

let namespaces = 0;

/** A fresh namespace named `prefix`-pid-n. */
export async function createNamespace(admin: KubeClient, prefix: string): Promise<string> {
  const name = `${prefix}-${process.pid}-${++namespaces}`;
  await new Resource<Namespace>(admin, { group: "", version: "v1", plural: "namespaces" }).create({ metadata: { name } });
  return name;
}

/** The type, reason and message of each Event about an object. */
export async function eventsAbout(
  admin: KubeClient,
  namespace: string,
  name: string,
): Promise<{ type: string; reason: string; message: string }[]> {
  const events = new Resource<Event>(admin, { group: "", version: "v1", plural: "events", namespace });
  const { items } = await events.list({ fieldSelector: `involvedObject.name=${name}` });
  return items.map(({ type, reason, message }) => ({ type: type ?? "", reason: reason ?? "", message: message ?? "" }));
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

/** Creates a controller from its definition on informers of its declared watches; starts it once they synced. */
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
  const component = `${definition.name}-test`;
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
