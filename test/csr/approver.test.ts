// The kubelet-serving CSR approver against a real control plane, under its shipped RBAC: CSRs made by node
// identities (client certificates) with openssl-made requests. A valid request is approved; each rule's
// failure is denied with a condition and a Warning Event naming the rule and the value (a node that wrote the
// cluster's own addresses into its status gets none of them, and a new ServiceCIDR denies a waiting CSR at
// once); a CSR waits for its
// uninitialized Node and is approved once the Node has its address, or denied when it waited too long; other
// signers' CSRs are untouched; dry run writes nothing; of two replicas only the leader decides. The control
// plane's kube-controller-manager signs what is approved: the issued certificate holds the SANs requested.
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { after, before, describe, test } from "node:test";
import type { CertificateSigningRequestCondition } from "kubernetes-types/certificates/v1.js";
import { auditEvents } from "../../localcluster/audit.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";
import { canonicalIp } from "../../src/net/ip.ts";
import { ControllerProcess } from "../lifecycle/world.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { type CsrWorld, startCsrWorld } from "./world.ts";

let world: CsrWorld;
const processes: ControllerProcess[] = [];

before(async () => {
  world = await startCsrWorld({ audit: true, controllerManager: true });
});
after(async () => {
  for (const process of processes) process.child.kill("SIGKILL");
  await world?.stop();
});

/** The approver alone (no node deletion), with quick leader election unless given otherwise. */
function startApprover(name: string, ...extra: string[]): ControllerProcess {
  const args = [
    `--kubeconfig=${world.kubeconfig}`,
    "--controllers=kubelet-serving-csr",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=500ms",
    "--v=2",
    "--health-bind-address=127.0.0.1:0",
    "--metrics-bind-address=",
    ...extra,
  ];
  const process = new ControllerProcess({}, args, { env: { POD_NAME: name } });
  processes.push(process);
  return process;
}

async function decision(csr: string): Promise<CertificateSigningRequestCondition> {
  return waitFor(`a decision on ${csr}`, async () => {
    const conditions = (await world.csrs.get(csr)).status?.conditions ?? [];
    return conditions.find((condition) => condition.type === "Approved" || condition.type === "Denied");
  });
}

/** Events about a CSR, as "type reason: message". */
async function eventsAbout(csr: string): Promise<string[]> {
  const { items } = await world.events.list({ fieldSelector: `involvedObject.name=${csr}` });
  return items.map((event) => `${event.type} ${event.reason}: ${event.message}`);
}

/** Approval writes by the controller's service account, from the audit log. */
async function approvalWrites(): Promise<number> {
  const events = await auditEvents(world.plane.auditLogPath as string);
  return events.filter(
    (event) =>
      event.user.username.endsWith(":node-lifecycle-controller") && event.objectRef?.subresource === "approval",
  ).length;
}

describe("dry run", () => {
  test("logs and events what it would decide, and writes nothing", async () => {
    await world.addNode("dry", ["198.18.20.1", "dry"]);
    const approver = startApprover("dry-run", "--dry-run", "--leader-elect=false");
    const good = await world.requestCertificate("dry", { sans: "DNS:dry,IP:198.18.20.1" });
    const bad = await world.requestCertificate("dry", { sans: "DNS:dry,IP:198.18.20.99" });
    await approver.waitForLog("would approve CSR (dry run)", { csr: good });
    const denial = await approver.waitForLog("would deny CSR (dry run)", { csr: bad });
    assert.equal(denial.rule, "ip-san");
    await waitFor("the dry-run events", async () => (await eventsAbout(bad)).length > 0 && (await eventsAbout(good)).length > 0);
    assert.deepEqual(await eventsAbout(good), [
      `Normal WouldApprove: would approve (dry run): rules 1–8 hold for node "dry": DNS dry; IP 198.18.20.1`,
    ]);
    assert.deepEqual(await eventsAbout(bad), [
      `Warning WouldDeny: would deny (dry run): rule 5 (IP SANs): 198.18.20.99 is not an address of node "dry"`,
    ]);
    assert.equal(await approver.stop(), 0);
    for (const csr of [good, bad]) assert.deepEqual((await world.csrs.get(csr)).status?.conditions ?? [], [], csr);
    assert.equal(await approvalWrites(), 0, "no approval subresource write");
  });
});

