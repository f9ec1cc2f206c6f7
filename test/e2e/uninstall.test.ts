// `helm uninstall` as users run it, with the chart as shipped (node-address and layer-2 pool modes on): afterwards
// every Service and pool of ours can be deleted (the post-delete hook, release-hook.yaml running
// `node-lifecycle-controller release-all`, removed our finalizers), while the load-balancer-cleanup finalizer of a
// Service of another class, and of a class-less one pending (another controller's, maybe), is left alone.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Service, ServiceAccount } from "kubernetes-types/core/v1.js";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import {
  helmInstallArgs,
  allInitialised,
  NAMESPACE,
  publicPool,
  RELEASE,
} from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER } from "../../src/pools/pool.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";

/** Generous: the machine runs other tests too. */
const WAIT_MS = 120_000;

function loadBalancer(name: string, lbClass: string | undefined, finalizers: string[] = []): Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name, namespace: "default", finalizers },
    spec: {
      type: "LoadBalancer",
      ...(lbClass === undefined ? {} : { loadBalancerClass: lbClass }),
      selector: { app: "none" },
      ports: [{ port: 80 }],
    },
  };
}

let cluster: Cluster;
const getService = async (name: string) =>
  cluster.admin.request<Service>({ method: "GET", path: `/api/v1/namespaces/default/services/${name}` });
const getPool = async () =>
  cluster.admin.request<LoadBalancerIPPool>({
    method: "GET",
    path: "/apis/local-ccm.io/v1alpha1/loadbalancerippools/public",
  });
/** Served: an address in the status and our finalizer. */
const served = (name: string) =>
  waitFor(
    `${name} served`,
    async () => {
      const service = await getService(name);
      return Boolean(service.status?.loadBalancer?.ingress?.length) && service.metadata?.finalizers?.includes(LB_FINALIZER);
    },
    WAIT_MS,
    250,
  );

before(async () => {
  cluster = await startCluster({ nodes: 2 });
  await cluster.helm(helmInstallArgs({ "loadBalancer.l2.enabled": "true" }));
  await allInitialised(cluster, WAIT_MS);
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(publicPool(cluster.slot)));
});
after(async () => {
  await cluster?.stop();
});

test("after helm uninstall, our Services and pools delete; other controllers' finalizers stay", async (t) => {
  const others = [
    loadBalancer("other-class", "example.com/other", [LB_FINALIZER]),
    loadBalancer("classless-pending", undefined, [LB_FINALIZER]),
  ];
  for (const service of [loadBalancer("node-address", NODE_ADDRESS_CLASS), loadBalancer("pool", L2_CLASS), ...others])
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(service));
  await served("node-address");
  await served("pool");
  await waitFor("the pool's finalizer", async () => (await getPool()).metadata?.finalizers?.includes(POOL_FINALIZER),
    WAIT_MS, 250);

  const uninstalled = Date.now();
  await cluster.helm(["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=5m"]);
  t.diagnostic(`helm uninstall (with the hook) took ${((Date.now() - uninstalled) / 1000).toFixed(1)} s`);

  // kubectl delete waits until the object is gone: a finalizer left would time it out.
  await cluster.kubectl(["delete", "service", "node-address", "pool", "--namespace=default", "--timeout=60s"]);
  await cluster.kubectl(["delete", "loadbalancerippool", "public", "--timeout=60s"]);
  for (const { metadata } of others) {
    const service = await getService(metadata?.name ?? "");
    assert.deepEqual(service.metadata?.finalizers, [LB_FINALIZER], `${metadata?.name} keeps its finalizer`);
    await cluster.kubectl(["patch", "service", metadata?.name ?? "", "--namespace=default", "--type=merge",
      "-p", '{"metadata":{"finalizers":null}}']);
  }
  // The hook's ServiceAccount and RBAC went with its successful Job (hook-succeeded).
  await assert.rejects(
    cluster.admin.request<ServiceAccount>({
      method: "GET",
      path: `/api/v1/namespaces/${NAMESPACE}/serviceaccounts/node-lifecycle-controller-release`,
    }),
    (err) => isApiError(err, "NotFound"),
  );
});
