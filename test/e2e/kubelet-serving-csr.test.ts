// The kubelet-serving CSR approver on real kubelets: the chart installed with csrApproval.enabled runs it as a pod
// of the project image, on a cluster whose apiserver verifies kubelets' serving certificates against the cluster CA
// (--kubelet-certificate-authority; without it `kubectl logs` works with any certificate and proves nothing).
// Node "boot", a worker, runs kubelet with serverTLSBootstrap: it asks for its serving certificate with a CSR and serves
// nothing until one is issued. Node "plain", the control-plane node where the approver runs (the chart's default
// placement), signs its own certificate, as kubelets do by default.
//
// What is shown, in order: boot's CSR waits (rule 9) while its Node is uninitialised and lacks the IP asked for, and
// is approved once the agent wrote the Node's addresses; the approval is the approver pod's write (audit log) and
// kube-controller-manager issues a certificate of the cluster CA for exactly boot's addresses; boot's kubelet serves
// a certificate for the Node's current addresses and `kubectl logs` of its pod works through the verifying apiserver
// (while plain's self-signed one is refused); a kubelet restart keeps serving the same certificate without asking
// again; a kubelet that lost its certificate asks again and is approved (CSR creation → approval is measured);
// plain and a CSR of another signer are never touched.
//
// The race is staged, not waited for: before the approver starts, boot's InternalIP is taken off its Node, so the
// kubelet's pending CSR names an IP the Node does not list, as when a kubelet asks with addresses its Node is about to
// get. The agent reaches boot only after the approver was seen waiting (its DaemonSet selects a label boot gets then).
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { readdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import tls from "node:tls";
import { after, before, describe, test } from "node:test";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Event, Node, Pod } from "kubernetes-types/core/v1.js";
import type { AuditEvent } from "../../localcluster/audit.ts";
import { type Cluster, type ClusterNode, startCluster } from "../../localcluster/cluster.ts";
import { opensslCsr } from "../../src/csr/csr.fixture.ts";
import { CSR_RESOURCE } from "../../src/csr/controller.ts";
import { KUBELET_SERVING_SIGNER } from "../../src/csr/decide.ts";
import { Resource } from "../../src/kube/resource.ts";
import { nodeClient } from "../csr/world.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { clusterAuditEvents } from "./cluster-objects.ts";
import { AGENT_APP, listPods, NAMESPACE } from "../../localcluster/project.ts";

type Csr = CertificateSigningRequest;

const BOOT = "boot";
const PLAIN = "plain";
const CHART = path.resolve(import.meta.dirname, "../../charts/local-ccm");
const APPROVER = `system:serviceaccount:${NAMESPACE}:node-lifecycle-controller`;
const AGENT = `system:serviceaccount:${NAMESPACE}:local-ccm`;
/** The agent's DaemonSet selects nodes with this label: boot gets it once the approver was seen waiting. */
const AGENT_LABEL = "e2e.local-ccm.io/agent";
const KUBELET_PORT = 10250;
const KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet";
/**
 * The approver's budget is 1 s p99 (docs/performance.md, measured by bench:nlc); this bound only catches a broken
 * path, on a busy machine, so it is generous.
 */
const APPROVAL_BOUND_MS = 30_000;

/** The certificate kubelet presents on its port; with `ca`, the handshake also checks the chain up to it and that
 * the certificate names the node's IP (as the apiserver does with --kubelet-certificate-authority). */
function presented(node: ClusterNode, ca: string | undefined): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: node.ip, port: KUBELET_PORT, ca, rejectUnauthorized: ca !== undefined });
    socket.setTimeout(5_000, () => socket.destroy(new Error(`no TLS handshake with ${node.ip} in 5 s`)));
    socket.once("secureConnect", () => {
      resolve(socket.getPeerX509Certificate() as X509Certificate);
      socket.end();
    });
    socket.once("error", reject);
  });
}

