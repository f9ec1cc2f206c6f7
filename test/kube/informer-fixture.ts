// A separate process running an informer on ConfigMaps, so a test can SIGSTOP it (and make it
// miss changes) or kill it. Prints one JSON line per handler call and per LIST response.
import type { ConfigMap } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { Informer } from "../../src/kube/informer.ts";
import { Resource } from "../../src/kube/resource.ts";

const [kubeconfig, labelSelector] = process.argv.slice(2);
const print = (line: object) => process.stdout.write(`${JSON.stringify(line)}\n`);
const client = new KubeClient(await loadClientConfig({ kubeconfig }), {
  component: "informer-fixture",
  onResponse: (verb, code) => {
    if (verb === "list") print({ list: code });
  },
});
const informer = new Informer(
  new Resource<ConfigMap>(client, { group: "", version: "v1", plural: "configmaps", namespace: "default" }),
  {
    labelSelector,
  },
);
informer.addHandlers({
  onAdd: (cm) => print({ add: cm.metadata?.name }),
  onUpdate: (_, cm) => print({ update: cm.metadata?.name, data: cm.data }),
  onDelete: (cm) => print({ delete: cm.metadata?.name }),
});
informer.start();
await informer.waitForSync();
print({ synced: informer.list().length });
