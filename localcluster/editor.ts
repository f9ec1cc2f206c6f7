// A namespace editor: the tenant of a shared cluster, as hostile tests act as it. A ServiceAccount bound to the
// built-in ClusterRole `edit` in one namespace (RoleBinding), which is what a cluster admin gives a team. `edit` is
// aggregated by kube-controller-manager (clusterrole-aggregation): the control plane must run it.
import { type ClientOptions, KubeClient } from "../src/kube/client.ts";
import { loadClientConfig } from "../src/kube/config.ts";
import { isApiError } from "../src/kube/errors.ts";
import type { ControlPlane } from "./controlplane.ts";
import { waitFor } from "./wait.ts";

export interface NamespaceEditor {
  namespace: string;
  /** The user name the API server sees. */
  user: string;
  kubeconfig: string;
}

/** Creates `namespace` (if absent), the ServiceAccount `name` there and its `edit` RoleBinding; waits for the grant. */
export async function namespaceEditor(
  plane: Pick<ControlPlane, "admin" | "serviceAccountKubeconfig">,
  namespace: string,
  name = "editor",
): Promise<NamespaceEditor> {
  const exists = (err: unknown) => {
    if (!isApiError(err, "AlreadyExists")) throw err;
  };
  await plane.admin.request({ method: "POST", path: "/api/v1/namespaces", body: { metadata: { name: namespace } } }).catch(exists);
  const kubeconfig = await plane.serviceAccountKubeconfig({ namespace, name });
  await plane.admin.request({
    method: "POST",
    path: `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings`,
    body: {
      metadata: { name: `${name}-edit` },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
      subjects: [{ kind: "ServiceAccount", name, namespace }],
    },
  });
  const user = `system:serviceaccount:${namespace}:${name}`;
  // The grant holds once the aggregation has filled `edit` and the authorizer has seen the binding.
  await waitFor(`${user} may edit Services in ${namespace}`, async () => {
    const review = await plane.admin.request<{ status?: { allowed?: boolean } }>({
      method: "POST",
      path: "/apis/authorization.k8s.io/v1/subjectaccessreviews",
      body: {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: { user, groups: ["system:serviceaccounts"], resourceAttributes: { namespace, verb: "patch", resource: "services" } },
      },
    });
    return review.status?.allowed === true;
  }, 60_000);
  return { namespace, user, kubeconfig };
}

/** A client that acts as the editor, through its own token (close() it). */
export async function editorClient(editor: NamespaceEditor, options: Partial<ClientOptions> = {}): Promise<KubeClient> {
  return new KubeClient(await loadClientConfig({ kubeconfig: editor.kubeconfig, env: {} }), {
    component: "namespace-editor",
    ...options,
  });
}
