// `node-lifecycle-controller release-all` on a real kube-apiserver, run as the chart's hook ServiceAccount under the
// hook's RBAC as rendered (templates/release-hook.yaml), after a leader was killed: its Lease still names it and was
// renewed a moment ago. While the Lease is renewed, nothing is released; once renewals stop (the leader is gone),
// release-all takes the Lease as a new leader would, our finalizers go, every other finalizer stays, and the Lease
// is given back.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { ensureBinaries } from "../../localcluster/build.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { CHART_DIR, helmTemplate } from "../../scripts/render-manifests.ts";
import { microTime } from "../../src/kube/leaderelection.ts";
import { leaseResource, NODE_RESOURCE, Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
import { ALLOCATED_FROM_ANNOTATION, L2_CLASS } from "../../src/pools/allocate.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER, POOL_RESOURCE } from "../../src/pools/pool.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import { PROGRAM_TS } from "../lifecycle/world.ts";

const NAMESPACE = "kube-system";
const LEASE = "node-lifecycle-controller";
const HOOK_ACCOUNT = "node-lifecycle-controller-release";
const LEASE_SECONDS = 4;
const NODE_IP = "192.0.2.10";
const OTHER = "example.com/other";

let plane: ControlPlane;
before(async () => {
  plane = await startControlPlane();
  const { helm } = await ensureBinaries();
  // The hook's ServiceAccount and RBAC as helm renders them (kubectl ignores the hook annotations), not its Job.
  const hook = parseAllDocuments(await helmTemplate(helm, ["--show-only=templates/release-hook.yaml"], { hooks: true }))
    .map((doc) => doc.toJS() as { kind: string })
    .filter((obj) => obj.kind !== "Job");
  await plane.kubectl(["apply", "-f", `${CHART_DIR}/crds/loadbalancerippools.yaml`]);
  await plane.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: hook }));
});
after(async () => {
  await plane?.stop();
});

interface Spec {
  lbClass?: string;
  finalizers: string[];
  annotations?: Record<string, string>;
  ingress?: string[];
}

async function createService(name: string, { lbClass, finalizers, annotations, ingress }: Spec): Promise<void> {
  const services = new Resource<Service>(plane.admin, { ...SERVICE_RESOURCE, namespace: "default" });
  await services.create({
    metadata: { name, finalizers, annotations },
    spec: { type: "LoadBalancer", loadBalancerClass: lbClass, ports: [{ port: 80 }] },
  });
  if (ingress)
    await services.patch(name, "merge", { status: { loadBalancer: { ingress: ingress.map((ip) => ({ ip })) } } }, {
      subresource: "status",
    });
}

test("a killed leader's Lease: nothing released while it is renewed; then only our finalizers go", async (t) => {
  const node: Node = { metadata: { name: "node-0" }, status: { addresses: [{ type: "InternalIP", address: NODE_IP }] } };
  const nodes = new Resource<Node>(plane.admin, NODE_RESOURCE);
  await nodes.create(node);
  await nodes.patch("node-0", "merge", { status: node.status }, { subresource: "status" });
  // name → [spec, the finalizers it must keep]
  const services: [string, Spec, string[]][] = [
    ["node-address", { lbClass: NODE_ADDRESS_CLASS, finalizers: [LB_FINALIZER, OTHER] }, [OTHER]],
    ["pool", { lbClass: L2_CLASS, finalizers: [LB_FINALIZER] }, []],
    ["classless-pool", { finalizers: [LB_FINALIZER], annotations: { [ALLOCATED_FROM_ANNOTATION]: "main" } }, []],
    ["classless-node-address", { finalizers: [LB_FINALIZER], ingress: [NODE_IP] }, []],
    ["classless-pending", { finalizers: [LB_FINALIZER] }, [LB_FINALIZER]],
    ["other-class", { lbClass: OTHER, finalizers: [LB_FINALIZER], ingress: [NODE_IP] }, [LB_FINALIZER]],
  ];
  for (const [name, spec] of services) await createService(name, spec);
  const pools = new Resource<LoadBalancerIPPool>(plane.admin, POOL_RESOURCE);
  await pools.create({
    apiVersion: "local-ccm.io/v1alpha1",
    kind: "LoadBalancerIPPool",
    metadata: { name: "main", finalizers: [POOL_FINALIZER, OTHER] },
    spec: { addresses: ["198.51.100.0/28"] },
  });

  // The killed leader's Lease, renewed by "it" until the test stops renewing.
  const leases = new Resource<Lease>(plane.admin, leaseResource(NAMESPACE));
  const now = () => microTime(new Date());
  await leases.create({
    metadata: { name: LEASE },
    spec: { holderIdentity: "nlc-0_0badc0de", leaseDurationSeconds: LEASE_SECONDS, renewTime: now() },
  });
  let renewing = true;
  const renewals = (async () => {
    while (renewing) {
      await leases.patch(LEASE, "merge", { spec: { renewTime: now() } });
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  })();

  const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: NAMESPACE, name: HOOK_ACCOUNT });
  const args = [PROGRAM_TS, "release-all", `--kubeconfig=${kubeconfig}`, "--log-format=json", "--v=1",
    `--leader-elect-lease-duration=${LEASE_SECONDS}s`, "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s"];
  const child = spawn(process.execPath, args, {
    env: { ...process.env, POD_NAMESPACE: NAMESPACE },
    stdio: ["ignore", "inherit", "pipe"],
  });
  let log = "";
  child.stderr.on("data", (chunk: Buffer) => {
    log += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  try {
    await waitFor("release-all waiting for the Lease", () => log.includes("waiting for the controllers' Lease"), 60_000);
    // Longer than the Lease's duration, renewed throughout: a live leader's Services are never released.
    const held = Date.now();
    await waitFor("two Lease durations", () => Date.now() - held > 2 * LEASE_SECONDS * 1000, 60_000, 250);
    assert.equal(child.exitCode, null, `release-all ended while the Lease was renewed: ${log}`);
    for (const [name, spec] of services) {
      const service = await plane.admin.request<Service>({ method: "GET", path: `/api/v1/namespaces/default/services/${name}` });
      assert.deepEqual(service.metadata?.finalizers, spec.finalizers, `${name} untouched while the leader lives`);
    }
  } finally {
    renewing = false;
    await renewals;
  }
  const stopped = Date.now();
  assert.equal(await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 60_000, "timeout"))]), 0, log);
  const took = Date.now() - stopped;
  t.diagnostic(`released ${(took / 1000).toFixed(1)} s after the last renewal`);
  assert.ok(took >= LEASE_SECONDS * 1000 - 1000, `released ${took} ms after the last renewal, before the Lease expired`);
  for (const [name, , kept] of services) {
    const service = await plane.admin.request<Service>({ method: "GET", path: `/api/v1/namespaces/default/services/${name}` });
    assert.deepEqual(service.metadata?.finalizers ?? [], kept, name);
  }
  assert.deepEqual((await pools.get("main")).metadata?.finalizers, [OTHER]);
  // It held the Lease while it worked (no replica could lead meanwhile), and gave it back.
  assert.match(log, /holding the controllers' Lease/);
  assert.equal((await leases.get(LEASE)).spec?.holderIdentity, "", "the Lease given back");
});