describe("two replicas, leader election", () => {
  let replicas: ControllerProcess[];
  let leader: ControllerProcess;
  before(async () => {
    const flags = ["--csr-ip-allowlist=198.18.0.0/16,fd00:198:18::/48", "--csr-max-expiration=1h", "--csr-pending-timeout=8s"];
    replicas = [startApprover("replica-a", ...flags), startApprover("replica-b", ...flags)];
    leader = await waitFor("a leader", () => replicas.find((replica) => replica.find("started leading").length));
    for (const replica of replicas) await replica.waitForLog("caches synced");
  });

  test("a node's valid request is approved, with a Normal event, and gets a certificate with its SANs", async () => {
    await world.addNode("good", ["198.18.21.1", "fd00:198:18::21", "good"]);
    const csr = await world.requestCertificate("good", { sans: "DNS:good,IP:198.18.21.1,IP:fd00:198:18:0::21" });
    const condition = await decision(csr);
    assert.equal(condition.type, "Approved");
    assert.equal(condition.reason, "AutoApproved");
    const message = 'rules 1–8 hold for node "good": DNS good; IP 198.18.21.1, fd00:198:18::21';
    assert.equal(condition.message, message);
    await waitFor("the Approved event", async () => (await eventsAbout(csr)).includes(`Normal Approved: ${message}`));
    const pem = await waitFor("the certificate issued", async () => (await world.csrs.get(csr)).status?.certificate);
    const certificate = new X509Certificate(Buffer.from(pem, "base64"));
    const sans = (certificate.subjectAltName ?? "").split(", ").map((san) => {
      const [kind, value = ""] = san.split(/:(.*)/);
      return kind === "IP Address" ? `IP:${canonicalIp(value)}` : `${kind}:${value}`;
    });
    assert.deepEqual(sans, ["DNS:good", "IP:198.18.21.1", "IP:fd00:198:18::21"]);
    assert.equal(certificate.subject, "O=system:nodes\nCN=system:node:good");
  });

  const denials: [string, { node?: string; addresses?: string[]; as?: string; request: Parameters<CsrWorld["requestCertificate"]>[1] }, string][] = [
    [
      "rule 2: a requester that is no node",
      { as: "admin", request: { sans: "DNS:admin", subject: "/O=system:nodes/CN=system:node:admin" } },
      'rule 2 (identity): username "admin" is not system:node:<name>',
    ],
    [
      "rule 3: a subject CN of another node",
      { node: "r3", request: { sans: "DNS:r3", subject: "/O=system:nodes/CN=system:node:other" } },
      "rule 3 (request): subject CN [system:node:other] is not [system:node:r3]",
    ],
    [
      "rule 4: a client auth usage",
      { node: "r4", request: { sans: "DNS:r4", usages: ["digital signature", "server auth", "client auth"] } },
      'rule 4 (usages): "client auth" not allowed',
    ],
    [
      "rule 5: an IP SAN of another node",
      { node: "r5", request: { sans: "DNS:r5,IP:198.18.21.1" } },
      'rule 5 (IP SANs): 198.18.21.1 is not an address of node "r5"',
    ],
    [
      "rule 6: a DNS SAN of the API server",
      { node: "r6", request: { sans: "DNS:r6,DNS:kubernetes.default.svc.cluster.local" } },
      'rule 6 (DNS SANs): "kubernetes.default.svc.cluster.local" is a name of the API server',
    ],
    [
      "rule 6: another node's name",
      { node: "r6b", request: { sans: "DNS:good" } },
      'rule 6 (DNS SANs): "good" is a name of node "good"',
    ],
    [
      "rule 7: an own IP outside the allowlist",
      { node: "r7", addresses: ["198.19.0.7", "r7"], request: { sans: "DNS:r7,IP:198.19.0.7" } },
      "rule 7 (IP allowlist): 198.19.0.7 is in none of 198.18.0.0/16, fd00:198:18::/48",
    ],
    [
      "rule 8: a longer expiration than allowed",
      { node: "r8", request: { sans: "DNS:r8", expirationSeconds: 7200 } },
      "rule 8 (expiration): expirationSeconds 7200 exceeds the maximum 3600",
    ],
  ];
  let host = 30;
  for (const [title, { node, addresses, as, request }, message] of denials) {
    test(`${title} is denied, with a Warning event naming rule and value`, async () => {
      if (node) await world.addNode(node, addresses ?? [`198.18.${host++}.1`, node]);
      const csr = await world.requestCertificate((as ?? node) as string, request);
      const condition = await decision(csr);
      assert.deepEqual([condition.type, condition.reason, condition.message], ["Denied", "AutoDenied", message]);
      await waitFor("the Denied event", async () => (await eventsAbout(csr)).includes(`Warning Denied: ${message}`));
    });
  }

  test("rule 5b: a node that wrote the kubernetes Service's ClusterIP and an API server address into its own status gets neither; its honest request is approved", async () => {
    const clusterIP = await world.kubernetesClusterIP();
    const endpoint = "198.18.61.1";
    const slice = await world.addApiServerEndpoint(endpoint);
    await world.addNode("claims", ["198.18.60.1", "claims"]);
    await world.writeOwnAddresses("claims", [
      { type: "InternalIP", address: "198.18.60.1" },
      { type: "ExternalIP", address: clusterIP },
      { type: "ExternalIP", address: endpoint },
      { type: "Hostname", address: "claims" },
    ]);
    const addresses = (await world.nodes.get("claims")).status?.addresses?.map(({ address }) => address);
    assert.deepEqual(addresses, ["198.18.60.1", clusterIP, endpoint, "claims"], "the node's own write went through");
    const serviceIp = await world.requestCertificate("claims", { sans: `DNS:claims,IP:198.18.60.1,IP:${clusterIP}` });
    const apiServer = await world.requestCertificate("claims", { sans: `DNS:claims,IP:${endpoint}` });
    const honest = await world.requestCertificate("claims", { sans: "DNS:claims,IP:198.18.60.1" });
    const expected: [string, string][] = [
      // The test control plane's --service-cluster-ip-range, which the apiserver keeps as ServiceCIDR "kubernetes".
      [serviceIp, `rule 5b (cluster IPs): ${clusterIP} is in the Service CIDR 10.96.0.0/24 (ServiceCIDR "kubernetes")`],
      [apiServer, `rule 5b (cluster IPs): ${endpoint} is an address of the API server (EndpointSlice default/${slice})`],
    ];
    for (const [csr, message] of expected) {
      const condition = await decision(csr);
      assert.deepEqual([condition.type, condition.reason, condition.message], ["Denied", "AutoDenied", message]);
      await waitFor("the Denied event", async () => (await eventsAbout(csr)).includes(`Warning Denied: ${message}`));
      assert.equal((await world.csrs.get(csr)).status?.certificate, undefined, "no certificate issued");
    }
    const condition = await decision(honest);
    assert.equal(condition.type, "Approved", condition.message);
    assert.equal(condition.message, 'rules 1–8 hold for node "claims": DNS claims; IP 198.18.60.1');
  });

  test("rule 9: a CSR waits for its uninitialized Node, and is approved once it has its address", async () => {
    await world.addNode("late", ["late"], { uninitialized: true });
    const csr = await world.requestCertificate("late", { sans: "DNS:late,IP:198.18.50.1" });
    const waiting = 'waiting for node "late" to be initialized: rule 5 (IP SANs): 198.18.50.1 is not an address of node "late"';
    await waitFor("the WaitingForNode event", async () => (await eventsAbout(csr)).includes(`Normal WaitingForNode: ${waiting}`));
    assert.deepEqual((await world.csrs.get(csr)).status?.conditions ?? [], [], "still pending");
    // The agent's work: the address, then the taint off.
    const status = { addresses: [{ type: "InternalIP", address: "198.18.50.1" }, { type: "Hostname", address: "late" }] };
    await world.nodes.patch("late", "merge", { status }, { subresource: "status" });
    const taints = (await world.nodes.get("late")).spec?.taints?.filter((taint) => taint.key !== UNINITIALIZED_TAINT);
    await world.nodes.patch("late", "merge", { spec: { taints } });
    const condition = await decision(csr);
    assert.equal(condition.type, "Approved", condition.message);
  });

  test("rule 9 is bounded: a Node still uninitialized at the pending timeout gets its CSR denied", async () => {
    await world.addNode("stuck", ["stuck"], { uninitialized: true });
    const started = Date.now();
    const csr = await world.requestCertificate("stuck", { sans: "DNS:stuck,IP:198.18.51.1" });
    const condition = await decision(csr);
    assert.equal(condition.type, "Denied");
    assert.equal(
      condition.message,
      'rule 5 (IP SANs): 198.18.51.1 is not an address of node "stuck" (waited 8s for node "stuck" to be initialized)',
    );
    assert.ok(Date.now() - started >= 6_000, "decided at the deadline, not before");
  });

  test("a CSR for another signer is never touched", async () => {
    await world.addNode("other", ["198.18.52.1", "other"]);
    const csr = await world.requestCertificate("other", { sans: "DNS:other", signerName: "example.com/other" });
    const control = await world.requestCertificate("other", { sans: "DNS:other" });
    assert.equal((await decision(control)).type, "Approved"); // decided after the other one was created
    assert.deepEqual((await world.csrs.get(csr)).status?.conditions ?? [], []);
    assert.deepEqual(await eventsAbout(csr), []);
  });

  test("only the leader decided; the follower wrote nothing", async () => {
    const follower = replicas.find((replica) => replica !== leader) as ControllerProcess;
    assert.ok(leader.find("approved CSR").length >= 3);
    assert.ok(leader.find("denied CSR").length >= 8);
    for (const msg of ["approved CSR", "denied CSR", "CSR waits for its node"])
      assert.deepEqual(follower.find(msg), [], `the follower logged no "${msg}"`);
    for (const replica of replicas) assert.equal(await replica.stop(), 0);
  });
});

