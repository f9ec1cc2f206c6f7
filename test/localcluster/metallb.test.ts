// MetalLB's objects for L2 mode as metallbObjects renders them from the pinned module's own Helm chart (with the
// pinned helm): our images, never pulled; the speaker on the host network with NET_RAW only; memberlist on; no FRR
// anywhere. With `frr` (bench:bgp's FRR mode): FRR's containers beside the speaker, from the image made of Debian's
// FRR (frr-image.ts), and no image that any registry would serve. Cheap (helm template and FRR's image tarball, no
// cluster, no MetalLB build): the installs themselves are test/e2e/metallb.e2e.ts and bench:bgp.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import type { DaemonSet, Deployment } from "kubernetes-types/apps/v1.js";
import { ensureFrrImage } from "../../localcluster/frr-image.ts";
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

describe("MetalLB's chart rendered for FRR mode", () => {
  test("FRR's containers beside the speaker in FRR's image made here; the speaker told FRR mode; no frr-k8s", async () => {
    const objects = await metallbObjects({ frr: true });
    const frr = await ensureFrrImage();
    const frrImage = `${frr.repository}:${frr.tag}`;
    const speakers = objects.filter((o) => o.kind === "DaemonSet") as unknown as DaemonSet[];
    assert.equal(speakers.length, 1);
    const pod = speakers[0]?.spec?.template.spec;
    const images = (containers: { name: string; image?: string }[] = []) =>
      Object.fromEntries(containers.map(({ name, image }) => [name, image]));
    assert.deepEqual(images(pod?.containers), {
      speaker: METALLB_IMAGES.speaker,
      frr: frrImage,
      reloader: frrImage,
      "frr-metrics": frrImage,
    });
    assert.deepEqual(images(pod?.initContainers), {
      "cp-frr-files": frrImage,
      "cp-reloader": METALLB_IMAGES.speaker,
      "cp-metrics": METALLB_IMAGES.speaker,
    });
    const env = pod?.containers[0]?.env ?? [];
    assert.equal(env.find(({ name }) => name === "METALLB_BGP_TYPE")?.value, "frr");
    // Every image of every workload is one imported on the nodes: nothing is ever pulled.
    const ours = new Set([...Object.values(METALLB_IMAGES), frrImage]);
    const workloads = objects.filter((o) => o.kind === "Deployment" || o.kind === "DaemonSet") as unknown as DaemonSet[];
    const foreign = workloads
      .flatMap((w) => [...(w.spec?.template.spec?.containers ?? []), ...(w.spec?.template.spec?.initContainers ?? [])])
      .filter(({ image }) => !ours.has(image ?? ""));
    assert.deepEqual(foreign.map(({ name, image }) => `${name}: ${image}`), []);
    assert.deepEqual(objects.filter((o) => /frrk8s/.test(o.apiVersion)).map((o) => o.kind), []);
  });
});
