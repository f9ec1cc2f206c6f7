// The informer against a real apiserver: one object by field selector, 2,000 nodes, resuming a
// watch across an apiserver restart without losing events, and relisting after 410 Gone.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { ConfigMap, Node } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { Informer } from "../../src/kube/informer.ts";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";

/** Runs `count` creations, `width` at a time. */
async function createMany(
  count: number,
  width: number,
  create: (i: number) => Promise<unknown>,
): Promise<void> {
  for (let start = 0; start < count; start += width) {
    await Promise.all(Array.from({ length: Math.min(width, count - start) }, (_, i) => create(start + i)));
  }
}

describe("Informer against the real apiserver", () => {
  let plane: ControlPlane;
  let client: KubeClient;
  let nodes: Resource<Node>;
  let configMaps: Resource<ConfigMap>;
  before(async () => {
    plane = await startControlPlane();
    client = new KubeClient(await loadClientConfig({ kubeconfig: plane.kubeconfigPath }), {
      component: "informer-test",
    });
    nodes = new Resource<Node>(client, NODE_RESOURCE);
    configMaps = new Resource<ConfigMap>(client, {
      group: "",
      version: "v1",
      plural: "configmaps",
      namespace: "default",
    });
  });
  after(async () => {
    client?.close();
    await plane?.stop();
  });

  test("a single-object informer (fieldSelector metadata.name) sees only that object's add, update and delete", async () => {
    const seen: string[] = [];
    const informer = new Informer(nodes, { fieldSelector: "metadata.name=solo" });
    informer.addHandlers({
      onAdd: (n) => seen.push(`add ${n.metadata?.name}`),
      onUpdate: (_, n) => seen.push(`update ${n.metadata?.name} ${n.metadata?.labels?.v}`),
      onDelete: (n) => seen.push(`delete ${n.metadata?.name}`),
    });
    informer.start();
    try {
      await informer.waitForSync();
      assert.equal(informer.hasSynced(), true);
      await nodes.create({ metadata: { name: "solo" } });
      await nodes.create({ metadata: { name: "other" } });
      await nodes.patch("solo", "merge", { metadata: { labels: { v: "2" } } });
      await nodes.delete("solo");
      await waitFor("the delete of solo", () => seen.includes("delete solo"));
      assert.deepEqual(seen, ["add solo", "update solo 2", "delete solo"]);
      assert.equal(informer.get("other"), undefined);
    } finally {
      await informer.stop();
    }
  });

  test("a transform that leaves objects out: never cached nor told, and one that turns so is told as deleted", async () => {
    const seen: string[] = [];
    const kept = (map: ConfigMap) => (map.data?.keep === "yes" ? map : undefined);
    const informer = new Informer(configMaps, { transform: kept, labelSelector: "case=dropping" });
    informer.addHandlers({
      onAdd: (map) => seen.push(`add ${map.metadata?.name}`),
      onUpdate: (_, map) => seen.push(`update ${map.metadata?.name}`),
      onDelete: (map) => seen.push(`delete ${map.metadata?.name}`),
    });
    const labels = { case: "dropping" };
    await configMaps.create({ metadata: { name: "listed-kept", labels }, data: { keep: "yes" } });
    await configMaps.create({ metadata: { name: "listed-left", labels }, data: { keep: "no" } });
    informer.start();
    try {
      await informer.waitForSync();
      await configMaps.create({ metadata: { name: "left", labels }, data: { keep: "no" } });
      await configMaps.patch("left", "merge", { data: { keep: "yes" } });
      await configMaps.patch("listed-kept", "merge", { data: { keep: "no" } });
      await configMaps.delete("listed-left");
      await configMaps.delete("left");
      await waitFor("the delete of left", () => seen.includes("delete left"));
      assert.deepEqual(seen, ["add listed-kept", "add left", "delete listed-kept", "delete left"]);
      assert.deepEqual(informer.list(), []);
    } finally {
      await informer.stop();
    }
  });

  test("relist(): the cache and its resourceVersion are as of a read after the call, without a reconnect's wait", async () => {
    const informer = new Informer(configMaps, { labelSelector: "relist=yes" });
    const seen: string[] = [];
    informer.addHandlers({ onAdd: (cm) => seen.push(`add ${cm.metadata?.name}`) });
    informer.start();
    try {
      await informer.waitForSync();
      const listed = informer.lastResourceVersion();
      assert.match(listed ?? "", /^[0-9]+$/);
      // A change the watch does not select moves no resourceVersion of it (bookmarks come about once a minute).
      const other = await configMaps.create({ metadata: { name: "unselected" } });
      const written = BigInt(other.metadata?.resourceVersion ?? "0");
      assert.equal(informer.lastResourceVersion(), listed);
      informer.relist();
      await waitFor("the relist's resourceVersion", () => BigInt(informer.lastResourceVersion() ?? "0") >= written);
      // And it watches on: a selected object still comes.
      await configMaps.create({ metadata: { name: "selected", labels: { relist: "yes" } } });
      await waitFor("the selected ConfigMap", () => seen.includes("add selected"));
    } finally {
      await informer.stop();
    }
  });

  test("an informer on 2,000 nodes syncs them page by page and follows changes", async () => {
    await createMany(2000, 25, (i) =>
      nodes.create({ metadata: { name: `bulk-${i}`, labels: { bulk: "yes" } } }),
    );
    const informer = new Informer(nodes, { labelSelector: "bulk=yes", pageSize: 500 });
    informer.start();
    try {
      await informer.waitForSync();
      assert.equal(informer.list().length, 2000);
      await Promise.all([...Array(10).keys()].map((i) => nodes.delete(`bulk-${i}`)));
      await Promise.all(
        [...Array(10).keys()].map((i) =>
          nodes.patch(`bulk-${100 + i}`, "merge", { metadata: { labels: { changed: "yes" } } }),
        ),
      );
      await waitFor(
        "deletes and updates to reach the cache",
        () =>
          informer.list().length === 1990 && informer.get("bulk-109")?.metadata?.labels?.changed === "yes",
      );
      assert.equal(informer.get("bulk-0"), undefined);
    } finally {
      await informer.stop();
    }
  });

  test("the watch resumes across an apiserver restart and no event is lost", async () => {
    const added = new Map<string, number>();
    const informer = new Informer(configMaps, { labelSelector: "restart=yes" });
    informer.addHandlers({
      onAdd: (cm) =>
        added.set(cm.metadata?.name as string, (added.get(cm.metadata?.name as string) ?? 0) + 1),
    });
    informer.start();
    try {
      await informer.waitForSync();
      // Writes race the restart: some events are in flight when the connection drops.
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          configMaps.create({ metadata: { name: `before-${i}`, labels: { restart: "yes" } } }),
        ),
      );
      await plane.restartApiserver();
      await createMany(20, 10, (i) =>
        configMaps.create({ metadata: { name: `after-${i}`, labels: { restart: "yes" } } }),
      );
      await waitFor("all 40 objects in the cache", () => informer.list().length === 40, 60_000);
      assert.equal(added.size, 40);
      assert.deepEqual([...new Set(added.values())], [1], "each object is added exactly once");
    } finally {
      await informer.stop();
    }
  });

  test("after etcd compaction a stale watch gets 410 Gone, and the relist converges the cache", async () => {
    await configMaps.create({ metadata: { name: "stays", labels: { gone: "yes" } }, data: { v: "1" } });
    await configMaps.create({ metadata: { name: "goes", labels: { gone: "yes" } } });
    const child = spawn(
      process.execPath,
      [path.join(import.meta.dirname, "informer-fixture.ts"), plane.kubeconfigPath, "gone=yes"],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    const lines: Record<string, unknown>[] = [];
    let buffer = "";
    child.stdout.on("data", (chunk: Buffer) => {
      buffer += chunk;
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        lines.push(JSON.parse(buffer.slice(0, i)));
        buffer = buffer.slice(i + 1);
      }
    });
    try {
      await waitFor("the fixture's informer to sync", () => lines.some((l) => l.synced === 2));
      // Freeze it and cut its connection first (else the kernel buffers the events for it), then
      // change what it watches, compact the history, and restart again so no cache holds it either.
      child.kill("SIGSTOP");
      await plane.restartApiserver();
      await configMaps.delete("goes");
      await configMaps.patch("stays", "merge", { data: { v: "2" } });
      await configMaps.create({ metadata: { name: "new", labels: { gone: "yes" } } });
      await plane.compactEtcd();
      await plane.restartApiserver();
      child.kill("SIGCONT");
      await waitFor(
        "the relist to converge",
        () =>
          lines.some((l) => l.delete === "goes") &&
          lines.some((l) => l.add === "new") &&
          lines.some((l) => l.update === "stays"),
        60_000,
      );
      assert.deepEqual(
        lines.filter((l) => "list" in l).map((l) => l.list),
        [200, 200],
        "one initial list and one relist after 410",
      );
      assert.deepEqual(lines.find((l) => l.update === "stays")?.data, { v: "2" });
    } finally {
      child.kill("SIGKILL");
    }
  });
});
