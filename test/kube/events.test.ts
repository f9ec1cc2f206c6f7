// Event recording against the real apiserver: repeats are correlated into one Event with a
// count, distinct events stay distinct, an expired Event is re-created, and a refused write
// never reaches the caller.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Event } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { EventRecorder } from "../../src/kube/events.ts";
import { Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";

describe("EventRecorder against the real apiserver", () => {
  let plane: ControlPlane;
  let client: KubeClient;
  let events: Resource<Event>;
  const node = {
    apiVersion: "v1",
    kind: "Node",
    name: "node-e.example.com",
    uid: "2b1f3f1e-0000-4000-8000-000000000001",
  };
  const eventsAbout = async (reason: string) =>
    (await events.list({ fieldSelector: `involvedObject.name=${node.name},reason=${reason}` })).items;

  before(async () => {
    plane = await startControlPlane();
    client = new KubeClient(await loadClientConfig({ kubeconfig: plane.kubeconfigPath }), {
      component: "events-test",
    });
    events = new Resource<Event>(client, {
      group: "",
      version: "v1",
      plural: "events",
      namespace: "default",
    });
  });
  after(async () => {
    client?.close();
    await plane?.stop();
  });

  test("a repeated event bumps count on one Event; a different message is another Event", async () => {
    const recorder = new EventRecorder(client, { component: "local-ccm", host: "node-e" });
    for (let i = 0; i < 5; i++)
      recorder.record(node, "Normal", "AddressesUpdated", "set ExternalIP 198.18.0.9");
    await recorder.flush();
    recorder.record(node, "Normal", "AddressesUpdated", "set ExternalIP 198.18.0.9");
    recorder.record(node, "Normal", "AddressesUpdated", "set ExternalIP 198.18.0.10");
    await recorder.flush();
    const found = await eventsAbout("AddressesUpdated");
    assert.equal(found.length, 2);
    const repeated = found.find((e) => e.message === "set ExternalIP 198.18.0.9");
    assert.equal(repeated?.count, 6);
    assert.equal(repeated?.source?.component, "local-ccm");
    assert.equal(repeated?.involvedObject.uid, node.uid);
    assert.ok((repeated?.lastTimestamp ?? "") >= (repeated?.firstTimestamp ?? "~"));
  });

  test("an Event that expired (deleted) is created again on the next repeat", async () => {
    const recorder = new EventRecorder(client, { component: "local-ccm" });
    recorder.record(node, "Warning", "DetectionFailed", "no route to 8.8.8.8");
    await recorder.flush();
    const [first] = await eventsAbout("DetectionFailed");
    await events.delete(first?.metadata?.name as string);
    recorder.record(node, "Warning", "DetectionFailed", "no route to 8.8.8.8");
    await recorder.flush();
    const again = await eventsAbout("DetectionFailed");
    assert.equal(again.length, 1);
    assert.notEqual(again[0]?.metadata?.name, first?.metadata?.name);
    assert.equal(again[0]?.type, "Warning");
  });

  test("a refused write is reported to onError and never thrown at the caller", async () => {
    const config = await loadClientConfig({
      kubeconfig: await plane.serviceAccountKubeconfig({ namespace: "default", name: "mute" }),
    });
    const mute = new KubeClient(config, { component: "events-test" });
    const errors: unknown[] = [];
    const recorder = new EventRecorder(mute, { component: "local-ccm", onError: (err) => errors.push(err) });
    try {
      assert.doesNotThrow(() => recorder.record(node, "Normal", "Refused", "nobody may write this"));
      await recorder.flush();
      assert.equal(errors.length, 1);
      assert.ok(isApiError(errors[0], "Forbidden"));
      assert.deepEqual(await eventsAbout("Refused"), []);
    } finally {
      mute.close();
    }
  });
});