/** A certificate's SANs, sorted: "DNS:boot, IP Address:198.19.128.10". */
function sansOf(cert: X509Certificate): { dns: string[]; ips: string[] } {
  const entries = (cert.subjectAltName ?? "").split(", ").filter(Boolean);
  const of = (prefix: string) => entries.filter((e) => e.startsWith(prefix)).map((e) => e.slice(prefix.length)).sort();
  return { dns: of("DNS:"), ips: of("IP Address:") };
}

/** The SANs kubelet asks for: every DNS-type address of its Node, and every IP. */
function nodeSans(node: Node): { dns: string[]; ips: string[] } {
  const addresses = node.status?.addresses ?? [];
  const of = (types: string[]) => [
    ...new Set(addresses.filter((a) => types.includes(a.type)).map((a) => a.address)),
  ].sort();
  return { dns: of(["Hostname", "InternalDNS", "ExternalDNS"]), ips: of(["InternalIP", "ExternalIP"]) };
}

const issuedCertificate = (csr: Csr) =>
  csr.status?.certificate ? new X509Certificate(Buffer.from(csr.status.certificate, "base64")) : undefined;
const conditionOf = (csr: Csr, type: string) => csr.status?.conditions?.find((c) => c.type === type);
const at = (event: AuditEvent) => Date.parse(event.stageTimestamp);
const created = (csr: Csr) => Date.parse(csr.metadata?.creationTimestamp ?? "");

