// --dry-run is node deletion's trial, not the LoadBalancers': the program as the chart runs it with
// nodeLifecycleController.controller.dryRun=true and loadBalancer.l2.enabled=true (its args and its RBAC), against a
// real control plane. A dead node is only "would delete"d, while a node-address Service and a pool Service get their
// addresses, and a Service each controller refuses gets its Warning Event (from that controller's own Event source).
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Event, Namespace, Service } from "kubernetes-types/core/v1.js";
import { leaseResource, Resource } from "../../src/kube/resource.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION } from "../../src/pools/announcement.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import { DEPLOY_VALUES, helmTemplate, splitByTemplate } from "../../scripts/render-manifests.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { workloadContainers } from "../deploy/shipped.ts";
import { installPoolCrd } from "../pools/crd.ts";
import { type AnnouncerLease, keepAnnouncerLease } from "../pools/world.ts";
import {
  apiTimeAgo,
  auditedRequests,
  ControllerProcess,
  controllerFlags,
  nodeObject,
  SERVICE_ACCOUNT,
  startWorld,
  type World,
} from "./world.ts";

const NAMESPACE = "dry-run";
const SEGMENT = "198.18.200";
const core = { group: "", version: "v1" } as const;

describe("--dry-run holds back node deletion only", () => {
  let world: World;
  let nlc: ControllerProcess | undefined;
  let announcer: AnnouncerLease | undefined;

  before(async () => {
    world = await startWorld({ subnet: 247, audit: true });
  });
  after(async () => {
    announcer?.stop();
    if (nlc) await nlc.stop();
    await world?.stop();
  });

  test("a dead node is kept ('would delete'), while both LoadBalancer controllers write addresses and Warnings", async () => {
    const testStart = new Date();
    const values = ["nodeLifecycleController.controller.dryRun=true", "loadBalancer.l2.enabled=true"];
    const rendered = await helmTemplate(world.plane.binaries.helm, [
      ...DEPLOY_VALUES,
      ...values.flatMap((value) => ["--set", value]),
    ]);
    const rbacFile = path.join(world.plane.dir, "nlc-rbac-dry-run.yaml");
    await writeFile(rbacFile, splitByTemplate(rendered).get("nlc-rbac.yaml") ?? "");
    await world.plane.kubectl(["apply", "-f", rbacFile]);
    await installPoolCrd(world.plane);
    const args = workloadContainers(rendered).find(({ name }) => name === "node-lifecycle-controller")?.args ?? [];
    assert.ok(args.includes("--dry-run=true"), `the chart passes --dry-run: ${args.join(" ")}`);

    await world.nodes.create(nodeObject("dead-node", { address: await world.deadAddress(), since: apiTimeAgo(60_000) }));
    for (const i of [0, 1, 2])
      await world.nodes.create(nodeObject(`healthy-${i}`, { address: `${SEGMENT}.${i + 1}`, ready: "True", tainted: false }));
    const pools = new Resource<LoadBalancerIPPool>(world.plane.admin, POOL_RESOURCE);
    await pools.create({ ...POOL_TYPE, metadata: { name: "dry-run" }, spec: { addresses: [`${SEGMENT}.10`] } });
    const leases = new Resource<Lease>(world.plane.admin, leaseResource(SERVICE_ACCOUNT.namespace));
    announcer = await keepAnnouncerLease(leases, "healthy-0", [`${SEGMENT}.0/24`]);
    await new Resource<Namespace>(world.plane.admin, { ...core, plural: "namespaces" }).create({
      metadata: { name: NAMESPACE },
    });
    const services = new Resource<Service>(world.plane.admin, { ...core, plural: "services", namespace: NAMESPACE });
    const loadBalancer = (name: string, loadBalancerClass: string, port: number): Service => ({
      metadata: { name },
      spec: { type: "LoadBalancer", loadBalancerClass, ports: [{ port, protocol: "TCP" }] },
    });
    await services.create(loadBalancer("node-address", NODE_ADDRESS_CLASS, 80));
    // 10250 is kubelet's, reserved by default: refused, with a Warning.
    await services.create(loadBalancer("node-address-kubelet", NODE_ADDRESS_CLASS, 10250));
    await services.create(loadBalancer("pool", L2_CLASS, 80));

    nlc = new ControllerProcess(
      world,
      controllerFlags(world, { notReadyTimeout: "3s", reconcileInterval: "1s", leaderElect: false }, ...args),
    );
    await nlc.waitForLog("would delete node (dry run)", { node: "dead-node" });

    const ingress = async (name: string) =>
      (await services.get(name)).status?.loadBalancer?.ingress?.map(({ ip }) => ip).join(",");
    await waitFor("the node-address Service given the nodes' addresses", async () => {
      const ips = (await ingress("node-address"))?.split(",").sort();
      return ips?.join(",") === [1, 2, 3].map((n) => `${SEGMENT}.${n}`).join(",");
    });
    await waitFor("the pool Service given the pool's address and an announcer", async () => {
      const service = await services.get("pool");
      return (
        (await ingress("pool")) === `${SEGMENT}.10` && service.metadata?.annotations?.[ANNOUNCER_ANNOTATION] === "healthy-0"
      );
    });
    // The pool is used up now: a second Service of its class is refused, with a Warning.
    await services.create(loadBalancer("pool-exhausted", L2_CLASS, 80));
    const events = new Resource<Event>(world.plane.admin, { ...core, plural: "events", namespace: NAMESPACE });
    // Each controller's Events carry its own source.
    const warnings = async (name: string) =>
      (await events.list({ fieldSelector: `involvedObject.name=${name}` })).items
        .filter(({ type }) => type === "Warning")
        .map(({ reason, source, reportingComponent }) => `${reason} from ${source?.component} (${reportingComponent})`);
    await waitFor("the node-address controller's Warning", async () =>
      (await warnings("node-address-kubelet")).includes("SyncLoadBalancerFailed from service-controller (service-controller)"),
    );
    await waitFor("the pool controller's Warning", async () =>
      (await warnings("pool-exhausted")).includes(
        "AllocationFailed from service-l2-pools-controller (service-l2-pools-controller)",
      ),
    );
    await waitFor("the node-lifecycle controller's Event, under the program's historical name", async () => {
      const { items } = await world.events.list({ fieldSelector: "involvedObject.name=dead-node" });
      return items.some(({ reason, source }) => reason === "WouldDeleteNode" && source?.component === "node-lifecycle-controller");
    });
    assert.equal(await ingress("node-address-kubelet"), undefined);
    assert.equal(await ingress("pool-exhausted"), undefined);

    // Dry run still holds for node deletion: the dead node stays, and no DELETE of a Node was sent.
    await waitFor("three more passes over the dead node", () => nlc!.find("probing", { node: "dead-node" }).length >= 3);
    assert.ok(await world.nodes.get("dead-node"));
    assert.equal((await auditedRequests(world, testStart)).get("delete nodes"), undefined);
  });
});
