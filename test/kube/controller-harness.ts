// What the tests of a controller run in-process against a real kube-apiserver share: its service account bound to
// a ClusterRole of exactly its RBAC rules (a missing grant fails the tests), namespaces of their own, the Events
// about an object, and informers that keep only the fields the controller declares, as the program's shared
// informers trim them.
import type { Event, Namespace } from "kubernetes-types/core/v1.js";
import type { KubeClient } from "../../src/kube/client.ts";
import { keepTransform } from "../../src/kube/fields.ts";
import { Informer } from "../../src/kube/informer.ts";
import { type KubeObject, Resource } from "../../src/kube/resource.ts";
import type { Watch } from "../../src/kube/sharedinformers.ts";
import type { PolicyRule } from "../../src/manager/controller.ts";
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
export function trimmedInformer<T extends KubeObject>(client: KubeClient, { resource, keep }: Watch<T>): Informer<T> {
  return new Informer(new Resource<T>(client, resource), { transform: keepTransform(keep) });
}
