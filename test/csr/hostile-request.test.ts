// Hostile request texts on a real control plane, made by a node identity, while an honest node asks too:
// kube-apiserver stores them (Go's pem.Decode reads their first block), the approver denies them with rule
// "request" without reading them further, and kube-controller-manager's signer issues nothing for them. The
// honest request created at the same moment is still approved and signed.
//   kind 1: two blocks; the first's BEGIN line ends with a space, which Go reads and the first block asks for
//           another node's IP and the API server's name; the second is the node's own.
//   kind 4: a valid block followed by unterminated BEGIN lines, up to the size bound and far over it.
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { after, before, test } from "node:test";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import { waitFor } from "../../localcluster/wait.ts";
import { CSR_RESOURCE } from "../../src/csr/controller.ts";
import { opensslCsr } from "../../src/csr/csr.fixture.ts";
import { KUBELET_SERVING_SIGNER } from "../../src/csr/decide.ts";
import { MAX_REQUEST_BYTES } from "../../src/csr/request.ts";
import { Resource } from "../../src/kube/resource.ts";
import { ControllerProcess } from "../lifecycle/world.ts";
import { type CsrWorld, startCsrWorld } from "./world.ts";

let world: CsrWorld;
let approver: ControllerProcess | undefined;

before(async () => {
  world = await startCsrWorld({ controllerManager: true });
});
after(async () => {
  approver?.child.kill("SIGKILL");
  await world?.stop();
});

/** Creates a CSR as node `node` with exactly these request bytes; returns its name. */
async function createRaw(node: string, name: string, request: string): Promise<string> {
  const csrs = new Resource<CertificateSigningRequest>(await world.nodeClient(node), CSR_RESOURCE);
  await csrs.create({
    metadata: { name },
    spec: {
      request: Buffer.from(request, "latin1").toString("base64"),
      signerName: KUBELET_SERVING_SIGNER,
      usages: ["digital signature", "server auth"],
    },
  });
  return name;
}

async function decision(csr: string, timeoutMs = 60_000) {
  return waitFor(
    `a decision on ${csr}`,
    async () =>
      (await world.csrs.get(csr)).status?.conditions?.find(({ type }) => type === "Approved" || type === "Denied"),
    timeoutMs,
  );
}

test("kind 1 and kind 4 requests are denied by rule request, an honest one made meanwhile is approved", async () => {
  await world.addNode("h1", ["198.18.60.1", "h1"]);
  await world.addNode("victim", ["198.18.60.2", "victim"]);
  approver = new ControllerProcess({}, [
    `--kubeconfig=${world.kubeconfig}`,
    "--controllers=kubelet-serving-csr",
    "--leader-elect=false",
    "--health-bind-address=127.0.0.1:0",
  ]);
  await approver.waitForLog("caches synced");

  const honest = opensslCsr({ subject: "/O=system:nodes/CN=system:node:h1", sans: "DNS:h1,IP:198.18.60.1" });
  const hostile = opensslCsr({
    subject: "/O=system:nodes/CN=system:node:h1",
    sans: "DNS:h1,DNS:kubernetes.default.svc,IP:198.18.60.2",
  });
  const unterminated = "-----BEGIN CERTIFICATE REQUEST-----\n";
  const padded = (bytes: number) =>
    honest + unterminated.repeat(Math.floor((bytes - honest.length) / unterminated.length));
  const requests: [name: string, text: string, reason: RegExp][] = [
    [
      "kind1-space",
      hostile.replace("REQUEST-----\n", "REQUEST----- \n") + honest,
      /^rule 3 \(request\): not one canonical PEM block: characters after the BEGIN line's dashes/,
    ],
    [
      "kind4-at-bound",
      padded(MAX_REQUEST_BYTES),
      /^rule 3 \(request\): not one canonical PEM block: another block after the END line$/,
    ],
    ["kind4-over-bound", padded(400_000), /^rule 3 \(request\): request of \d+ bytes is over the bound of 16384$/],
  ];
  const started = Date.now();
  const [good] = await Promise.all([
    createRaw("h1", "honest-h1", honest),
    ...requests.map(([name, text]) => createRaw("h1", name, text)),
  ]);

  const approved = await decision(good as string);
  const approvalMs = Date.now() - started;
  assert.equal(approved.type, "Approved", approved.message);
  for (const [name, , reason] of requests) {
    const denied = await decision(name);
    assert.deepEqual([denied.type, denied.reason], ["Denied", "AutoDenied"], name);
    assert.match(denied.message ?? "", reason, name);
  }
  const issued = async () => (await world.csrs.get("honest-h1")).status?.certificate;
  const pem = await waitFor("the honest certificate", issued);
  const certificate = new X509Certificate(Buffer.from(pem, "base64"));
  assert.equal(certificate.subjectAltName, "DNS:h1, IP Address:198.18.60.1");
  for (const [name] of requests)
    assert.equal((await world.csrs.get(name)).status?.certificate, undefined, `${name}: nothing issued`);
  // A figure, not a bound: the benchmark (bench/nlc.ts) measures latencies under load.
  console.log(`honest CSR approved ${approvalMs} ms after the four were created`);
  assert.equal(await approver.stop(), 0);
});