describe("a change of the cluster's addresses", () => {
  test("a new ServiceCIDR denies at once a CSR that waits for its Node to hold an address inside it", async () => {
    // A pending timeout far beyond the test's bounds: only the ServiceCIDR's arrival can decide the CSR.
    const approver = startApprover("cluster-change", "--leader-elect=false", "--csr-pending-timeout=10m");
    await approver.waitForLog("caches synced");
    await world.addNode("grows", ["grows"], { uninitialized: true });
    const csr = await world.requestCertificate("grows", { sans: "DNS:grows,IP:10.97.0.5" });
    const waiting = 'waiting for node "grows" to be initialized: rule 5 (IP SANs): 10.97.0.5 is not an address of node "grows"';
    await waitFor("the WaitingForNode event", async () => (await eventsAbout(csr)).includes(`Normal WaitingForNode: ${waiting}`));
    await world.serviceCidrs.create({ metadata: { name: "extra" }, spec: { cidrs: ["10.97.0.0/24"] } });
    try {
      const condition = await decision(csr);
      assert.deepEqual(
        [condition.type, condition.message],
        ["Denied", 'rule 5b (cluster IPs): 10.97.0.5 is in the Service CIDR 10.97.0.0/24 (ServiceCIDR "extra")'],
      );
    } finally {
      await world.serviceCidrs.delete("extra");
    }
    assert.equal(await approver.stop(), 0);
  });
});
