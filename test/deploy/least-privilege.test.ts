// Least privilege, proven: each program runs a full integration against a real control plane under
// the RBAC we ship, and what its ServiceAccount used (from the audit log) must be exactly what the
// shipped Roles and ClusterRoles grant it: no grant left unused, no request outside the grants.
// The programs run as the image runs them: their bundles, with the manifests' Node flags. The default install
// (deploy/), then the chart with what its values turn on (csrApproval, layer-2 announcement, BGP) and its args for it.
import assert from "node:assert/strict";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Event, Namespace, Secret, Service } from "kubernetes-types/core/v1.js";
import { parseAllDocuments } from "yaml";
import { bundleProgram } from "../../localcluster/bundle.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { leaseResource, Resource, SECRET_RESOURCE } from "../../src/kube/resource.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { type BGPPeer, BGP_PEER_RESOURCE, BGP_PEER_TYPE } from "../../src/bgppeers/peer.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION, announcerLeaseName } from "../../src/pools/announcement.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { DEPLOY_VALUES, helmTemplate, splitByTemplate } from "../../scripts/render-manifests.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import {
  addressesOf,
  type NodeHost,
  registerNode,
  startAgent,
  startWorld as startAgentWorld,
  type World as AgentWorld,
} from "../agent/harness.ts";
import {
  apiTimeAgo,
  ControllerProcess,
  controllerFlags,
  nodeObject,
  RBAC_FILE as NLC_RBAC_FILE,
  SERVICE_ACCOUNT as NLC_ACCOUNT,
  setReady,
  startWorld as startLifecycleWorld,
  type World as LifecycleWorld,
} from "../lifecycle/world.ts";
import { approverRbac, nodeClient, requestCertificate } from "../csr/world.ts";
import { installBgpPeerCrd, installPoolCrd } from "../pools/crd.ts";
import { SESSIONS_ANNOTATION, sessionReportText } from "../../src/bgppeers/sessions.ts";
import { keepAnnouncerLease } from "../pools/world.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { metricsScraperToken, scrapeSecure } from "../../localcluster/metrics.ts";
import { shippedCommand, workloadContainers } from "./shipped.ts";
import { isUninitialized } from "../../src/kube/nodes.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
const AGENT_RBAC_FILE = path.join(ROOT, "deploy/rbac.yaml");
/** The ClusterRole a Prometheus is bound to for secure metrics. */
const METRICS_READER_FILE = path.join(ROOT, "deploy/metrics.yaml");
const AGENT_ACCOUNT = { namespace: "kube-system", name: "local-ccm" };

/**
 * Secure metrics as the shipped programs serve them, at the https `url` the program serves: a scraper without
 * the grant gets 403, one bound to the metrics-reader ClusterRole 200 (each a TokenReview and a
 * SubjectAccessReview by the program). Returns a scrape with the granted token, for more.
 */
async function scrapeAsPrometheus(plane: LifecycleWorld["plane"], url: string, names: string) {
  await plane.kubectl(["apply", "-f", METRICS_READER_FILE]);
  const granted = await metricsScraperToken(plane, `${names}-reader`, { granted: true });
  const denied = await metricsScraperToken(plane, `${names}-other`, { granted: false });
  assert.equal((await scrapeSecure(url, denied)).status, 403);
  const scrape = async () => {
    const ok = await scrapeSecure(url, granted);
    assert.equal(ok.status, 200, ok.body);
    return ok.body;
  };
  await scrape();
  return scrape;
}

/**
 * A verb on [group/]resource[/subresource] (or on a non-resource URL, "url /path"), in one
 * namespace or, with namespace "", cluster-wide (cluster-scoped objects, or all namespaces); with
 * `name`, on that object only (a request that names its object; a grant's resourceNames).
 */
interface Permission {
  verb: string;
  resource: string;
  namespace: string;
  name?: string;
}

const describePermission = (p: Permission) =>
  `${p.verb} ${p.resource}${p.name ? ` named ${p.name}` : ""} ${p.namespace ? `in ${p.namespace}` : "cluster-wide"}`;

const qualified = (group: string, resource: string) => (group ? `${group}/${resource}` : resource);

/** Unique permissions, sorted by their description. */
function permissionSet(permissions: Permission[]): Permission[] {
  const unique = new Map(permissions.map((p) => [describePermission(p), p]));
  return [...unique.keys()].sort().map((key) => unique.get(key) as Permission);
}

/** A program as the image runs it: its bundle (built here), with the manifests' flags for Node. */
async function asShipped(program: string): Promise<{ entry: string; nodeArgs: string[] }> {
  const entry = await bundleProgram(program, path.join(ROOT, ".cache/test/least-privilege"));
  return { entry, nodeArgs: shippedCommand(program).nodeArgs };
}

