// The agents' announcer Leases (loadBalancer.l2.enabled) on the real control plane: the chart's RBAC (rbac.yaml)
// and the local-ccm-announcer-lease admission policy (node-scope-policy.yaml), with a token bound to a Pod on
// node A (as the agent's DaemonSet Pod gets). Without l2 the agent may not touch a Lease at all. With it, the agent
// creates, reads, renews and deletes node A's announcer Lease (src/pools/announcement.ts: name, holder, label),
// and nothing else: not node B's, not a Lease without the prefix (the leader-election Lease), not one holding
// another node or without the label, in any verb or patch type and in no other namespace; each refusal names its
// rule and the value. Requests expected to be denied are sent as dry runs, so a policy that wrongly allows one
// cannot change the state the other tests rely on. The apiserver runs NodeRestriction, as in node-scope-policy.test.ts.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Pod, Service } from "kubernetes-types/core/v1.js";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { NODE_RESOURCE, type PatchType, Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import {
  ANNOUNCER_LABEL,
  ANNOUNCER_LEASE_LABEL,
  announcerLabelValue,
  announcerLeaseName,
  LEASE_DURATION_SECONDS,
  SEGMENTS_ANNOTATION,
} from "../../src/pools/announcement.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { helmTemplate } from "../../scripts/render-manifests.ts";
import { agentPodKubeconfig } from "../agent/harness.ts";
import { denial, refused } from "./refused.ts";

const DEPLOY = path.resolve(import.meta.dirname, "../../deploy");
const NAMESPACE = "kube-system";
const NODES = { a: "node-a", b: "node-b" } as const;
const LEASES = { group: "coordination.k8s.io", version: "v1", plural: "leases", namespace: NAMESPACE } as const;
const OWN = announcerLeaseName(NODES.a) as string;
const OTHERS = announcerLeaseName(NODES.b) as string;
/** A Lease of another kind in the same namespace: the node-lifecycle-controller's leader election. */
const LEADER = "node-lifecycle-controller";
const AGENT = `system:serviceaccount:${NAMESPACE}:local-ccm`;

const ownLeaseRule = (lease: string) =>
  `local-ccm on node ${NODES.a} may write only its announcer Lease ${NAMESPACE}/${OWN} (rule own-lease), not ${lease}`;
const holderRule = (holder: string) =>
  `local-ccm on node ${NODES.a} must hold its announcer Lease itself (rule holder), ` +
  `but spec.holderIdentity is "${holder}"`;
const labelRule = (found: string) =>
  `local-ccm on node ${NODES.a} must keep the label ${ANNOUNCER_LEASE_LABEL}=true on its announcer Lease ` +
  `(rule label), but ${found}`;

const microTime = () => new Date().toISOString().replace("Z", "000Z");

const LABELLED = { [ANNOUNCER_LEASE_LABEL]: "true" };

/** An announcer Lease as the agent keeps it: its name, holder and labels, and its node's segments. */
function announcerLease(name: string, holder: string, labels: Record<string, string> = LABELLED): Lease {
  return {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: { name, namespace: NAMESPACE, labels, annotations: { [SEGMENTS_ANNOTATION]: "198.18.0.0/24" } },
    spec: { holderIdentity: holder, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime: microTime() },
  };
}

/** Asserts that `request` is denied by the policy with exactly `message` at its end. */
async function assertRefused(what: string, request: () => Promise<unknown>, message: string): Promise<void> {
  const text = await denial(request);
  assert.ok(text.endsWith(`denied request: ${message}`), `${what}: ${text}`);
}

/**
 * A patch of `type` that renews `name` with `holder` as holder and the announcer label `labelValue` (null: none;
 * JSON and merge patches remove it, an apply leaves it out).
 */
function renewal(type: PatchType, name: string, holder: string, labelValue: string | null): unknown {
  const renewTime = microTime();
  const labels = labelValue === null ? {} : { [ANNOUNCER_LEASE_LABEL]: labelValue };
  if (type === "json") {
    const labelPath = `/metadata/labels/${ANNOUNCER_LEASE_LABEL.replaceAll("~", "~0").replaceAll("/", "~1")}`;
    return [
      { op: "replace", path: "/spec/holderIdentity", value: holder },
      { op: "replace", path: "/spec/renewTime", value: renewTime },
      // "add" on /metadata/labels replaces the whole map, which a Lease may not have yet.
      labelValue === null ? { op: "remove", path: labelPath } : { op: "add", path: "/metadata/labels", value: labels },
    ];
  }
  const spec = { holderIdentity: holder, renewTime };
  if (type === "apply") return { apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name, labels }, spec };
  return { metadata: { labels: { [ANNOUNCER_LEASE_LABEL]: labelValue } }, spec };
}

