// The request layer and verbs against a real kube-apiserver: every verb, every error type,
// paging, selectors, subresources, dry-run, and the retry rules.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, test } from "node:test";
import type { ConfigMap, Node } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { type ApiError, isApiError } from "../../src/kube/errors.ts";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";

const isReason = (reason: ApiError["reason"]) => (err: unknown) => isApiError(err, reason);

describe("KubeClient verbs against the real apiserver", () => {
  let plane: ControlPlane;
  let client: KubeClient;
  let configMaps: Resource<ConfigMap>;
  let nodes: Resource<Node>;
  before(async () => {
    plane = await startControlPlane({ audit: true });
    client = new KubeClient(await loadClientConfig({ kubeconfig: plane.kubeconfigPath }), {
      component: "client-test",
    });
    configMaps = new Resource<ConfigMap>(client, {
      group: "",
      version: "v1",
      plural: "configmaps",
      namespace: "default",
    });
    nodes = new Resource<Node>(client, NODE_RESOURCE);
  });
  after(async () => {
    client?.close();
    await plane?.stop();
  });

  test("create, get, and AlreadyExists", async () => {
    const created = await configMaps.create({ metadata: { name: "one" }, data: { a: "1" } });
    assert.ok(created.metadata?.uid);
    assert.deepEqual((await configMaps.get("one")).data, { a: "1" });
    await assert.rejects(configMaps.create({ metadata: { name: "one" } }), isReason("AlreadyExists"));
    await assert.rejects(
      configMaps.get("missing"),
      (err) => isApiError(err, "NotFound") && err.code === 404 && /"missing" not found/.test(err.message),
    );
  });

  test("list pages through more than 500 objects with limit/continue, and filters by label and field", async () => {
    const total = 620;
    for (let start = 0; start < total; start += 20) {
      await Promise.all(
        Array.from({ length: Math.min(20, total - start) }, (_, i) =>
          configMaps.create({
            metadata: {
              name: `page-${start + i}`,
              labels: { bulk: "yes", parity: (start + i) % 2 ? "odd" : "even" },
            },
          }),
        ),
      );
    }
    const firstPage = await configMaps.listPage({ labelSelector: "bulk=yes", limit: 500 });
    assert.equal(firstPage.items.length, 500);
    assert.ok(firstPage.metadata.continue, "a first page of 500 must have a continue token");
    const all = await configMaps.list({ labelSelector: "bulk=yes", limit: 500 });
    assert.equal(all.items.length, total);
    assert.equal(new Set(all.items.map((cm) => cm.metadata?.name)).size, total);
    assert.match(all.resourceVersion, /^\d+$/);
    assert.equal(
      (await configMaps.list({ labelSelector: "bulk=yes,parity=odd", limit: 100 })).items.length,
      total / 2,
    );
    const byName = await configMaps.list({ fieldSelector: "metadata.name=page-7" });
    assert.deepEqual(
      byName.items.map((cm) => cm.metadata?.name),
      ["page-7"],
    );
  });

  test("update carries resourceVersion: a stale one is a Conflict", async () => {
    const cm = await configMaps.create({ metadata: { name: "versioned" }, data: { v: "1" } });
    const updated = await configMaps.update({ ...cm, data: { v: "2" } });
    assert.notEqual(updated.metadata?.resourceVersion, cm.metadata?.resourceVersion);
    await assert.rejects(configMaps.update({ ...cm, data: { v: "3" } }), isReason("Conflict"));
    assert.deepEqual((await configMaps.get("versioned")).data, { v: "2" });
  });

  test("patch: JSON patch with a failing test op is refused; merge, strategic and server-side apply work", async () => {
    await configMaps.create({ metadata: { name: "patched" }, data: { a: "1" } });
    await assert.rejects(
      configMaps.patch("patched", "json", [
        { op: "test", path: "/data/a", value: "wrong" },
        { op: "replace", path: "/data/a", value: "2" },
      ]),
      (err) => isApiError(err) && err.code === 422,
    );
    const jsonPatched = await configMaps.patch("patched", "json", [
      { op: "test", path: "/data/a", value: "1" },
      { op: "replace", path: "/data/a", value: "2" },
    ]);
    assert.deepEqual(jsonPatched.data, { a: "2" });
    assert.deepEqual((await configMaps.patch("patched", "merge", { data: { b: "3" } })).data, {
      a: "2",
      b: "3",
    });
    assert.deepEqual(
      (await configMaps.patch("patched", "strategic", { metadata: { labels: { s: "1" } } })).metadata?.labels,
      { s: "1" },
    );
    const applied = await configMaps.patch(
      "applied",
      "apply",
      {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "applied", namespace: "default" },
        data: { x: "y" },
      },
      { fieldManager: "client-test", force: true },
    );
    assert.deepEqual(applied.data, { x: "y" });
    assert.ok(
      applied.metadata?.managedFields?.some((f) => f.manager === "client-test" && f.operation === "Apply"),
    );
  });

  test("delete with preconditions refuses a different object of the same name", async () => {
    const first = await configMaps.create({ metadata: { name: "reborn" } });
    await configMaps.delete("reborn");
    const second = await configMaps.create({ metadata: { name: "reborn" } });
    await assert.rejects(
      configMaps.delete("reborn", { preconditions: { uid: first.metadata?.uid } }),
      isReason("Conflict"),
    );
    await assert.rejects(
      configMaps.delete("reborn", { preconditions: { resourceVersion: first.metadata?.resourceVersion } }),
      isReason("Conflict"),
    );
    await configMaps.delete("reborn", {
      preconditions: { uid: second.metadata?.uid, resourceVersion: second.metadata?.resourceVersion },
    });
    await assert.rejects(configMaps.get("reborn"), isReason("NotFound"));
  });

  test("status subresource: update writes status, not spec", async () => {
    const node = await nodes.create({ metadata: { name: "status-node" } });
    const withStatus = await nodes.update(
      {
        ...node,
        spec: { unschedulable: true },
        status: { addresses: [{ type: "InternalIP", address: "198.18.0.5" }] },
      },
      { subresource: "status" },
    );
    assert.deepEqual(withStatus.status?.addresses, [{ type: "InternalIP", address: "198.18.0.5" }]);
    assert.equal(withStatus.spec?.unschedulable, undefined, "the status subresource ignores spec");
  });

  test("dryRun=All validates without persisting", async () => {
    const dry = await configMaps.create({ metadata: { name: "dry" } }, { dryRun: true });
    assert.equal(dry.metadata?.name, "dry");
    await assert.rejects(configMaps.get("dry"), isReason("NotFound"));
    const node = await nodes.create({ metadata: { name: "dry-delete" } });
    await nodes.delete("dry-delete", { dryRun: true, preconditions: { uid: node.metadata?.uid } });
    assert.equal((await nodes.get("dry-delete")).metadata?.uid, node.metadata?.uid);
    await assert.rejects(
      configMaps.create({ metadata: { name: "Not_Valid" } }, { dryRun: true }),
      isReason("Invalid"),
    );
  });

  test("Forbidden names the verb and resource; a bad token is Unauthorized", async () => {
    const sa = new KubeClient(
      await loadClientConfig({
        kubeconfig: await plane.serviceAccountKubeconfig({ namespace: "default", name: "no-rights" }),
      }),
      {
        component: "client-test",
      },
    );
    try {
      await assert.rejects(
        new Resource<Node>(sa, NODE_RESOURCE).list(),
        (err) =>
          isApiError(err, "Forbidden") &&
          err.code === 403 &&
          /cannot list resource "nodes"/.test(err.message),
      );
    } finally {
      sa.close();
    }
    const badConfig = await loadClientConfig({ kubeconfig: plane.kubeconfigPath });
    const bad = new KubeClient(
      { ...badConfig, credentials: async () => ({ token: "not-a-token" }) },
      { component: "client-test", maxRetries: 0 },
    );
    try {
      // The admin client certificate is ignored for this client: it only presents the token.
      await assert.rejects(
        new Resource<Node>(bad, NODE_RESOURCE).list(),
        isReason("Unauthorized"),
      );
    } finally {
      bad.close();
    }
  });

  test("TooManyRequests from API Priority and Fairness carries Retry-After, and is retried", async () => {
    // A priority level with a single seat that rejects instead of queueing, for one ServiceAccount.
    await plane.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "List",
        items: [
          {
            apiVersion: "flowcontrol.apiserver.k8s.io/v1",
            kind: "PriorityLevelConfiguration",
            metadata: { name: "one-seat" },
            spec: {
              type: "Limited",
              limited: { nominalConcurrencyShares: 1, lendablePercent: 0, limitResponse: { type: "Reject" } },
            },
          },
          {
            apiVersion: "flowcontrol.apiserver.k8s.io/v1",
            kind: "FlowSchema",
            metadata: { name: "throttled" },
            spec: {
              priorityLevelConfiguration: { name: "one-seat" },
              matchingPrecedence: 100,
              rules: [
                {
                  subjects: [
                    { kind: "ServiceAccount", serviceAccount: { name: "throttled", namespace: "default" } },
                  ],
                  resourceRules: [
                    {
                      verbs: ["*"],
                      apiGroups: ["*"],
                      resources: ["*"],
                      namespaces: ["*"],
                      clusterScope: true,
                    },
                  ],
                },
              ],
            },
          },
          {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "Role",
            metadata: { name: "list-configmaps", namespace: "default" },
            rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["list"] }],
          },
          {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "RoleBinding",
            metadata: { name: "throttled-list", namespace: "default" },
            roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "list-configmaps" },
            subjects: [{ kind: "ServiceAccount", name: "throttled", namespace: "default" }],
          },
        ],
      }),
    );
    const config = await loadClientConfig({
      kubeconfig: await plane.serviceAccountKubeconfig({ namespace: "default", name: "throttled" }),
    });
    const flood = async (maxRetries: number) => {
      const c = new KubeClient(config, { component: "client-test", maxRetries });
      const cms = new Resource<ConfigMap>(c, {
        group: "",
        version: "v1",
        plural: "configmaps",
        namespace: "default",
      });
      try {
        return await Promise.allSettled(
          Array.from({ length: 40 }, () => cms.listPage({ labelSelector: "bulk=yes" })),
        );
      } finally {
        c.close();
      }
    };
    const once = await flood(0);
    const rejected = once
      .filter((r): r is PromiseRejectedResult => r.status === "rejected")
      .map((r) => r.reason as unknown);
    assert.ok(rejected.length > 0, "40 concurrent lists on one seat must be throttled");
    for (const err of rejected) {
      assert.ok(isApiError(err, "TooManyRequests"), String(err));
      assert.ok((err as ApiError).retryAfterSeconds !== undefined, "429 from APF carries Retry-After");
    }
    const retried = await flood(20);
    assert.deepEqual(
      retried.filter((r) => r.status === "rejected"),
      [],
      "with retries honouring Retry-After, every request eventually succeeds",
    );
  });

  test("requests carry the local-ccm User-Agent", async () => {
    await configMaps.get("one");
    const audit = await readFile(plane.auditLogPath as string, "utf8");
    assert.match(audit, /"userAgent":"local-ccm\/\d+\.\d+\.\d+ \(client-test\)"/);
  });
});