describe("kubelet serving certificates on real kubelets", () => {
  let cluster: Cluster;
  let ca: X509Certificate;
  let caPem: string;
  let csrs: Resource<Csr>;
  let installed: Date;
  let plainCertificate: X509Certificate;
  let firstCsr: string;
  let otherSignerCsr: string;
  before(async () => {
    cluster = await startCluster({
      // The first node is the control-plane node.
      nodes: [{ name: PLAIN }, { name: BOOT, serverTLSBootstrap: true }],
      audit: true,
      verifyKubeletServingCertificates: true,
    });
    caPem = await readFile(cluster.controlPlane.caPath, "utf8");
    ca = new X509Certificate(caPem);
    csrs = new Resource<Csr>(cluster.admin, CSR_RESOURCE);
  });
  after(async () => {
    await cluster?.stop();
  });

  /** The kubelet-serving CSRs of node `name`, oldest first. */
  const servingCsrs = async (name: string) =>
    (await csrs.list()).items
      .filter((csr) => csr.spec.signerName === KUBELET_SERVING_SIGNER && csr.spec.username === `system:node:${name}`)
      .sort((a, b) => created(a) - created(b));
  const getNode = (name: string) => cluster.admin.request<Node>({ method: "GET", path: `/api/v1/nodes/${name}` });
  const eventsAbout = async (csr: string) => {
    const selector = encodeURIComponent(`involvedObject.name=${csr}`);
    const path = `/api/v1/namespaces/default/events?fieldSelector=${selector}`;
    return (await cluster.admin.request<{ items: Event[] }>({ method: "GET", path })).items;
  };
  const audit = () => clusterAuditEvents(cluster, installed);
  /** Successful writes to the approval subresource of CSRs, by anyone. */
  const approvals = (events: AuditEvent[]) =>
    events.filter(
      (e) =>
        e.objectRef?.resource === "certificatesigningrequests" &&
        e.objectRef.subresource === "approval" &&
        e.verb === "update" &&
        (e.responseStatus?.code ?? 0) < 300,
    );
  const agentPod = async (node: string) => {
    const pods = await listPods(cluster, AGENT_APP);
    return pods.find((pod) => pod.spec?.nodeName === node && pod.status?.phase === "Running")?.metadata?.name;
  };
  const logsOf = async (node: string) => {
    const pod = await waitFor(`the agent pod on ${node}`, () => agentPod(node), 60_000, 250);
    return cluster.kubectl(["logs", "-n", NAMESPACE, pod]);
  };

  test("before any approval: boot asks with a CSR and serves nothing; plain serves its own", async () => {
    const csr = await waitFor("boot's kubelet-serving CSR", async () => (await servingCsrs(BOOT))[0], 60_000, 250);
    firstCsr = csr.metadata?.name as string;
    assert.deepEqual(csr.status?.conditions ?? [], []);
    assert.equal(csr.status?.certificate, undefined);
    // What users of such clusters see, and why they reach for --kubelet-insecure-tls.
    await assert.rejects(presented(cluster.node(BOOT), undefined), /alert internal error/);
    plainCertificate = await presented(cluster.node(PLAIN), undefined);
    assert.ok(!plainCertificate.checkIssued(ca), "plain's kubelet signs its own certificate");
    await assert.rejects(presented(cluster.node(PLAIN), caPem), /self.signed|unable to verify/);
    assert.deepEqual(await servingCsrs(PLAIN), []);
  });

  test("boot's CSR waits for its Node, and the approver pod approves it once the agent wrote the IP", async (t) => {
    const boot = cluster.node(BOOT);
    await cluster.kubectl([
      "patch", "node", BOOT, "--subresource=status", "--type=merge",
      "-p", JSON.stringify({ status: { addresses: [{ type: "Hostname", address: BOOT }] } }),
    ]);
    // A kubelet's client-certificate request, as its rotation would make it: another signer's, never the approver's.
    otherSignerCsr = `kubelet-client-${PLAIN}`;
    const plainClient = await nodeClient(cluster.controlPlane, PLAIN);
    t.after(() => plainClient.close());
    const pem = opensslCsr({ subject: `/O=system:nodes/CN=system:node:${PLAIN}` });
    await new Resource<Csr>(plainClient, CSR_RESOURCE).create({
      metadata: { name: otherSignerCsr },
      spec: {
        request: Buffer.from(pem).toString("base64"),
        signerName: KUBELET_CLIENT_SIGNER,
        usages: ["digital signature", "client auth"],
      },
    });

    await cluster.kubectl(["label", "node", PLAIN, `${AGENT_LABEL}=true`]);
    installed = new Date(Date.now() - 1000);
    await cluster.helm([
      "install", "local-ccm", CHART, `--namespace=${NAMESPACE}`,
      "--set=csrApproval.enabled=true",
      // One replica: leader election is proven elsewhere, and this machine's two cores are shared.
      "--set=nodeLifecycleController.replicas=1",
      // The agent owns InternalIPs: it gives boot back the one taken off above (the nodes' subnet on eth0).
      `--set=ipDetection.internalIPCIDR=${boot.ip.replace(/\.\d+$/, ".0")}/24`,
      `--set-string=nodeSelector.${AGENT_LABEL.replaceAll(".", "\\.")}=true`,
    ]);
    const waiting = await waitFor(
      "the approver to wait for boot",
      async () => (await eventsAbout(firstCsr)).find((e) => e.reason === "WaitingForNode"),
      90_000,
      250,
    );
    assert.equal(waiting.source?.component, "kubelet-serving-csr-controller");
    const ip = boot.ip.replaceAll(".", "\\.");
    assert.match(waiting.message ?? "", new RegExp(`^waiting for node "${BOOT}" to be initialized: rule 5 .*${ip}`));
    assert.deepEqual((await csrs.get(firstCsr)).status?.conditions ?? [], [], "pending while it waits");

    await cluster.kubectl(["label", "node", BOOT, `${AGENT_LABEL}=true`]);
    const approved = await waitFor(
      "boot's first CSR approved and issued",
      async () => {
        const csr = await csrs.get(firstCsr);
        return issuedCertificate(csr) && csr;
      },
      60_000,
      250,
    );
    assert.equal(conditionOf(approved, "Denied"), undefined);
    const condition = conditionOf(approved, "Approved");
    assert.equal(condition?.reason, "AutoApproved");
    assert.equal(condition?.message, `rules 1–8 hold for node "${BOOT}": DNS ${BOOT}; IP ${boot.ip}`);

    // Who and when: one approval, written with the token of the approver's pod, after the agent's first write of
    // boot's addresses (before it, the Node did not list the IP).
    const events = await audit();
    const writes = approvals(events).filter((e) => e.objectRef?.name === firstCsr);
    assert.equal(writes.length, 1);
    const [approval] = writes as [AuditEvent];
    assert.equal(approval.user.username, APPROVER);
    const approverPod = approval.user.extra?.["authentication.kubernetes.io/pod-name"]?.[0] ?? "";
    assert.match(approverPod, /^node-lifecycle-controller-/);
    const pod = await cluster.admin.request<Pod>({
      method: "GET",
      path: `/api/v1/namespaces/${NAMESPACE}/pods/${approverPod}`,
    });
    assert.equal(pod.spec?.containers[0]?.image, cluster.projectImage);
    assert.equal(pod.spec?.nodeName, PLAIN, "on the control-plane node, not on the worker whose CSR it approves");
    const addressWrite = events.find(
      (e) =>
        e.user.username === AGENT &&
        e.objectRef?.resource === "nodes" &&
        e.objectRef.name === BOOT &&
        e.objectRef.subresource === "status" &&
        (e.responseStatus?.code ?? 0) < 300,
    );
    assert.ok(addressWrite, "the agent wrote boot's addresses");
    // The write's arrival, not its completion: the approver can see the commit and finish before the write's own
    // response is stamped.
    assert.ok(Date.parse(addressWrite.requestReceivedTimestamp) <= at(approval), "approved only once the Node listed the IP");
    assert.ok(Date.parse(waiting.firstTimestamp ?? "") <= at(approval));
    t.diagnostic(`agent's address write → approval of the waiting CSR: ${at(approval) - at(addressWrite)} ms`);

    // kube-controller-manager's signer issued it with the cluster CA, for exactly what boot asked.
    const certificate = issuedCertificate(approved) as X509Certificate;
    assert.ok(certificate.checkIssued(ca) && certificate.verify(ca.publicKey));
    assert.deepEqual(sansOf(certificate), { dns: [BOOT], ips: [boot.ip] });
  });

  test("boot serves the cluster CA's certificate for its addresses; the verifying apiserver gets logs", async (t) => {
    const boot = cluster.node(BOOT);
    // kubelet asks again whenever its Node's addresses no longer match its certificate (an ExternalIP the agent
    // adds, say): it serves the certificate of its latest request, which must match the Node's addresses.
    const served = await waitFor(
      "boot to serve a certificate for its Node's addresses",
      async () => {
        const cert = await presented(boot, caPem); // the chain to the cluster CA and boot's IP are checked here
        return JSON.stringify(sansOf(cert)) === JSON.stringify(nodeSans(await getNode(BOOT))) && cert;
      },
      60_000,
      250,
    );
    assert.ok(served.checkIssued(ca));
    const all = await servingCsrs(BOOT);
    assert.ok(all.some((csr) => issuedCertificate(csr)?.fingerprint256 === served.fingerprint256));
    t.diagnostic(`boot's kubelet-serving CSRs so far: ${all.length}, each approved by the approver`);
    const approvedBy = new Map(approvals(await audit()).map((e) => [e.objectRef?.name, e.user.username]));
    for (const csr of all) {
      const name = csr.metadata?.name as string;
      assert.equal(conditionOf(csr, "Approved")?.reason, "AutoApproved", name);
      assert.equal(approvedBy.get(name), APPROVER, name);
    }

    assert.match(await logsOf(BOOT), /local-ccm started/);
    // plain's self-signed certificate fails the apiserver's check (Go checks the IP SAN before the chain).
    await assert.rejects(logsOf(PLAIN), /tls: failed to verify certificate: x509: /);
  });

  test("after a kubelet restart, boot serves the same certificate without asking again; logs work", async () => {
    const boot = cluster.node(BOOT);
    const before = await presented(boot, caPem);
    const requests = (await servingCsrs(BOOT)).length;
    await cluster.restartKubelet(BOOT);
    const again = await waitFor("boot's kubelet serving again", () => presented(boot, caPem), 60_000, 250);
    assert.equal(again.fingerprint256, before.fingerprint256, "the certificate kept in kubelet's cert dir");
    assert.match(await waitFor("kubectl logs through boot", () => logsOf(BOOT), 30_000, 500), /local-ccm started/);
    // kubelet's certificate manager compares its certificate with the Node's addresses every second.
    await sleep(3_000);
    assert.equal((await servingCsrs(BOOT)).length, requests, "no new CSR");
  });

  test("a kubelet that lost its certificate asks again, is approved, and serves the new one", async (t) => {
    const boot = cluster.node(BOOT);
    const old = await presented(boot, caPem);
    const certDir = path.join(cluster.dir, "nodes", BOOT, "kubelet-pki");
    for (const file of await readdir(certDir))
      if (file.startsWith("kubelet-server-")) await rm(path.join(certDir, file));
    const since = Date.now();
    await cluster.restartKubelet(BOOT);
    const served = await waitFor(
      "boot to serve a new certificate",
      async () => {
        const cert = await presented(boot, caPem);
        return cert.fingerprint256 !== old.fingerprint256 && cert;
      },
      60_000,
      250,
    );
    const events = (await audit()).filter((e) => at(e) >= since);
    const created = events.filter(
      (e) => e.verb === "create" && e.objectRef?.resource === "certificatesigningrequests" &&
        e.user.username === `system:node:${BOOT}` && (e.responseStatus?.code ?? 0) < 300,
    );
    const approved = approvals(events);
    assert.equal(created.length, 1);
    assert.equal(approved.length, 1);
    const [creation, approval] = [created[0], approved[0]] as [AuditEvent, AuditEvent];
    assert.equal(approval.user.username, APPROVER);
    const latency = at(approval) - at(creation);
    t.diagnostic(`CSR creation → approval on the real cluster: ${latency} ms`);
    assert.ok(latency < APPROVAL_BOUND_MS, `${latency} ms`);
    const csr = await csrs.get(approval.objectRef?.name as string);
    assert.equal(issuedCertificate(csr)?.fingerprint256, served.fingerprint256);
    assert.match(await waitFor("kubectl logs through boot", () => logsOf(BOOT), 30_000, 500), /local-ccm started/);
  });

  test("plain and another signer's CSR are untouched", async () => {
    assert.deepEqual(await servingCsrs(PLAIN), []);
    assert.equal((await presented(cluster.node(PLAIN), undefined)).fingerprint256, plainCertificate.fingerprint256);
    const other = await csrs.get(otherSignerCsr);
    assert.deepEqual(other.status?.conditions ?? [], []);
    assert.equal(other.status?.certificate, undefined);
    assert.deepEqual(await eventsAbout(otherSignerCsr), []);
    const events = await audit();
    const byApprover = events.filter(
      (e) => e.user.username === APPROVER && e.objectRef?.resource === "certificatesigningrequests",
    );
    assert.deepEqual(byApprover.filter((e) => e.objectRef?.name === otherSignerCsr), []);
    // Everything it wrote to CSRs was an approval of boot's.
    const bootCsrs = new Set((await servingCsrs(BOOT)).map((csr) => csr.metadata?.name));
    for (const write of byApprover.filter((e) => !["get", "list", "watch"].includes(e.verb))) {
      assert.equal(write.objectRef?.subresource, "approval");
      assert.ok(bootCsrs.has(write.objectRef?.name), write.objectRef?.name);
    }
  });
});