describe("announcer Lease admission policy", () => {
  let plane: ControlPlane;
  let admin: Resource<Lease>;
  let agentClient: KubeClient;
  let leases: Resource<Lease>;
  let services: Resource<Service>;
  const clients: KubeClient[] = [];
  const dryRun = true;

  const clientAs = async (kubeconfig: string): Promise<KubeClient> => {
    const client = new KubeClient(await loadClientConfig({ kubeconfig }), { component: "test-agent", maxRetries: 0 });
    clients.push(client);
    return client;
  };
  const gone = (name: string) =>
    waitFor(`Lease ${name} deleted`, async () => !(await admin.list()).items.some((l) => l.metadata?.name === name));

  before(async () => {
    plane = await startControlPlane({ nodeRestriction: true });
    admin = new Resource<Lease>(plane.admin, LEASES);
    const files = ["rbac.yaml", "node-scope-policy.yaml"].flatMap((name) => ["-f", path.join(DEPLOY, name)]);
    await plane.kubectl(["apply", ...files]);
    const nodes = new Resource<Node>(plane.admin, NODE_RESOURCE);
    for (const name of Object.values(NODES)) await nodes.create({ apiVersion: "v1", kind: "Node", metadata: { name } });
    // Leases the agent must not touch: another node's announcer Lease, and a leader-election Lease.
    await admin.create(announcerLease(OTHERS, NODES.b));
    await admin.create({ ...announcerLease(LEADER, "nlc-0"), metadata: { name: LEADER, namespace: NAMESPACE } });
    agentClient = await clientAs(await agentPodKubeconfig(plane, NODES.a));
    leases = new Resource<Lease>(agentClient, LEASES);
    services = new Resource<Service>(agentClient, SERVICE_RESOURCE);
  });

  after(async () => {
    for (const client of clients) client.close();
    await plane?.stop();
  });

  test("default install (deploy/, l2 off): RBAC lets the agent touch no Lease and read no Service", async () => {
    const cannot = (verb: string, resource: string) =>
      new RegExp(`User "${AGENT}" cannot ${verb} resource "${resource}"`);
    const create = () => leases.create(announcerLease(OWN, NODES.a), { dryRun });
    assert.match(await denial(create), cannot("create", "leases"));
    assert.match(await denial(() => leases.get(OWN)), cannot("get", "leases"));
    assert.match(await denial(() => leases.delete(OTHERS, { dryRun })), cannot("delete", "leases"));
    assert.match(await denial(() => services.list()), cannot("list", "services"));
  });

  describe("with loadBalancer.l2.enabled", () => {
    before(async () => {
      const shown = ["templates/rbac.yaml", "templates/node-scope-policy.yaml"].flatMap((file) => ["--show-only", file]);
      const rendered = await helmTemplate(plane.binaries.helm, ["--set", "loadBalancer.l2.enabled=true", ...shown]);
      await plane.kubectl(["apply", "-f", "-"], rendered);
      // A new grant and policy take a moment to reach the authorizer and the admission plugin.
      await waitFor(
        "the policy to deny creating node B's announcer Lease",
        async () =>
          (await denial(() => leases.create(announcerLease(OTHERS, NODES.a), { dryRun }))).includes(
            "ValidatingAdmissionPolicy",
          ),
        30_000,
        200,
      );
    });

    test("the agent creates, reads, renews and deletes its own announcer Lease, and lists its Services", async () => {
      const created = await leases.create(announcerLease(OWN, NODES.a));
      assert.equal((await leases.get(OWN)).metadata?.uid, created.metadata?.uid);
      const renewTime = microTime();
      const annotations = { [SEGMENTS_ANNOTATION]: "198.18.0.0/24,2001:db8::/64" };
      const renewed = await leases.update({
        ...created,
        metadata: { ...created.metadata, annotations },
        spec: { ...created.spec, renewTime },
      });
      assert.equal(renewed.spec?.renewTime, renewTime);
      assert.equal(renewed.metadata?.annotations?.[SEGMENTS_ANNOTATION], annotations[SEGMENTS_ANNOTATION]);
      await leases.delete(OWN, { preconditions: { uid: renewed.metadata?.uid } });
      await gone(OWN);
      await leases.create(announcerLease(OWN, NODES.a)); // as the agent does again when it announces again
      const labelSelector = `${ANNOUNCER_LABEL}=${announcerLabelValue(NODES.a)}`;
      assert.deepEqual((await services.list({ labelSelector })).items, []);
    });

    test("creating any other Lease is denied, naming the rule and the value", async () => {
      const holderless = announcerLease(OWN, NODES.a);
      delete holderless.spec?.holderIdentity;
      const cases: [string, Lease, string][] = [
        ["node B's", announcerLease(OTHERS, NODES.a), ownLeaseRule(`${NAMESPACE}/${OTHERS}`)],
        ["the leader-election Lease", announcerLease(LEADER, NODES.a), ownLeaseRule(`${NAMESPACE}/${LEADER}`)],
        ["the node's name alone", announcerLease(NODES.a, NODES.a), ownLeaseRule(`${NAMESPACE}/${NODES.a}`)],
        ["holding node B", announcerLease(OWN, NODES.b), holderRule(NODES.b)],
        ["holding nobody", holderless, holderRule("")],
        ["without the label", announcerLease(OWN, NODES.a, { other: "true" }), labelRule("it has none")],
        [
          "with the label false",
          announcerLease(OWN, NODES.a, { [ANNOUNCER_LEASE_LABEL]: "false" }),
          labelRule('it is "false"'),
        ],
      ];
      await leases.delete(OWN); // so that a create of its name reaches admission, not "already exists"
      await gone(OWN);
      for (const [what, lease, message] of cases) {
        await assertRefused(what, () => leases.create(lease, { dryRun }), message);
      }
      await leases.create(announcerLease(OWN, NODES.a));
    });

    test("updating or deleting another Lease, or its own to another holder or without the label, is denied", async () => {
      const [others, leader, own] = await Promise.all([leases.get(OTHERS), leases.get(LEADER), leases.get(OWN)]);
      const takeOver = (lease: Lease) => ({ ...lease, spec: { ...lease.spec, holderIdentity: NODES.a } });
      const cases: [string, () => Promise<unknown>, string][] = [
        ["renewing node B's", () => leases.update(takeOver(others), { dryRun }), ownLeaseRule(`${NAMESPACE}/${OTHERS}`)],
        ["taking the leader's", () => leases.update(takeOver(leader), { dryRun }), ownLeaseRule(`${NAMESPACE}/${LEADER}`)],
        ["deleting node B's", () => leases.delete(OTHERS, { dryRun }), ownLeaseRule(`${NAMESPACE}/${OTHERS}`)],
        ["deleting the leader's", () => leases.delete(LEADER, { dryRun }), ownLeaseRule(`${NAMESPACE}/${LEADER}`)],
        [
          "its own, holding node B",
          () => leases.update({ ...own, spec: { ...own.spec, holderIdentity: NODES.b } }, { dryRun }),
          holderRule(NODES.b),
        ],
        [
          "its own, label dropped",
          () => leases.update({ ...own, metadata: { ...own.metadata, labels: {} } }, { dryRun }),
          labelRule("it has none"),
        ],
      ];
      for (const [what, request, message] of cases) await assertRefused(what, request, message);
      assert.equal((await admin.get(OTHERS)).spec?.holderIdentity, NODES.b);
      assert.equal((await admin.get(LEADER)).spec?.holderIdentity, "nlc-0");
    });

    test("a token not bound to a Pod on a Node writes no Lease", async () => {
      const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: NAMESPACE, name: "local-ccm" });
      const unbound = new Resource<Lease>(await clientAs(kubeconfig), LEASES);
      await assertRefused(
        "unbound",
        () => unbound.create(announcerLease(OWN, NODES.a), { dryRun }),
        "local-ccm may write only its own node's announcer Lease (rule pod-bound-token), but its token names no " +
          "node (no authentication.kubernetes.io/node-name): run it with the Pod-bound token Kubernetes mounts",
      );
    });

    test("other users are not restricted", async () => {
      const stored = await admin.get(OTHERS);
      const unlabelled = await admin.update({ ...stored, metadata: { ...stored.metadata, labels: {} } });
      assert.equal(unlabelled.metadata?.labels?.[ANNOUNCER_LEASE_LABEL], undefined);
      await admin.update({ ...unlabelled, metadata: { ...unlabelled.metadata, labels: LABELLED } });
    });

    // A node that died: the node-lifecycle controller (or an operator) deletes its Node, and kube-controller-manager's
    // pod GC then deletes the agent's Pod on it (orphaned Pods, within about a minute). This plane runs neither, so the
    // test deletes both, in that order. The token stays valid as long as its Pod exists (the apiserver checks the
    // bound Pod, not the node claim of a Pod-bound token, and the policy cannot read Nodes): that window is pod GC's.
    test("a dead node's agent token, its Pod gone, renews, rewrites or deletes no Lease", async () => {
      const node = "node-dead";
      const name = announcerLeaseName(node) as string;
      const nodes = new Resource<Node>(plane.admin, NODE_RESOURCE);
      await nodes.create({ apiVersion: "v1", kind: "Node", metadata: { name: node } });
      const dead = new Resource<Lease>(await clientAs(await agentPodKubeconfig(plane, node)), LEASES);
      const renew = (stored: Lease, options: { dryRun?: boolean } = {}) =>
        dead.update({ ...stored, spec: { ...stored.spec, renewTime: microTime() } }, options);
      const renewed = await renew(await dead.create(announcerLease(name, node))); // alive, it renews

      const pods = new Resource<Pod>(plane.admin, { group: "", version: "v1", plural: "pods", namespace: NAMESPACE });
      const onNode = (await pods.list()).items.filter((pod) => pod.spec?.nodeName === node);
      assert.equal(onNode.length, 1);
      await nodes.delete(node);
      // As pod GC deletes a Pod on a Node that is gone: at once (grace period 0), no kubelet to confirm it.
      const pod = onNode[0]?.metadata?.name as string;
      await plane.kubectl(["delete", "pod", "--namespace", NAMESPACE, pod, "--grace-period=0", "--force"]);
      const requests: [string, () => Promise<unknown>][] = [
        ["renew", () => renew(renewed, { dryRun })],
        ["patch", () => dead.patch(name, "merge", renewal("merge", name, node, "true"), { dryRun })],
        ["delete", () => dead.delete(name, { dryRun })],
        ["create another", () => dead.create(announcerLease(announcerLeaseName("node-x") as string, node), { dryRun })],
      ];
      // kube-apiserver caches a token it authenticated for 10 s: the Pod's deletion counts once that has passed.
      for (const [what, request] of requests)
        await waitFor(`${what} refused as Unauthorized`, () => refused(request, "Unauthorized"), 30_000);
      const stored = await admin.get(name);
      assert.equal(stored.spec?.renewTime, renewed.spec?.renewTime);
      assert.equal(stored.metadata?.resourceVersion, renewed.metadata?.resourceVersion);
    });

    // Last: the grants it adds widen the agent's RBAC for whatever would follow.
    test("granted patch, or Leases in another namespace, the policy still holds, in every patch type", async () => {
      const role = "extra-lease-writes";
      const grant = ["create", "clusterrole", role, "--verb=create,patch", "--resource=leases.coordination.k8s.io"];
      await plane.kubectl(grant);
      const binding = ["create", "clusterrolebinding", role, `--clusterrole=${role}`];
      await plane.kubectl([...binding, `--serviceaccount=${NAMESPACE}:local-ccm`]);
      const elsewhere = new Resource<Lease>(agentClient, { ...LEASES, namespace: "default" });
      const inDefault = { ...announcerLease(OWN, NODES.a), metadata: { name: OWN, labels: LABELLED } };
      // Until the authorizer sees the new grant, RBAC denies before admission: wait for the policy's denial.
      const text = await waitFor("a create in default to reach admission", async () => {
        const text = await denial(() => elsewhere.create(inDefault, { dryRun }));
        return text.includes("ValidatingAdmissionPolicy") && text;
      });
      assert.ok(text.endsWith(ownLeaseRule(`default/${OWN}`)), text);

      const patch = (type: PatchType, name: string, body: unknown, options: { dryRun?: boolean } = {}) =>
        leases.patch(name, type, body, type === "apply" ? { ...options, fieldManager: "local-ccm", force: true } : options);
      for (const type of ["merge", "strategic", "json", "apply"] as const) {
        const renewed = await patch(type, OWN, renewal(type, OWN, NODES.a, "true"));
        assert.equal(renewed.spec?.holderIdentity, NODES.a, type);
        const cases: [string, string, unknown, string][] = [
          ["node B's", OTHERS, renewal(type, OTHERS, NODES.a, "true"), ownLeaseRule(`${NAMESPACE}/${OTHERS}`)],
          ["the leader's", LEADER, renewal(type, LEADER, NODES.a, "true"), ownLeaseRule(`${NAMESPACE}/${LEADER}`)],
          ["holding node B", OWN, renewal(type, OWN, NODES.b, "true"), holderRule(NODES.b)],
          ["label false", OWN, renewal(type, OWN, NODES.a, "false"), labelRule('it is "false"')],
        ];
        // An apply that leaves the label out keeps it while the create's field manager still owns it too.
        if (type !== "apply") {
          cases.push(["label removed", OWN, renewal(type, OWN, NODES.a, null), labelRule("it has none")]);
        }
        for (const [what, name, body, message] of cases) {
          await assertRefused(`${type}, ${what}`, () => patch(type, name, body, { dryRun }), message);
        }
      }
      // Server-side apply of a Lease that does not exist creates it: held to the same rule.
      const squat = announcerLeaseName("node-c") as string;
      const apply = () => patch("apply", squat, renewal("apply", squat, NODES.a, "true"), { dryRun });
      await assertRefused("apply creating node C's", apply, ownLeaseRule(`${NAMESPACE}/${squat}`));
      assert.equal((await admin.get(OWN)).metadata?.labels?.[ANNOUNCER_LEASE_LABEL], "true");
    });
  });
});
