// The processes measured by bench/memory.ts, by their first argument:
// - `bare`: Node 24 doing nothing;
// - `https <url> <ca file>`: Node's https module with one kept-alive connection to the apiserver,
//   the least any HTTPS client holds (an anonymous GET of /livez);
// - `informer <kubeconfig> <node>`: the API layer with an informer on one Node, what the agent keeps
//   open at rest.
import { readFileSync } from "node:fs";

async function https(url: string, caFile: string): Promise<void> {
  const { Agent, get } = await import("node:https");
  const agent = new Agent({ keepAlive: true, ca: readFileSync(caFile) });
  await new Promise((resolve, reject) => get(`${url}/livez`, { agent }, (res) => res.resume().on("end", resolve)).on("error", reject));
}

async function informer(kubeconfig: string, nodeName: string): Promise<void> {
  const { KubeClient } = await import("../src/kube/client.ts");
  const { loadClientConfig } = await import("../src/kube/config.ts");
  const { Informer } = await import("../src/kube/informer.ts");
  const { NODE_RESOURCE, Resource } = await import("../src/kube/resource.ts");
  const client = new KubeClient(await loadClientConfig({ kubeconfig }), { component: "bench-memory" });
  const nodes = new Informer(new Resource(client, NODE_RESOURCE), {
    fieldSelector: `metadata.name=${nodeName}`,
  });
  nodes.start();
  await nodes.waitForSync();
}

async function main(): Promise<void> {
  const [mode, a, b] = process.argv.slice(2) as [string, string, string];
  if (mode === "https") await https(a, b);
  if (mode === "informer") await informer(a, b);
  setInterval(() => {}, 1 << 30); // stay, to be sampled by the parent
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
