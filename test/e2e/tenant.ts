// A namespace editor, the actor of a shared cluster's hostile tests: a ServiceAccount of its own namespace bound
// there to the built-in ClusterRole `edit` (what a tenant's developers usually get), acting through a token of its
// own, so that every request is authorised as that account and nothing more.
import type { Cluster } from "../../localcluster/cluster.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { isApiError } from "../../src/kube/errors.ts";

export interface Tenant {
  namespace: string;
  /** The editor's own client (close() it). */
  client: KubeClient;
  /** The account's name as the API server sees it. */
  username: string;
  close(): void;
}

/** Creates the namespace (if missing), the editor account and its RoleBinding to `edit`. */
export async function namespaceEditor(cluster: Cluster, namespace: string): Promise<Tenant> {
  const name = "editor";
  const create = (path: string, body: unknown) =>
    cluster.admin.request({ method: "POST", path, body }).catch((err) => {
      if (!isApiError(err, "AlreadyExists")) throw err;
    });
  await create("/api/v1/namespaces", { metadata: { name: namespace } });
  await create(`/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings`, {
    metadata: { name: `${name}-edit` },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
    subjects: [{ kind: "ServiceAccount", namespace, name }],
  });
  const kubeconfig = await cluster.controlPlane.serviceAccountKubeconfig({ namespace, name });
  const client = new KubeClient(await loadClientConfig({ kubeconfig, env: {} }), { component: "tenant-editor" });
  return { namespace, client, username: `system:serviceaccount:${namespace}:${name}`, close: () => client.close() };
}
