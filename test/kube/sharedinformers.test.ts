// Shared informers against a real apiserver: consumers of one resource share one watch (counted in the API
// requests), each sees what its own selectors select and at least the fields it keeps; the same selectors stay
// server-side; selectors that cannot be evaluated locally are refused when consumers differ.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { ConfigMap } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { Resource } from "../../src/kube/resource.ts";
import { SharedInformers, watch } from "../../src/kube/sharedinformers.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";

const CONFIGMAPS = { group: "", version: "v1", plural: "configmaps" };

describe("SharedInformers against the real apiserver", () => {
  let plane: ControlPlane;
  let client: KubeClient;
  const verbs: string[] = [];
  before(async () => {
    plane = await startControlPlane();
    client = new KubeClient(await loadClientConfig({ kubeconfig: plane.kubeconfigPath }), {
      component: "shared-informers-test",
      onResponse: (verb) => verbs.push(verb),
    });
    await plane.kubectl(["create", "namespace", "shared-a"]);
  });
  after(async () => {
    client?.close();
    await plane?.stop();
  });

  test("two consumers with different selectors share one unselected watch, each seeing its own view", async () => {
    const configMaps = (namespace: string) => new Resource<ConfigMap>(client, { ...CONFIGMAPS, namespace });
    await configMaps("default").create({ metadata: { name: "kubernetes-like", labels: { app: "x" } }, data: { a: "1" } });
    await configMaps("shared-a").create({ metadata: { name: "other", labels: { app: "y" } }, data: { b: "2" } });
    const informers = new SharedInformers(client, { onError: (resource, err) => assert.fail(`${resource}: ${err}`) });
    const narrow = informers.watch(
      "narrow",
      watch<ConfigMap>({
        resource: { ...CONFIGMAPS, namespace: "default" },
        fieldSelector: "metadata.name=kubernetes-like",
        keep: [["data", "a"]],
      }),
    );
    const wide = informers.watch("wide", watch<ConfigMap>({ resource: CONFIGMAPS, labelSelector: "app", keep: [["data"]] }));
    const seen: string[] = [];
    narrow.addHandlers({
      onAdd: (cm) => seen.push(`add ${cm.metadata?.name}`),
      onDelete: (cm) => seen.push(`delete ${cm.metadata?.name}`),
    });
    const seenWide: string[] = [];
    wide.addHandlers({
      onAdd: (cm) => seenWide.push(`add ${cm.metadata?.name}`),
      onUpdate: (_, cm) => seenWide.push(`update ${cm.metadata?.name}`),
      onDelete: (cm) => seenWide.push(`delete ${cm.metadata?.name}`),
    });
    const listsBefore = verbs.filter((verb) => verb === "list").length;
    informers.start();
    try {
      await informers.waitForSync();
      assert.equal(verbs.filter((verb) => verb === "list").length - listsBefore, 1, "one LIST for both consumers");
      assert.deepEqual(
        narrow.list().map((cm) => [cm.metadata?.name, cm.data]),
        [["kubernetes-like", { a: "1" }]],
      );
      const names = wide.list().map((cm) => `${cm.metadata?.namespace}/${cm.metadata?.name}`).sort();
      assert.deepEqual(names, ["default/kubernetes-like", "shared-a/other"]);
      assert.deepEqual(wide.get("shared-a/other")?.data, { b: "2" });
      assert.equal(narrow.get("shared-a/other"), undefined);
      await configMaps("default").delete("kubernetes-like");
      await waitFor("the narrow view's delete", () => seen.includes("delete kubernetes-like"));
      assert.deepEqual(seen, ["add kubernetes-like", "delete kubernetes-like"]);
      // Entering a view by a change is an add to its consumer, leaving it a delete.
      await configMaps("shared-a").create({ metadata: { name: "late" } });
      await configMaps("shared-a").patch("late", "merge", { metadata: { labels: { app: "z" } } });
      await configMaps("shared-a").patch("late", "merge", { data: { c: "3" } });
      await configMaps("shared-a").patch("late", "merge", { metadata: { labels: { app: null } } });
      await waitFor("late leaving the wide view", () => seenWide.includes("delete late"));
      assert.deepEqual(
        seenWide.filter((line) => line.endsWith(" late")),
        ["add late", "update late", "delete late"],
      );
    } finally {
      await informers.stop();
    }
  });

  test("consumers asking the same selectors keep server-side selection; a field selector not evaluable here is refused at registration when they differ", async () => {
    const same = new SharedInformers(client, { onError: () => undefined });
    const selected = { resource: CONFIGMAPS, labelSelector: "app=y", keep: [["data"]] } as const;
    const first = same.watch("first", watch<ConfigMap>(selected));
    const second = same.watch("second", watch<ConfigMap>(selected));
    same.start();
    try {
      await same.waitForSync();
      assert.deepEqual(first.list().map((cm) => cm.metadata?.name), ["other"]);
      assert.deepEqual(second.list().map((cm) => cm.metadata?.name), ["other"]);
      // Server-side selection: the labels, which no consumer keeps, are not in the cache.
      assert.equal(first.list()[0]?.metadata?.labels, undefined);
    } finally {
      await same.stop();
    }

    const differing = new SharedInformers(client, { onError: () => undefined });
    differing.watch("by-data", watch<ConfigMap>({ resource: CONFIGMAPS, fieldSelector: "data.a=1", keep: [] }));
    assert.throws(() => differing.watch("all", watch<ConfigMap>({ resource: CONFIGMAPS, keep: [] })), {
      message: 'by-data, all watch configmaps, and the field selector "data.a=1" cannot be evaluated locally: one watch cannot serve them all',
    });
  });
});
