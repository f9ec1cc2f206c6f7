// The LoadBalancer writer against a real kube-apiserver, as a controller's account with the rules every
// LoadBalancer controller has (loadbalancer/definition.ts) and no more: what it writes lands, in order, beside
// another controller's finalizer; what it decided from a copy someone changed meanwhile never lands.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { createLogger } from "../../src/cli/log.ts";
import { Registry } from "../../src/cli/metrics.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { objectKey } from "../../src/kube/informer.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { LOAD_BALANCER_RULES } from "../../src/loadbalancer/definition.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
import { ServiceWriter } from "../../src/loadbalancer/writer.ts";
import { controllerKubeconfig, createNamespace } from "../kube/controller-harness.ts";

/** Another controller's finalizer, on the list the writer writes back whole. */
const OTHER = "example.com/other";
const ALLOCATED = "local-ccm.io/test-allocated-from";

let plane: ControlPlane;
let client: KubeClient;

before(async () => {
  plane = await startControlPlane();
  const kubeconfig = await controllerKubeconfig(plane, "local-ccm-lb-writer", [...LOAD_BALANCER_RULES]);
  client = new KubeClient(await loadClientConfig({ kubeconfig, env: {} }), { component: "lb-writer-test" });
});

after(async () => {
  await plane?.stop();
});

async function world(options: { leader?: () => boolean } = {}) {
  const namespace = await createNamespace(plane.admin, "lb-writer");
  const admin = new Resource<Service>(plane.admin, { ...SERVICE_RESOURCE, namespace });
  const registry = new Registry();
  const writes = registry.counter({ name: "writes_total", help: "writes", labels: ["write", "result"] });
  const events: string[] = [];
  const writer = new ServiceWriter({
    serviceResource: (ns) => new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace: ns }),
    isLeader: options.leader ?? (() => true),
    events: { record: (_object, type, reason) => events.push(`${type} ${reason}`) },
    log: createLogger({ verbosity: 0, format: "json", write: () => {} }),
    writes,
  });
  const create = (name: string, finalizers: string[] = [OTHER]) =>
    admin.create({
      metadata: { name, finalizers },
      // A class no controller serves: only the test writes.
      spec: { type: "LoadBalancer", loadBalancerClass: "local-ccm.io/test", ports: [{ port: 80, protocol: "TCP" }] },
    });
  const counted = (write: string, result: string) => writes.with({ write, result }).get();
  return { admin, writer, events, create, counted };
}

test("the finalizer with a mode's annotation, then the status: each from the version the one before made", async () => {
  const { admin, writer, create, counted } = await world();
  const created = await create("a");
  const ingress = [{ ip: "192.0.2.10", ipMode: "VIP" }];
  const versions: (string | undefined)[] = [];
  const done = await writer.write(
    created,
    [
      { name: "record", finalizer: true, annotations: { [ALLOCATED]: "pool-a" } },
      { name: "status", ingress },
    ],
    (_write, _index, version) => versions.push(version),
  );
  assert.equal(done, true);
  const stored = await admin.get("a");
  assert.deepEqual(stored.metadata?.finalizers, [OTHER, LB_FINALIZER]);
  assert.equal(stored.metadata?.annotations?.[ALLOCATED], "pool-a");
  assert.deepEqual(stored.status?.loadBalancer?.ingress, ingress);
  assert.equal(versions.at(-1), stored.metadata?.resourceVersion);
  // A sync from the version read, or the one between the writes, would write the same again.
  assert.equal(writer.startedFrom(objectKey(created), created.metadata?.resourceVersion), true);
  assert.equal(writer.startedFrom(objectKey(created), versions[0]), true);
  assert.equal(counted("record", "ok") + counted("status", "ok"), 2);
});

test("a decision from a copy someone changed meanwhile does not land: neither finalizer nor status", async () => {
  const { admin, writer, create, counted } = await world();
  const created = await create("b");
  const ingress = [{ ip: "192.0.2.11", ipMode: "VIP" }];
  const recorded = [{ name: "record", finalizer: true }, { name: "status", ingress }];
  assert.equal(await writer.write(created, recorded), true);
  const read = await admin.get("b");
  // Another controller adds its finalizer after the copy was read.
  const third = "example.com/third";
  await admin.patch("b", "merge", { metadata: { finalizers: [...(read.metadata?.finalizers ?? []), third] } });
  assert.equal(await writer.write(read, [{ name: "release", finalizer: false }]), false);
  assert.equal(await writer.write(read, [{ name: "status", ingress: [] }]), false);
  assert.equal(counted("release", "conflict") + counted("status", "conflict"), 2);
  let stored = await admin.get("b");
  assert.deepEqual(stored.metadata?.finalizers, [OTHER, LB_FINALIZER, third], "a list changed meanwhile was lost");
  assert.deepEqual(stored.status?.loadBalancer?.ingress, ingress, "a stale status was written");
  // Not taken as written: the next version is synced afresh.
  assert.equal(writer.startedFrom(objectKey(read), read.metadata?.resourceVersion), false);
  // From the current copy: the status goes, then our finalizer, and the others' stay.
  const released = [{ name: "status", ingress: [] }, { name: "release", finalizer: false }];
  assert.equal(await writer.write(stored, released), true);
  stored = await admin.get("b");
  assert.deepEqual(stored.metadata?.finalizers, [OTHER, third]);
  assert.deepEqual(stored.status?.loadBalancer?.ingress ?? [], []);
});

test("a replica that is not leading writes nothing; a Service gone is told apart from an error", async () => {
  let leading = false;
  const { admin, writer, events, create, counted } = await world({ leader: () => leading });
  const created = await create("c", []);
  assert.equal(await writer.write(created, [{ name: "record", finalizer: true }]), false);
  assert.deepEqual((await admin.get("c")).metadata?.finalizers, undefined);
  leading = true;
  await admin.delete("c");
  assert.equal(await writer.write(created, [{ name: "record", finalizer: true }]), false);
  assert.equal(counted("record", "gone"), 1);
  // A Warning is told once while it stays the same, and again after it cleared.
  const warnings = writer.warnings();
  const warning = { reason: "AllocationFailed", message: "refused (test): no pool" };
  assert.equal(warnings.tell(created, "test", warning), true);
  assert.equal(warnings.tell(created, "test", warning), false);
  assert.equal(warnings.tell(created, "test", undefined), false);
  assert.equal(warnings.tell(created, "test", warning), true);
  assert.deepEqual(events, ["Warning AllocationFailed", "Warning AllocationFailed"]);
});
