// Secure metrics against a real control plane: the node-lifecycle-controller under the shipped RBAC serves
// /metrics over HTTPS, with a self-signed certificate or the one the chart makes, and only to bearer tokens the API
// server authenticates (for the audiences asked for, if any) and authorizes for get /metrics (deploy/metrics.yaml's
// reader ClusterRole); its probes answer on the health address without credentials. A flood of tokens from one
// address does not lock the authorised scraper out. The audit log counts what the reviews cost.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import tls from "node:tls";
import { after, before, test } from "node:test";
import { parseAllDocuments } from "yaml";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { auditedRequests } from "../../localcluster/audit.ts";
import { metricsScraperToken, scrapeSecure } from "../../localcluster/metrics.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { helmTemplate, NAMESPACE } from "../../scripts/render-manifests.ts";
import { ControllerProcess, RBAC_FILE, SERVICE_ACCOUNT } from "./world.ts";

const READER_FILE = path.join(import.meta.dirname, "../../deploy/metrics.yaml");
const NLC_USER = `system:serviceaccount:${SERVICE_ACCOUNT.namespace}:${SERVICE_ACCOUNT.name}`;

interface Reply {
  status: number;
  body: string;
}

const collect = (resolve: (reply: Reply) => void) => (res: http.IncomingMessage) => {
  let body = "";
  res.setEncoding("utf8");
  res.on("data", (chunk: string) => (body += chunk));
  res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
};

function httpGet(address: string, pathname: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    http.get(`http://${address}${pathname}`, { agent: false, timeout: 10_000 }, collect(resolve)).on("error", reject);
  });
}

/** The certificate served at 127.0.0.1:port, unverified. */
function servedCertificate(port: number): Promise<tls.PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.on("error", reject);
  });
}

const pem = (der: Buffer) => `-----BEGIN CERTIFICATE-----\n${der.toString("base64")}\n-----END CERTIFICATE-----\n`;

let plane: ControlPlane;
const started: ControllerProcess[] = [];

/** A node-lifecycle-controller under the shipped RBAC, health and secure metrics on loopback ports of their own. */
async function startController(args: string[] = []): Promise<{ nlc: ControllerProcess; metrics: URL; health: string }> {
  const kubeconfig = await plane.serviceAccountKubeconfig(SERVICE_ACCOUNT);
  const nlc = new ControllerProcess({}, [
    `--kubeconfig=${kubeconfig}`,
    "--leader-elect=false",
    "--v=2",
    "--health-bind-address=127.0.0.1:0",
    "--metrics-bind-address=127.0.0.1:0",
    ...args,
  ]);
  started.push(nlc);
  const serving = await nlc.waitForLog("serving /healthz and /readyz, and /metrics");
  return { nlc, metrics: new URL(serving.metrics as string), health: serving.address as string };
}

/** The TokenReviews and SubjectAccessReviews the controller has asked for so far. */
async function reviews(): Promise<{ tokenReviews: number; accessReviews: number }> {
  const counts = await auditedRequests(plane.auditLogPath as string, { user: NLC_USER });
  return { tokenReviews: counts.get("create tokenreviews") ?? 0, accessReviews: counts.get("create subjectaccessreviews") ?? 0 };
}