/**
 * The chart rendered with `values` set (helm --set), as `helm install` would apply it: a template's text (its
 * RBAC, written to `dir` for assertLeastPrivilege), and a container's args (what the values turn on). As deploy/,
 * without the chart's metrics certificate: the programs run here, where no Secret is mounted at the args' paths.
 */
async function renderChart(helm: string, values: string[]) {
  const rendered = await helmTemplate(helm, [...DEPLOY_VALUES, ...values.flatMap((value) => ["--set", value])]);
  const templates = splitByTemplate(rendered);
  return {
    async writeTemplate(name: string, dir: string): Promise<string> {
      const text = templates.get(name);
      if (text === undefined) throw new Error(`the chart renders no ${name} with ${values.join(", ")}`);
      const file = path.join(dir, `${path.basename(name, ".yaml")}-${values.join("-").replace(/[^a-z0-9]+/gi, "-")}.yaml`);
      await writeFile(file, text);
      return file;
    },
    args: (container: string): string[] => workloadContainers(rendered).find((c) => c.name === container)?.args ?? [],
  };
}

interface AuditEntry {
  user: { username: string };
  verb: string;
  requestURI: string;
  objectRef?: { apiGroup?: string; resource?: string; subresource?: string; namespace?: string; name?: string };
}

/**
 * Permissions the apiserver checks on a request's behalf, which the audit log does not list: its CertificateApproval
 * admission authorizes "approve" on the CSR's signer for every write of the approval subresource (RBAC names it
 * signers/<signerName>; the approver only ever sees kubernetes.io/kubelet-serving's CSRs, its watch selects them).
 */
const IMPLIED: Record<string, Permission> = {
  "update certificates.k8s.io/certificatesigningrequests/approval cluster-wide": {
    verb: "approve",
    resource: "certificates.k8s.io/signers",
    namespace: "",
    name: "kubernetes.io/kubelet-serving",
  },
};

/** Every permission a user exercised in an audit log, denied requests included (they were needed). */
function usedPermissions(auditLog: string, username: string): Permission[] {
  const entries = auditLog
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as AuditEntry)
    .filter((entry) => entry.user.username === username);
  const requested = entries.map(({ verb, requestURI, objectRef: ref }): Permission =>
    ref?.resource
      ? {
          verb,
          resource: qualified(ref.apiGroup ?? "", ref.subresource ? `${ref.resource}/${ref.subresource}` : ref.resource),
          namespace: ref.namespace ?? "",
          name: ref.name,
        }
      : { verb, resource: `url ${requestURI.split("?")[0]}`, namespace: "" },
  );
  const implied = requested.flatMap((use) => IMPLIED[describePermission({ ...use, name: undefined })] ?? []);
  return permissionSet([...requested, ...implied]);
}

interface RbacObject {
  kind: string;
  metadata: { name: string; namespace?: string };
  rules?: {
    apiGroups?: string[];
    resources?: string[];
    resourceNames?: string[];
    nonResourceURLs?: string[];
    verbs: string[];
  }[];
  roleRef?: { kind: string; name: string };
  subjects?: { kind: string; name: string; namespace?: string }[];
}

/**
 * What the bindings in `manifests` grant a ServiceAccount: a ClusterRoleBinding grants its role
 * cluster-wide, a RoleBinding in its own namespace. Wildcards stay literal, so they never match a use.
 */
function grantedPermissions(manifests: string, account: { namespace: string; name: string }): Permission[] {
  const objects = parseAllDocuments(manifests)
    .map((doc) => doc.toJS() as RbacObject | null)
    .filter((object) => object !== null);
  const granted: Permission[] = [];
  for (const binding of objects) {
    if (binding.kind !== "ClusterRoleBinding" && binding.kind !== "RoleBinding") continue;
    const bound = binding.subjects?.some(
      (s) => s.kind === "ServiceAccount" && s.name === account.name && s.namespace === account.namespace,
    );
    if (!bound || !binding.roleRef) continue;
    const namespace = binding.kind === "RoleBinding" ? (binding.metadata.namespace ?? "") : "";
    const { kind, name } = binding.roleRef;
    const role = objects.find(
      (o) =>
        o.kind === kind && o.metadata.name === name && (kind === "ClusterRole" || o.metadata.namespace === namespace),
    );
    if (!role) throw new Error(`${binding.kind} ${binding.metadata.name} refers to ${kind} ${name}, not shipped beside it`);
    for (const rule of role.rules ?? []) {
      for (const verb of rule.verbs) {
        const names = rule.resourceNames?.length ? rule.resourceNames : [undefined];
        for (const group of rule.apiGroups ?? [])
          for (const resource of rule.resources ?? [])
            for (const name of names) granted.push({ verb, resource: qualified(group, resource), namespace, name });
        for (const url of rule.nonResourceURLs ?? []) granted.push({ verb, resource: `url ${url}`, namespace: "" });
      }
    }
  }
  return permissionSet(granted);
}

