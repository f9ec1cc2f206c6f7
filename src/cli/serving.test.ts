import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import tls from "node:tls";
import { test } from "node:test";
import type { KubeClient } from "../kube/client.ts";
import { createLogger } from "./log.ts";
import { createProgramMetrics, Registry } from "./metrics.ts";
import { selfSignedCertificate } from "./selfsigned.ts";
import { startEndpoints } from "./serving.ts";

const LOOPBACK = { host: "127.0.0.1", port: 0 };
/** Never called: no request here carries a token, so no review is asked for. */
const NO_API = {} as KubeClient;

function parts(lines: string[] = []) {
  const { registry, metricsRefusals: refusals } = createProgramMetrics("local-ccm", new Registry());
  registry.counter({ name: "reconciles_total", help: "Reconciles." }).inc();
  const log = createLogger({ verbosity: 2, format: "json", write: (line) => lines.push(line) });
  return { program: "local-ccm", registry, refusals, ready: () => ({ ok: true }), client: NO_API, log };
}

function httpStatus(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
      .on("error", reject);
  });
}

/** The certificate a TLS server at host:port presents. */
function servedCertificate(address: string): Promise<X509Certificate> {
  const url = new URL(address);
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: url.hostname, port: Number(url.port), rejectUnauthorized: false }, () => {
      resolve(socket.getPeerX509Certificate() as X509Certificate);
      socket.end();
    });
    socket.on("error", reject);
  });
}

test("secure metrics with the given certificate files, apart from health; a scrape without a token is refused", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "serving-"));
  const { certPem, keyPem } = selfSignedCertificate({ commonName: "given", dnsNames: [], ips: [], validForMs: 3_600_000 });
  writeFileSync(path.join(dir, "tls.crt"), certPem);
  writeFileSync(path.join(dir, "tls.key"), keyPem);
  const lines: string[] = [];
  const given = parts(lines);
  const endpoints = await startEndpoints(
    {
      healthBindAddress: LOOPBACK,
      metrics: {
        address: LOOPBACK,
        secure: true,
        withHealth: false,
        tokenAudiences: [],
        certFile: path.join(dir, "tls.crt"),
        keyFile: path.join(dir, "tls.key"),
      },
    },
    given,
  );
  try {
    assert.match(endpoints.metrics, /^https:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const served = await servedCertificate(endpoints.metrics);
    assert.equal(served.fingerprint256, new X509Certificate(certPem).fingerprint256);
    assert.equal(await httpStatus(`http://${endpoints.health}/healthz`), 200);
    assert.equal(await httpStatus(`http://${endpoints.health}/metrics`), 404);
    const refused = await new Promise<number>((resolve, reject) => {
      const port = Number(new URL(endpoints.metrics).port);
      const socket = tls.connect({ host: "127.0.0.1", port, rejectUnauthorized: false });
      socket.on("secureConnect", () => socket.write("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
      let text = "";
      socket.on("data", (chunk: Buffer) => (text += chunk.toString()));
      socket.on("end", () => resolve(Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1])));
      socket.on("error", reject);
    });
    assert.equal(refused, 401);
    assert.ok(lines.some((line) => /"msg":"metrics request refused".*"rule":"bearer-token"/.test(line)), lines.join("\n"));
    assert.match(given.registry.expose(), /^local_ccm_metrics_requests_refused_total\{code="401",rule="bearer-token"\} 1$/m);
  } finally {
    await endpoints.close();
    rmSync(dir, { recursive: true });
  }
});

test("without certificate files, a self-signed one for the program and the bound address", async () => {
  const endpoints = await startEndpoints(
    { healthBindAddress: undefined, metrics: { address: LOOPBACK, secure: true, withHealth: false, tokenAudiences: [] } },
    parts(),
  );
  try {
    assert.equal(endpoints.health, "off");
    const served = await servedCertificate(endpoints.metrics);
    assert.equal(served.subject, "CN=local-ccm");
    assert.ok(served.checkIP("127.0.0.1"));
    assert.ok(served.checkHost("localhost"));
  } finally {
    await endpoints.close();
  }
});

test("not secure at the health address: one plain server, as before the metrics flags", async () => {
  const endpoints = await startEndpoints(
    { healthBindAddress: LOOPBACK, metrics: { address: LOOPBACK, secure: false, withHealth: true, tokenAudiences: [] } },
    parts(),
  );
  try {
    assert.equal(endpoints.metrics, `http://${endpoints.health}/metrics`);
    assert.equal(await httpStatus(endpoints.metrics), 200);
  } finally {
    await endpoints.close();
  }
});

test("a certificate file that cannot be read fails the start with its path, and health stops listening", async () => {
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  await assert.rejects(
    startEndpoints(
      {
        healthBindAddress: { host: "127.0.0.1", port },
        metrics: { address: LOOPBACK, secure: true, withHealth: false, tokenAudiences: [], certFile: "/nonexistent/tls.crt", keyFile: "/k" },
      },
      parts(),
    ),
    /ENOENT.*\/nonexistent\/tls\.crt/,
  );
  // The health server it had started is closed: its port is free again.
  const again = http.createServer();
  await new Promise<void>((resolve, reject) => {
    again.once("error", reject);
    again.listen(port, "127.0.0.1", resolve);
  });
  await new Promise((resolve) => again.close(resolve));
});