/** A ServiceAccount token for `audiences` (TokenRequest spec.audiences). */
async function audienceToken(namespace: string, name: string, audiences: string[]): Promise<string> {
  const request = await plane.admin.request<{ status: { token: string } }>({
    method: "POST",
    path: `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
    body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { audiences, expirationSeconds: 3600 } },
  });
  return request.status.token;
}

before(async () => {
  plane = await startControlPlane({ audit: true });
  await plane.kubectl(["apply", "-f", RBAC_FILE, "-f", READER_FILE]);
});

after(async () => {
  for (const nlc of started) nlc.child.kill("SIGKILL");
  await plane?.stop();
});

test("/metrics over HTTPS: 401 without a token or with a bad one, 403 without the grant, 200 with it; probes open", async () => {
  const prometheus = await metricsScraperToken(plane, "prometheus", { granted: true });
  const nobody = await metricsScraperToken(plane, "nobody", { granted: false });
  const { nlc, metrics: metricsUrl, health } = await startController();
  assert.equal(metricsUrl.protocol, "https:");
  assert.notEqual(metricsUrl.port, health.split(":")[1]);

  // The certificate: self-signed at start for this program and the address it binds.
  const served = await servedCertificate(Number(metricsUrl.port));
  assert.equal(served.subject.CN, "node-lifecycle-controller");
  assert.equal(served.issuer.CN, "node-lifecycle-controller");
  assert.match(served.subjectaltname ?? "", /IP Address:127\.0\.0\.1/);
  // Verified against the served certificate: its SANs name the address.
  const ca = pem(served.raw);
  const get = (token?: string) => scrapeSecure(metricsUrl, token, { ca });

  assert.deepEqual(await get(), { status: 401, body: "Unauthorized: no bearer token\n" });
  const bad = await get("not-a-token");
  assert.equal(bad.status, 401);
  assert.match(bad.body, /^Unauthorized: token not authenticated/);
  assert.deepEqual(await get(nobody), {
    status: 403,
    body: 'Forbidden: user "system:serviceaccount:monitoring:nobody" may not get /metrics\n',
  });
  const ok = await get(prometheus);
  assert.equal(ok.status, 200, ok.body);
  assert.match(ok.body, /^node_lifecycle_controller_leader [01]$/m);
  assert.ok(nlc.find("metrics request refused", { status: 403, rule: "authorization" }).length > 0);

  // Probes carry no credentials: the health address answers them, and has no /metrics.
  assert.deepEqual(await httpGet(health, "/healthz"), { status: 200, body: "ok\n" });
  await waitFor("ready", async () => (await httpGet(health, "/readyz")).status === 200);
  assert.equal((await httpGet(health, "/metrics")).status, 404);

  // A scrape every few seconds costs no further review within the cache period: 20 more scrapes, then the
  // reviews in the audit log are one per distinct token (3 TokenReviews) and per user (2 SubjectAccessReviews).
  for (let i = 0; i < 20; i++) assert.equal((await get(prometheus)).status, 200);
  await waitFor("the reviews in the audit log", async () => (await reviews()).accessReviews >= 2);
  assert.deepEqual(await reviews(), { tokenReviews: 3, accessReviews: 2 });

  assert.equal(await nlc.stop(), 0);
});

test("a token flood from one address (made-up tokens, a real unauthorised one) never locks the scraper out", async () => {
  const mallory = await metricsScraperToken(plane, "mallory", { granted: false });
  const { nlc, metrics } = await startController();
  const ca = pem((await servedCertificate(Number(metrics.port))).raw);
  const before = await reviews();

  // The attacker, at 127.0.0.2: eight clients, each sending a new random token (or the real, unauthorised one) as
  // fast as answers come, until the scraper is done.
  const ATTACKER = "127.0.0.2";
  const attackerStatuses = new Map<number, number>();
  let flooding = true;
  const attack = async (client: number) => {
    for (let i = 0; flooding; i++) {
      const token = (client + i) % 10 === 0 ? mallory : randomBytes(24).toString("base64url");
      const { status } = await scrapeSecure(metrics, token, { ca, localAddress: ATTACKER });
      attackerStatuses.set(status, (attackerStatuses.get(status) ?? 0) + 1);
    }
  };
  const attackers = Array.from({ length: 8 }, (_, client) => attack(client));
  try {
    // The scraper starts once the attacker has spent its address's budget, with a token never reviewed.
    await waitFor("the attacker refused for its address's budget", async () => (attackerStatuses.get(429) ?? 0) > 0);
    const granted = await metricsScraperToken(plane, "prometheus-2", { granted: true });
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) statuses.push((await scrapeSecure(metrics, granted, { ca })).status);
    // Its token rotated (kubelet refreshes projected tokens): the new one is reviewed on the scraper's budget.
    const rotated = await audienceToken("monitoring", "prometheus-2", []);
    for (let i = 0; i < 20; i++) statuses.push((await scrapeSecure(metrics, rotated, { ca })).status);
    assert.deepEqual(statuses, Array(40).fill(200));
    // The refusals are counted by rule, for the operator to see who tries what.
    const { body } = await scrapeSecure(metrics, rotated, { ca });
    const counted = /^node_lifecycle_controller_metrics_requests_refused_total\{code="429",rule="review-rate-source"\} (\d+)$/m.exec(body);
    assert.ok(Number(counted?.[1]) > 0, body);
  } finally {
    flooding = false;
    await Promise.all(attackers);
  }
  assert.ok((attackerStatuses.get(401) ?? 0) > 0 && (attackerStatuses.get(403) ?? 0) > 0, JSON.stringify([...attackerStatuses]));
  assert.ok((attackerStatuses.get(429) ?? 0) > 20, JSON.stringify([...attackerStatuses]));
  assert.equal(attackerStatuses.get(200), undefined);
  const refusal = nlc.find("metrics request refused", { status: 429, rule: "review-rate-source" })[0];
  assert.equal(refusal?.reason, `too many new tokens from ${ATTACKER}: at most 20 reviewed a minute`);
  // What the flood cost the API server: the attacker's 20 (its address's budget in the minute) and the scraper's 2.
  await waitFor("the scraper's reviews in the audit log", async () => (await reviews()).tokenReviews >= before.tokenReviews + 22);
  assert.equal((await reviews()).tokenReviews, before.tokenReviews + 22);
  assert.equal(await nlc.stop(), 0);
});

test("--metrics-token-audiences: only a token for that audience reads /metrics, and the API server refuses it", async () => {
  const AUDIENCE = "local-ccm-metrics";
  await metricsScraperToken(plane, "prometheus-aud", { granted: true });
  const apiToken = await audienceToken("monitoring", "prometheus-aud", []);
  const metricsToken = await audienceToken("monitoring", "prometheus-aud", [AUDIENCE]);
  const { nlc, metrics } = await startController([`--metrics-token-audiences=${AUDIENCE}`]);
  const ca = pem((await servedCertificate(Number(metrics.port))).raw);

  const ok = await scrapeSecure(metrics, metricsToken, { ca });
  assert.equal(ok.status, 200, ok.body);
  const refused = await scrapeSecure(metrics, apiToken, { ca });
  assert.equal(refused.status, 401);
  assert.match(refused.body, /^Unauthorized: token not authenticated: .*audience/);
  // Worthless elsewhere: the API server does not take the metrics token.
  const atApi = await new Promise<Reply>((resolve, reject) => {
    const headers = { authorization: `Bearer ${metricsToken}` };
    https.get(`${plane.server}/api`, { headers, rejectUnauthorized: false, agent: false }, collect(resolve)).on("error", reject);
  });
  assert.equal(atApi.status, 401);
  assert.equal(await nlc.stop(), 0);
});

test("the chart's certificate: kept across renders, served, verified with its CA and name; another CA fails", async () => {
  const render = async (args: string[] = []) => {
    const text = await helmTemplate(plane.binaries.helm, ["--show-only", "templates/metrics.yaml", ...args]);
    const secret = parseAllDocuments(text)
      .map((doc) => doc.toJS() as { kind: string; metadata: { name: string }; data: Record<string, string> })
      .find((obj) => obj?.kind === "Secret");
    assert.ok(secret, "the chart renders the metrics Secret");
    return { text, secret };
  };
  const first = await render();
  await plane.kubectl(["apply", "-f", "-"], first.text);
  // An upgrade (lookup against the cluster) keeps the stored pair; a render without the cluster makes a new one.
  const upgrade = await render(["--dry-run=server", `--kubeconfig=${plane.kubeconfigPath}`]);
  assert.deepEqual(upgrade.secret.data, first.secret.data);
  const other = await render();
  assert.notEqual(other.secret.data["ca.crt"], first.secret.data["ca.crt"]);

  const stored = JSON.parse(await plane.kubectl(["-n", NAMESPACE, "get", "secret", "local-ccm-metrics-tls", "-o", "json"]));
  const file = (key: string) => Buffer.from(stored.data[key] as string, "base64").toString("utf8");
  const dir = await mkdtemp(path.join(os.tmpdir(), "metrics-tls-"));
  try {
    await writeFile(path.join(dir, "tls.crt"), file("tls.crt"));
    await writeFile(path.join(dir, "tls.key"), file("tls.key"));
    const token = await metricsScraperToken(plane, "prometheus-ca", { granted: true });
    const { nlc, metrics } = await startController([
      `--metrics-cert-file=${path.join(dir, "tls.crt")}`,
      `--metrics-key-file=${path.join(dir, "tls.key")}`,
    ]);
    // As the chart's ServiceMonitor: tlsConfig.ca from the Secret, serverName the program's metrics Service.
    const servername = `node-lifecycle-controller-metrics.${NAMESPACE}.svc`;
    const ca = file("ca.crt");
    const ok = await scrapeSecure(metrics, token, { ca, servername });
    assert.equal(ok.status, 200, ok.body);
    // Another CA (the chart rendered without the cluster), or another name: the scraper sends nothing.
    const otherCa = Buffer.from(other.secret.data["ca.crt"] as string, "base64").toString("utf8");
    await assert.rejects(scrapeSecure(metrics, token, { ca: otherCa, servername }), { code: "UNABLE_TO_VERIFY_LEAF_SIGNATURE" });
    await assert.rejects(scrapeSecure(metrics, token, { ca, servername: "evil.example" }), { code: "ERR_TLS_CERT_ALTNAME_INVALID" });
    assert.equal(await nlc.stop(), 0);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
