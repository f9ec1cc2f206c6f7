// Secure metrics against a real control plane: the node-lifecycle-controller under the shipped RBAC serves
// /metrics over HTTPS with a self-signed certificate, and only to bearer tokens the API server authenticates and
// authorizes for get /metrics (deploy/metrics.yaml's reader ClusterRole); its probes answer on the health address
// without credentials. The audit log counts what the reviews cost.
import assert from "node:assert/strict";
import http from "node:http";
import https from "node:https";
import path from "node:path";
import tls from "node:tls";
import { after, before, test } from "node:test";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { auditedRequests } from "../../localcluster/audit.ts";
import { metricsScraperToken } from "../../localcluster/metrics.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { ControllerProcess, RBAC_FILE, SERVICE_ACCOUNT } from "./world.ts";

const READER_FILE = path.join(import.meta.dirname, "../../deploy/metrics.yaml");

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

let plane: ControlPlane;
let nlc: ControllerProcess | undefined;

before(async () => {
  plane = await startControlPlane({ audit: true });
  await plane.kubectl(["apply", "-f", RBAC_FILE, "-f", READER_FILE]);
});

after(async () => {
  nlc?.child.kill("SIGKILL");
  await plane?.stop();
});

test("/metrics over HTTPS: 401 without a token or with a bad one, 403 without the grant, 200 with it; probes open", async () => {
  const prometheus = await metricsScraperToken(plane, "prometheus", { granted: true });
  const nobody = await metricsScraperToken(plane, "nobody", { granted: false });
  const kubeconfig = await plane.serviceAccountKubeconfig(SERVICE_ACCOUNT);
  nlc = new ControllerProcess({}, [
    `--kubeconfig=${kubeconfig}`,
    "--leader-elect=false",
    "--v=2",
    "--health-bind-address=127.0.0.1:0",
    "--metrics-bind-address=127.0.0.1:0",
  ]);
  const serving = await nlc.waitForLog("serving /healthz and /readyz, and /metrics");
  const health = serving.address as string;
  const metricsUrl = new URL(serving.metrics as string);
  assert.equal(metricsUrl.protocol, "https:");
  assert.notEqual(metricsUrl.port, health.split(":")[1]);

  // The certificate: self-signed at start for this program and the address it binds.
  const served = await new Promise<tls.PeerCertificate>((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port: Number(metricsUrl.port), rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.on("error", reject);
  });
  assert.equal(served.subject.CN, "node-lifecycle-controller");
  assert.equal(served.issuer.CN, "node-lifecycle-controller");
  assert.match(served.subjectaltname ?? "", /IP Address:127\.0\.0\.1/);
  const ca = `-----BEGIN CERTIFICATE-----\n${served.raw.toString("base64")}\n-----END CERTIFICATE-----\n`;
  const scrape = (token?: string) =>
    new Promise<Reply>((resolve, reject) => {
      const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
      // Verified against the served certificate: its SANs name the address.
      https.get(metricsUrl, { ca, headers, agent: false, timeout: 10_000 }, collect(resolve)).on("error", reject);
    });

  assert.deepEqual(await scrape(), { status: 401, body: "Unauthorized: no bearer token\n" });
  const bad = await scrape("not-a-token");
  assert.equal(bad.status, 401);
  assert.match(bad.body, /^Unauthorized: token not authenticated/);
  assert.deepEqual(await scrape(nobody), {
    status: 403,
    body: 'Forbidden: user "system:serviceaccount:monitoring:nobody" may not get /metrics\n',
  });
  const ok = await scrape(prometheus);
  assert.equal(ok.status, 200, ok.body);
  assert.match(ok.body, /^node_lifecycle_controller_leader [01]$/m);
  assert.ok(nlc.find("metrics request refused", { status: 403, rule: "authorization" }).length > 0);

  // Probes carry no credentials: the health address answers them, and has no /metrics.
  assert.deepEqual(await httpGet(health, "/healthz"), { status: 200, body: "ok\n" });
  await waitFor("ready", async () => (await httpGet(health, "/readyz")).status === 200);
  assert.equal((await httpGet(health, "/metrics")).status, 404);

  // A scrape every few seconds costs no further review within the cache period: 20 more scrapes, then the
  // reviews in the audit log are one per distinct token (3 TokenReviews) and per user (2 SubjectAccessReviews).
  for (let i = 0; i < 20; i++) assert.equal((await scrape(prometheus)).status, 200);
  const user = `system:serviceaccount:${SERVICE_ACCOUNT.namespace}:${SERVICE_ACCOUNT.name}`;
  const reviews = async () => {
    const counts = await auditedRequests(plane.auditLogPath as string, { user });
    return { tokenReviews: counts.get("create tokenreviews") ?? 0, accessReviews: counts.get("create subjectaccessreviews") ?? 0 };
  };
  await waitFor("the reviews in the audit log", async () => (await reviews()).accessReviews >= 2);
  assert.deepEqual(await reviews(), { tokenReviews: 3, accessReviews: 2 });

  assert.equal(await nlc.stop(), 0);
});