/**
 * A cluster-wide grant covers the verb in every namespace, a namespaced grant only its own; a grant
 * with a name only requests naming that object.
 */
const covers = (grant: Permission, use: Permission) =>
  grant.verb === use.verb &&
  grant.resource === use.resource &&
  (grant.namespace === "" || grant.namespace === use.namespace) &&
  (grant.name === undefined || grant.name === use.name);

/** Grants no request used, and requests no grant covers. */
function privilegeGaps(used: Permission[], granted: Permission[]): { unused: string[]; missing: string[] } {
  return {
    unused: granted.filter((g) => !used.some((u) => covers(g, u))).map(describePermission),
    missing: used.filter((u) => !granted.some((g) => covers(g, u))).map(describePermission),
  };
}

async function assertLeastPrivilege(
  auditLogPath: string | undefined,
  rbacFile: string,
  account: { namespace: string; name: string },
): Promise<void> {
  assert.ok(auditLogPath, "the control plane writes an audit log");
  const used = usedPermissions(await readFile(auditLogPath, "utf8"), `system:serviceaccount:${account.namespace}:${account.name}`);
  const granted = grantedPermissions(await readFile(rbacFile, "utf8"), account);
  const list = (permissions: Permission[]) => permissions.map((p) => `\n  ${describePermission(p)}`).join("");
  assert.deepEqual(
    privilegeGaps(used, granted),
    { unused: [], missing: [] },
    `${path.basename(rbacFile)} must grant ${account.namespace}/${account.name} exactly what it used.` +
      `\nused:${list(used)}\ngranted:${list(granted)}`,
  );
}

/**
 * The service controller's round, as node-lifecycle-controller runs it by default: a LoadBalancer Service of its
 * class, in a namespace of its own, gets the finalizer (a patch of the Service), the Ready nodes' `address` (a patch
 * of services/status) and an Event beside it; deleted, it loses the finalizer (a patch) and goes.
 */
async function serviceRound(plane: LifecycleWorld["plane"], address: string): Promise<void> {
  const namespace = "least-privilege-lb";
  const core = { group: "", version: "v1" } as const;
  await new Resource<Namespace>(plane.admin, { ...core, plural: "namespaces" }).create({ metadata: { name: namespace } });
  const services = new Resource<Service>(plane.admin, { ...core, plural: "services", namespace });
  const events = new Resource<Event>(plane.admin, { ...core, plural: "events", namespace });
  await services.create({
    metadata: { name: "web" },
    spec: { type: "LoadBalancer", loadBalancerClass: NODE_ADDRESS_CLASS, ports: [{ port: 80, protocol: "TCP" }] },
  });
  const served = await waitFor("the Service served at the Ready nodes' address", async () => {
    const service = await services.get("web");
    const ips = new Set(service.status?.loadBalancer?.ingress?.map((ingress) => ingress.ip));
    return ips.size === 1 && ips.has(address) && service;
  });
  assert.deepEqual(served.metadata?.finalizers, [LB_FINALIZER]);
  await waitFor("the EnsuredLoadBalancer event", async () =>
    (await events.list({ fieldSelector: "involvedObject.name=web,reason=EnsuredLoadBalancer" })).items.length > 0,
  );
  await services.delete("web");
  await waitFor("the Service gone (its finalizer removed)", async () =>
    services.get("web").then(
      () => false,
      (err: unknown) => isApiError(err, "NotFound"),
    ),
  );
}

/**
 * The address pool controller's round: a LoadBalancer Service of class local-ccm.io/l2, in a namespace of its own,
 * gets the pool's `address` (a patch of services/status) and `announcer` in its annotation (a patch of the Service,
 * with the finalizer); deleted, it loses the finalizer and goes.
 */
async function l2Round(plane: LifecycleWorld["plane"], address: string, announcer: string): Promise<void> {
  const namespace = "least-privilege-l2";
  const core = { group: "", version: "v1" } as const;
  await new Resource<Namespace>(plane.admin, { ...core, plural: "namespaces" }).create({ metadata: { name: namespace } });
  const services = new Resource<Service>(plane.admin, { ...core, plural: "services", namespace });
  await services.create({
    metadata: { name: "web" },
    spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port: 80, protocol: "TCP" }] },
  });
  await waitFor(`the Service given ${address}, announced by ${announcer}`, async () => {
    const service = await services.get("web");
    const ips = service.status?.loadBalancer?.ingress?.map((ingress) => ingress.ip);
    return ips?.join() === address && service.metadata?.annotations?.[ANNOUNCER_ANNOTATION] === announcer;
  });
  await services.delete("web");
  await waitFor("the Service gone (its finalizer removed)", async () =>
    services.get("web").then(
      () => false,
      (err: unknown) => isApiError(err, "NotFound"),
    ),
  );
}

