// The process measured by bench/memory.ts: the API layer with an informer on one Node (what the
// agent keeps open at rest). With no kubeconfig it is the baseline: Node 24 doing nothing.
import { processMemory } from "./proc.ts";

async function main(): Promise<void> {
  const [kubeconfig, nodeName] = process.argv.slice(2);
  if (kubeconfig) {
    const { KubeClient } = await import("../src/kube/client.ts");
    const { loadClientConfig } = await import("../src/kube/config.ts");
    const { Informer } = await import("../src/kube/informer.ts");
    const { Resource } = await import("../src/kube/resource.ts");
    const client = new KubeClient(await loadClientConfig({ kubeconfig }), { component: "bench-memory" });
    const informer = new Informer(new Resource(client, { group: "", version: "v1", plural: "nodes" }), { fieldSelector: `metadata.name=${nodeName}` });
    informer.start();
    await informer.waitForSync();
  }
  // Report when asked, so the parent samples both processes at the same moments.
  process.on("message", () => process.send?.(processMemory()));
  setInterval(() => {}, 1 << 30);
}

void main();
