// MetalLB's objects for L2 mode as metallbObjects renders them from the pinned module's own Helm chart (with the
// pinned helm): our images, never pulled; the speaker on the host network with NET_RAW only; memberlist on; no FRR
// anywhere. Cheap (helm template, no cluster, no MetalLB build): the install itself is test/e2e/metallb.e2e.ts.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import type { DaemonSet, Deployment } from "kubernetes-types/apps/v1.js";
import { type KubeObject, METALLB_IMAGES, METALLB_NAMESPACE, metallbObjects } from "../../localcluster/metallb.ts";

describe("MetalLB's chart rendered for L2 mode", () => {
  let objects: KubeObject[];
  const one = <T>(kind: string) => {
    const found = objects.filter((object) => object.kind === kind);
    assert.equal(found.length, 1, `${found.length} ${kind}s`);
    return found[0] as unknown as T;
  };
  before(async () => {
    objects = await metallbObjects();
  });

  test("its namespace first, privileged (the speaker's host network), and every namespaced object in it", () => {
    const [namespace] = objects as [KubeObject & { metadata: { labels?: Record<string, string> } }];
    assert.equal(namespace.kind, "Namespace");
    assert.equal(namespace.metadata.name, METALLB_NAMESPACE);
    assert.equal(namespace.metadata.labels?.["pod-security.kubernetes.io/enforce"], "privileged");
    const elsewhere = objects.filter((o) => (o.metadata.namespace ?? METALLB_NAMESPACE) !== METALLB_NAMESPACE);
    assert.deepEqual(elsewhere, []);
  });

  test("the controller and the speaker run our images, never pulled; no FRR container or frr-k8s object", () => {
    const controller = one<Deployment>("Deployment").spec?.template.spec;
    const speaker = one<DaemonSet>("DaemonSet").spec?.template.spec;
    const containers = [...(controller?.containers ?? []), ...(speaker?.containers ?? [])];
    const initContainers = [...(controller?.initContainers ?? []), ...(speaker?.initContainers ?? [])];
    assert.deepEqual(
      containers.map(({ name, image, imagePullPolicy }) => ({ name, image, imagePullPolicy })),
      [
        { name: "controller", image: METALLB_IMAGES.controller, imagePullPolicy: "Never" },
        { name: "speaker", image: METALLB_IMAGES.speaker, imagePullPolicy: "Never" },
      ],
    );
    assert.deepEqual(initContainers, []);
    const frr = objects.filter((o) => /frr/i.test(o.metadata.name) || /frrk8s/.test(o.apiVersion));
    assert.deepEqual(frr.map((o) => `${o.kind}/${o.metadata.name}`), []);
  });

  test("the speaker: host network, NET_RAW its only capability, memberlist with the controller's secret", () => {
    const speaker = one<DaemonSet>("DaemonSet").spec?.template.spec;
    assert.equal(speaker?.hostNetwork, true);
    const [container] = speaker?.containers ?? [];
    assert.deepEqual(container?.securityContext?.capabilities, { drop: ["ALL"], add: ["NET_RAW"] });
    const env = new Map((container?.env ?? []).map(({ name, value }) => [name, value]));
    assert.equal(env.get("METALLB_ML_SECRET_KEY_PATH"), "/etc/ml_secret_key");
    const secret = speaker?.volumes?.find((volume) => volume.name === "memberlist")?.secret?.secretName;
    const controllerEnv = one<Deployment>("Deployment").spec?.template.spec?.containers[0]?.env ?? [];
    assert.equal(controllerEnv.find(({ name }) => name === "METALLB_ML_SECRET_NAME")?.value, secret);
  });

  test("a class, when given, reaches both programs as --lb-class", async () => {
    const withClass = await metallbObjects({ loadBalancerClass: "example.com/metallb" });
    const args = withClass
      .filter((o) => o.kind === "Deployment" || o.kind === "DaemonSet")
      .map((o) => (o as unknown as Deployment).spec?.template.spec?.containers[0]?.args ?? []);
    assert.equal(args.length, 2);
    for (const programArgs of args) {
      assert.ok(programArgs.includes("--lb-class=example.com/metallb"), programArgs.join(" "));
    }
  });
});