/** How many LISTs of Nodes node-lifecycle-controller's account made, from the audit log. */
async function nodeLists(auditLogPath: string | undefined): Promise<number> {
  assert.ok(auditLogPath, "the control plane writes an audit log");
  const username = `system:serviceaccount:${NLC_ACCOUNT.namespace}:${NLC_ACCOUNT.name}`;
  return (await readFile(auditLogPath, "utf8"))
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as AuditEntry & { stage: string })
    .filter(
      (entry) =>
        entry.user.username === username &&
        entry.verb === "list" &&
        entry.objectRef?.resource === "nodes" &&
        entry.stage === "ResponseComplete",
    ).length;
}

test("the comparison finds unused grants and missing ones, and reads only the account's requests", async () => {
  const manifests = await readFile(NLC_RBAC_FILE, "utf8");
  const username = `system:serviceaccount:${NLC_ACCOUNT.namespace}:${NLC_ACCOUNT.name}`;
  const entry = (user: string, verb: string, resource: string, namespace?: string, apiGroup?: string, name?: string) =>
    JSON.stringify({
      user: { username: user },
      verb,
      requestURI: "/irrelevant",
      objectRef: { resource, namespace, apiGroup, name },
    });
  const lease = (verb: string, namespace: string, name: string) =>
    entry(username, verb, "leases", namespace, "coordination.k8s.io", name);
  const audit = [
    ...["get", "list", "watch", "delete"].map((verb) => entry(username, verb, "nodes")),
    entry(username, "create", "events", "default"),
    ...["get", "create"].map((verb) => lease(verb, "kube-system", "node-lifecycle-controller")),
    lease("get", "kube-system", "kube-scheduler"), // the Role names its own Lease only
    lease("get", "default", "node-lifecycle-controller"), // the Role is in kube-system only
    entry("system:serviceaccount:kube-system:other", "list", "secrets"),
    JSON.stringify({ user: { username }, verb: "get", requestURI: "/version?timeout=32s" }),
  ].join("\n");
  assert.deepEqual(privilegeGaps(usedPermissions(audit, username), grantedPermissions(manifests, NLC_ACCOUNT)), {
    unused: [
      "create authentication.k8s.io/tokenreviews cluster-wide", // secure metrics' reviews, unused here
      "create authorization.k8s.io/subjectaccessreviews cluster-wide",
      "list discovery.k8s.io/endpointslices cluster-wide", // the service controller's, unused here
      "list pods cluster-wide",
      "list services cluster-wide",
      "patch events cluster-wide",
      "patch events in default",
      "patch services cluster-wide",
      "patch services/status cluster-wide",
      "update coordination.k8s.io/leases named node-lifecycle-controller in kube-system",
      "watch discovery.k8s.io/endpointslices cluster-wide",
      "watch pods cluster-wide",
      "watch services cluster-wide",
    ],
    missing: [
      "get coordination.k8s.io/leases named kube-scheduler in kube-system",
      "get coordination.k8s.io/leases named node-lifecycle-controller in default",
      "get url /version cluster-wide",
    ],
  });
});

describe("the agent under deploy/rbac.yaml", () => {
  const name = "least-privilege-node";
  const kubeletIP = "198.18.100.17";
  let world: AgentWorld;
  let node: NodeHost;
  before(async () => {
    world = await startAgentWorld();
    node = await world.nodeHost(9); // agent.test.ts, which may run alongside, uses 0–7
    await registerNode(world.nodes, name, kubeletIP, { on: node });
  });
  after(async () => {
    await world?.stop();
  });

  test("a full run (watch, address writes, taint removal, a repeated event, --run-once) uses exactly its grants", async () => {
    const events = new Resource<Event>(world.plane.admin, { group: "", version: "v1", plural: "events", namespace: "default" });

    // Loop mode: LIST + WATCH of its Node, PUT nodes/status, the taint's JSON PATCH, Events created.
    const shipped = await asShipped("local-ccm");
    // Secure metrics (the chart's default) on the address the test reaches: the agent reviews its scrapers.
    const metricsAddress = `${node.reachableAt}:10265`;
    const agent = startAgent(node, [`--node-name=${name}`, `--metrics-bind-address=${metricsAddress}`], shipped);
    try {
      const expected = [`InternalIP=${kubeletIP}`, `ExternalIP=${node.external.v4}`, `Hostname=${name}`];
      const addressEvent = async () =>
        (await events.list({ fieldSelector: `involvedObject.name=${name},reason=AddressesUpdated` })).items.find(
          (event) => event.message === `Node addresses set to ${expected.join(", ")}`,
        );
      await waitFor("the node initialised", async () => {
        const n = await world.nodes.get(name);
        return !isUninitialized(n) && addressesOf(n).join() === expected.join();
      });
      await waitFor("the AddressesUpdated event written", async () => (await addressEvent())?.count === 1);
      // Someone drops the ExternalIP: the repair writes the same addresses as before, so the same
      // event is recorded again within the process, and the recorder PATCHes its count.
      const kubeletAddresses = [
        { type: "InternalIP", address: kubeletIP },
        { type: "Hostname", address: name },
      ];
      await world.nodes.patch(name, "merge", { status: { addresses: kubeletAddresses } }, { subresource: "status" });
      await waitFor("the repeated event counted", async () => (await addressEvent())?.count === 2);
      assert.deepEqual(addressesOf(await world.nodes.get(name)), expected);
      const scrape = await scrapeAsPrometheus(world.plane, `https://${metricsAddress}/metrics`, "agent-scraper");
      assert.match(await scrape(), /^local_ccm_reconciles_total/m);
      assert.equal(await agent.stop(), 0, agent.output());
    } finally {
      await agent.stop();
    }

    // --run-once starts from a GET of its Node (as a conflict's re-read does).
    const once = startAgent(node, [`--node-name=${name}`, "--run-once"], shipped);
    assert.equal(await once.exited, 0, once.output());

    await assertLeastPrivilege(world.plane.auditLogPath, AGENT_RBAC_FILE, AGENT_ACCOUNT);
  });

  // After the run above, in the same audit log: both runs together must use exactly what the chart grants with
  // loadBalancer.l2.enabled. The agent announces as the DaemonSet runs it then (its args, the release namespace
  // from POD_NAMESPACE): its announcer Lease created, renewed by updates, re-read (a GET) when another writer's
  // change makes an update conflict, and deleted on SIGTERM; the Services assigned to it listed and watched.
  test("with layer-2 announcement (loadBalancer.l2.enabled), a run that also keeps its announcer Lease uses exactly its grants", async () => {
    const chart = await renderChart(world.plane.binaries.helm, ["loadBalancer.l2.enabled=true"]);
    const rbacFile = await chart.writeTemplate("rbac.yaml", world.plane.dir);
    await world.plane.kubectl(["apply", "-f", rbacFile]);
    const args = chart.args("local-ccm");
    assert.ok(args.includes("--lb-l2-announce=true"), `the DaemonSet announces: ${args.join(" ")}`);
    const leases = new Resource<Lease>(world.plane.admin, leaseResource(AGENT_ACCOUNT.namespace));
    const leaseName = announcerLeaseName(name) as string;
    const readLease = () =>
      leases.get(leaseName).catch((err: unknown) => {
        if (isApiError(err, "NotFound")) return undefined;
        throw err;
      });
    const agent = startAgent(node, [`--node-name=${name}`, ...args], {
      ...(await asShipped("local-ccm")),
      env: { POD_NAMESPACE: AGENT_ACCOUNT.namespace },
    });
    try {
      const diagnose = (err: unknown): never => {
        throw new Error(`${(err as Error).message}\nagent:\n${agent.output().split("\n").slice(-40).join("\n")}`, {
          cause: err,
        });
      };
      const first = await waitFor("the announcer Lease created", readLease).catch(diagnose);
      assert.equal(first.spec?.holderIdentity, name);
      // Another writer's change (a merge patch, unpinned): the agent's next update conflicts, it re-reads and renews.
      const patched = await leases.patch(leaseName, "merge", { metadata: { labels: { team: "net" } } });
      const renewedOnTop = async () => {
        const lease = await readLease();
        return lease?.metadata?.labels?.team === "net" && lease.spec?.renewTime !== patched.spec?.renewTime;
      };
      await waitFor("the Lease renewed on top of the other writer's change", renewedOnTop).catch(diagnose);
      assert.equal(await agent.stop(), 0, agent.output());
    } finally {
      await agent.stop();
    }
    assert.equal(await readLease(), undefined, "SIGTERM deletes the announcer Lease");
    await assertLeastPrivilege(world.plane.auditLogPath, rbacFile, AGENT_ACCOUNT);
  });

  // After the runs above, in the same audit log: all of them together must use exactly what the chart grants with
  // loadBalancer.l2.enabled and bgp.enabled. The BGP speaker lists and watches the BGPPeers, pools, Services and
  // EndpointSlices, and gets the one Secret bgp.peers.passwordSecrets names; the agent's token reads no other Secret.
  // With bgp.networkUnavailableCondition, no peer holding the Node's pod CIDR, the agent patches its Node's status
  // (NetworkUnavailable True, once its grace has passed).
  test("with the BGP speaker (bgp.enabled), a run that also reads a peer's password uses exactly its grants", async () => {
    const chart = await renderChart(world.plane.binaries.helm, [
      "loadBalancer.l2.enabled=true",
      "bgp.enabled=true",
      "bgp.peers.passwordSecrets={tor-md5}",
      "bgp.advertisePodCIDRs=true",
      "bgp.networkUnavailableCondition=true",
    ]);
    await world.nodes.patch(name, "merge", { spec: { podCIDR: "10.244.9.0/24", podCIDRs: ["10.244.9.0/24"] } });
    const rbacFile = await chart.writeTemplate("rbac.yaml", world.plane.dir);
    await world.plane.kubectl(["apply", "-f", rbacFile]);
    await installBgpPeerCrd(world.plane);
    await installPoolCrd(world.plane);
    const args = chart.args("local-ccm");
    assert.ok(args.includes("--bgp-speaker=true"), `the DaemonSet speaks BGP: ${args.join(" ")}`);
    const secrets = new Resource<Secret>(world.plane.admin, { ...SECRET_RESOURCE, namespace: AGENT_ACCOUNT.namespace });
    await secrets.create({ metadata: { name: "tor-md5" }, stringData: { password: "s3cret" } });
    await secrets.create({ metadata: { name: "other" }, stringData: { token: "not-the-agent's" } });
    // The node's gateway, in a namespace of this test: a connection to port 179 there is refused, nothing leaves.
    const gateway = node.external.v4.replace(/\.10$/, ".1");
    await new Resource<BGPPeer>(world.plane.admin, BGP_PEER_RESOURCE).create({
      ...BGP_PEER_TYPE,
      metadata: { name: "tor" },
      spec: { peerAddress: gateway, peerASN: 64512, myASN: 64513, passwordSecretRef: { name: "tor-md5" } },
    });
    const agent = startAgent(node, [`--node-name=${name}`, ...args], {
      ...(await asShipped("local-ccm")),
      env: { POD_NAMESPACE: AGENT_ACCOUNT.namespace },
    });
    const user = `system:serviceaccount:${AGENT_ACCOUNT.namespace}:${AGENT_ACCOUNT.name}`;
    const wanted = [
      "get secrets named tor-md5 in kube-system",
      "watch local-ccm.io/bgppeers cluster-wide",
      "watch local-ccm.io/loadbalancerippools cluster-wide",
      "watch discovery.k8s.io/endpointslices cluster-wide",
      `patch nodes/status named ${name} cluster-wide`,
    ];
    try {
      const used = async () =>
        usedPermissions(await readFile(world.plane.auditLogPath as string, "utf8"), user).map(describePermission);
      const all = async () => {
        const permissions = await used();
        return wanted.every((p) => permissions.includes(p));
      };
      // The condition's grace (CONDITION_GRACE_MS, 30 s) comes first.
      await waitFor("the speaker's reads and its condition's write", all, 120_000).catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}\nused: ${(await used()).join(", ")}\nagent:\n${agent.output()}`);
      });
      assert.equal(await agent.stop(), 0, agent.output());
    } finally {
      await agent.stop();
    }
    await assertLeastPrivilege(world.plane.auditLogPath, rbacFile, AGENT_ACCOUNT);
    // The agent's own token (its ServiceAccount), after the check above (a denied request counts as used): the
    // listed Secret only, by name.
    const token = await world.plane.serviceAccountKubeconfig(AGENT_ACCOUNT);
    const asAgent = new KubeClient(await loadClientConfig({ kubeconfig: token }), { component: "least-privilege" });
    try {
      const theirs = new Resource<Secret>(asAgent, { ...SECRET_RESOURCE, namespace: AGENT_ACCOUNT.namespace });
      const forbidden = (err: unknown) => isApiError(err, "Forbidden");
      await assert.rejects(theirs.get("other"), forbidden, "another Secret of the release namespace");
      await assert.rejects(theirs.list(), forbidden, "a list of Secrets");
      const elsewhere = new Resource<Secret>(asAgent, { ...SECRET_RESOURCE, namespace: "default" });
      await assert.rejects(elsewhere.get("tor-md5"), forbidden, "a Secret of that name elsewhere");
      assert.equal((await theirs.get("tor-md5")).metadata?.name, "tor-md5");
    } finally {
      asAgent.close();
    }
  });
});

describe("the node-lifecycle-controller under deploy/nlc-rbac.yaml", () => {
  let world: LifecycleWorld;
  let nlc: ControllerProcess | undefined;
  before(async () => {
    world = await startLifecycleWorld({ subnet: 249, audit: true }); // 250–252: the other tests and the benchmark
  });
  after(async () => {
    nlc?.child.kill("SIGKILL");
    await world?.stop();
  });

  test("a full run (leader election, probes, a deletion, a repeated event, a LoadBalancer Service, release) uses exactly its grants", async () => {
    const echo = await world.addHost("echo");
    const expired = apiTimeAgo(60_000);
    const nodes = [
      nodeObject("reachable-node", { address: echo, since: expired }),
      nodeObject("dead-node", { address: await world.deadAddress(), since: expired }),
      // Ready and untainted (unwatched): they keep the mass-deletion guard open.
      ...["a", "b", "c"].map((n) => nodeObject(`healthy-${n}`, { address: "198.18.200.1", ready: "True", tainted: false })),
    ];
    for (const node of nodes) await world.nodes.create(node);

    // Default lease name and namespace (kube-system), as the shipped Deployment runs it.
    // Secure metrics, as shipped (the test flags' plain metrics turned secure, on a port of their own).
    nlc = new ControllerProcess(
      world,
      controllerFlags(world, { notReadyTimeout: "3s", reconcileInterval: "1s" }, "--secure-metrics=true"),
      await asShipped("node-lifecycle-controller"),
    );
    await nlc.waitForLog("started leading");
    await nlc.waitForLog("deleted node", { node: "dead-node" });
    const skipped = await nlc.waitForLog("not deleting node", { node: "reachable-node" });
    assert.equal(skipped.reason, `reachable: icmp ${echo} answered`);
    const skipEvent = async () =>
      (await world.events.list({ fieldSelector: "involvedObject.name=reachable-node,reason=DeletionSkipped" })).items.find(
        (event) => event.message === skipped.reason,
      );
    await waitFor("the DeletionSkipped event written", async () => (await skipEvent())?.count === 1);

    // Ready for a pass (its event stage is forgotten), then NotReady again: once that expires, the
    // same probe result records the same event again, and the recorder PATCHes its count.
    await setReady(world, "reachable-node", "True");
    const serving = await nlc.waitForLog("serving /healthz and /readyz, and /metrics");
    const scrape = await scrapeAsPrometheus(world.plane, serving.metrics as string, "nlc-scraper");
    await waitFor("a pass that saw the node Ready", async () =>
      /^node_lifecycle_controller_skipped_total\{class="ready"\} [1-9]/m.test(await scrape()),
    );
    await setReady(world, "reachable-node", "Unknown");
    await waitFor("the repeated event counted", async () => (await skipEvent())?.count === 2);
    await serviceRound(world.plane, "198.18.200.1");

    assert.equal(await nlc.stop(), 0); // releases the Lease (an update)
    await assertLeastPrivilege(world.plane.auditLogPath, NLC_RBAC_FILE, NLC_ACCOUNT);
    const rbac = await readFile(NLC_RBAC_FILE, "utf8");
    assert.doesNotMatch(rbac, /certificates/, "without the approver, no grant about CSRs or signers");
  });

  // After the run above, in the same audit log: both runs together must use exactly what the chart grants with
  // csrApproval.enabled (the run above alone exactly what it grants without). With the service controller on (the
  // default), Services and EndpointSlices are one cluster-wide watch each, which its grant covers: the chart leaves
  // out the approver's Role in "default", which would go unused.
  test("with the approver on (csrApproval.enabled), a run that also approves and denies CSRs uses exactly its grants", async () => {
    const rbacFile = path.join(world.plane.dir, "nlc-rbac-approver.yaml");
    const rbac = await approverRbac(world.plane.binaries.helm);
    assert.ok(!rbac.includes("node-lifecycle-controller-kubelet-serving-csr"), "no Role for the approver");
    await writeFile(rbacFile, rbac);
    await world.plane.kubectl(["apply", "-f", rbacFile]);
    await world.nodes.create(nodeObject("dead-node-2", { address: await world.deadAddress(), since: apiTimeAgo(60_000) }));
    const nodeListsBefore = await nodeLists(world.plane.auditLogPath);
    nlc = new ControllerProcess(
      world,
      controllerFlags(world, { notReadyTimeout: "3s", reconcileInterval: "1s" }, "--controllers=*,kubelet-serving-csr"),
      await asShipped("node-lifecycle-controller"),
    );
    await nlc.waitForLog("started leading");
    await nlc.waitForLog("deleted node", { node: "dead-node-2" });
    // healthy-a's own name is its own; 198.18.200.1 is also healthy-b's and healthy-c's.
    const node = await nodeClient(world.plane, "healthy-a");
    try {
      const approved = await requestCertificate(node, "healthy-a", { sans: "DNS:healthy-a" });
      const denied = await requestCertificate(node, "healthy-a", { sans: "DNS:healthy-a,IP:198.18.200.1" });
      await nlc.waitForLog("approved CSR", { csr: approved });
      await nlc.waitForLog("denied CSR", { csr: denied });
      await waitFor("the Denied event written", async () =>
        (await world.events.list({ fieldSelector: `involvedObject.name=${denied}` })).items.length > 0,
      );
    } finally {
      node.close();
    }
    assert.equal(await nlc.stop(), 0);
    await assertLeastPrivilege(world.plane.auditLogPath, rbacFile, NLC_ACCOUNT);
    // One watch per resource per process: both controllers read Nodes from one informer, which listed them once.
    assert.equal((await nodeLists(world.plane.auditLogPath)) - nodeListsBefore, 1, "LISTs of Nodes in this run");
  });

  // After the runs above, in the same audit log: all three together must use exactly what the chart grants with
  // csrApproval.enabled and loadBalancer.l2.enabled. The address pool controller runs as the Deployment runs it
  // then (its args): it lists and watches the pools (the chart's CRD) and the announcer Leases in the release
  // namespace, hands a Service of its class a pool address and records the announcer on it.
  test("with layer-2 announcement too (loadBalancer.l2.enabled), a run that also assigns a pool address uses exactly its grants", async () => {
    const chart = await renderChart(world.plane.binaries.helm, ["csrApproval.enabled=true", "loadBalancer.l2.enabled=true"]);
    const rbacFile = await chart.writeTemplate("nlc-rbac.yaml", world.plane.dir);
    await world.plane.kubectl(["apply", "-f", rbacFile]);
    await installPoolCrd(world.plane);
    const args = chart.args("node-lifecycle-controller");
    assert.ok(args.some((arg) => arg.includes("service-l2-pools")), `the Deployment runs the pools: ${args.join(" ")}`);
    // healthy-a (from the first run: Ready, at 198.18.200.1) announces on its segment, as its agent would.
    const segment = "198.18.200";
    const pools = new Resource<LoadBalancerIPPool>(world.plane.admin, POOL_RESOURCE);
    await pools.create({ ...POOL_TYPE, metadata: { name: "least-privilege" }, spec: { addresses: [`${segment}.10`] } });
    const leases = new Resource<Lease>(world.plane.admin, leaseResource(NLC_ACCOUNT.namespace));
    const announcer = await keepAnnouncerLease(leases, "healthy-a", [`${segment}.0/24`]);
    try {
      nlc = new ControllerProcess(
        world,
        controllerFlags(world, { notReadyTimeout: "3s", reconcileInterval: "1s" }, ...args),
        await asShipped("node-lifecycle-controller"),
      );
      await nlc.waitForLog("started leading");
      await l2Round(world.plane, `${segment}.10`, "healthy-a");
      assert.equal(await nlc.stop(), 0);
    } finally {
      announcer.stop();
    }
    await assertLeastPrivilege(world.plane.auditLogPath, rbacFile, NLC_ACCOUNT);
  });

  // After the runs above, in the same audit log: with bgp.enabled too, the bgppeer-status controller runs (as the
  // Deployment runs it then) and lists and watches the BGPPeers (the chart's CRD) and writes one's status from a
  // Node's session report, written as an agent writes it.
  test("with BGP too (bgp.enabled), a run that also writes a BGPPeer's status uses exactly its grants", async () => {
    const values = ["csrApproval.enabled=true", "loadBalancer.l2.enabled=true", "bgp.enabled=true"];
    const chart = await renderChart(world.plane.binaries.helm, values);
    const rbacFile = await chart.writeTemplate("nlc-rbac.yaml", world.plane.dir);
    await world.plane.kubectl(["apply", "-f", rbacFile]);
    await installBgpPeerCrd(world.plane);
    const args = chart.args("node-lifecycle-controller");
    assert.ok(args.some((arg) => arg.includes("bgppeer-status")), `the Deployment runs bgppeer-status: ${args.join(" ")}`);
    const peers = new Resource<BGPPeer>(world.plane.admin, BGP_PEER_RESOURCE);
    const spec = { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513 };
    await peers.create({ ...BGP_PEER_TYPE, metadata: { name: "least-privilege" }, spec });
    const annotations = { [SESSIONS_ANNOTATION]: sessionReportText({ "least-privilege": "Established" }) };
    await world.nodes.patch("healthy-a", "merge", { metadata: { annotations } });
    nlc = new ControllerProcess(
      world,
      controllerFlags(world, { notReadyTimeout: "3s", reconcileInterval: "1s" }, ...args),
      await asShipped("node-lifecycle-controller"),
    );
    await nlc.waitForLog("started leading");
    await waitFor("the BGPPeer's status: healthy-a established", async () => {
      const status = (await peers.get("least-privilege")).status;
      return status?.established === 1 && status.notEstablished.every((line) => !line.startsWith("healthy-a:"));
    });
    assert.equal(await nlc.stop(), 0);
    await assertLeastPrivilege(world.plane.auditLogPath, rbacFile, NLC_ACCOUNT);
  });
});
