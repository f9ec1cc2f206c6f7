import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { X509Certificate, createPrivateKey, createPublicKey } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { selfSignedCertificate } from "./selfsigned.ts";

const DAY = 86_400_000;

test("openssl reads the certificate: v3, ECDSA SHA-256, the names, the extensions, the validity", () => {
  const now = new Date("2026-11-24T06:00:00Z");
  const { certPem } = selfSignedCertificate({
    commonName: "local-ccm",
    dnsNames: ["localhost", "node-1"],
    ips: ["127.0.0.1", "::1", "fd00:198:18::10"],
    validForMs: 365 * DAY,
    now,
  });
  const text = execFileSync("openssl", ["x509", "-noout", "-text"], { input: certPem, encoding: "utf8" });
  assert.match(text, /Version: 3 \(0x2\)/);
  assert.match(text, /Signature Algorithm: ecdsa-with-SHA256/);
  assert.match(text, /Issuer: CN ?= ?local-ccm/);
  assert.match(text, /Subject: CN ?= ?local-ccm/);
  assert.match(text, /Not Before: Nov 24 05:00:00 2026 GMT/);
  assert.match(text, /Not After : Nov 24 06:00:00 2027 GMT/);
  assert.match(text, /NIST CURVE: P-256|ASN1 OID: prime256v1/);
  assert.match(text, /X509v3 Key Usage: critical\s+Digital Signature/);
  assert.match(text, /X509v3 Extended Key Usage:\s+TLS Web Server Authentication/);
  assert.match(text, /X509v3 Basic Constraints: critical\s+CA:FALSE/);
  assert.match(
    text,
    /DNS:localhost, DNS:node-1, IP Address:127\.0\.0\.1, IP Address:0:0:0:0:0:0:0:1, IP Address:FD00:198:18:0:0:0:0:10/,
  );
  // openssl checks the self-signature (exit 0 and "OK"): the signed bytes are exactly the TBSCertificate.
  const dir = mkdtempSync(path.join(os.tmpdir(), "selfsigned-"));
  try {
    const file = path.join(dir, "cert.pem");
    writeFileSync(file, certPem);
    const at = String(now.getTime() / 1000);
    const verified = execFileSync("openssl", ["verify", "-attime", at, "-check_ss_sig", "-CAfile", file, file], {
      encoding: "utf8",
    });
    assert.equal(verified, `${file}: OK\n`);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("Node reads it too: the key is the certificate's, the signature checks, a year from 2050 is GeneralizedTime", () => {
  const { certPem, keyPem } = selfSignedCertificate({
    commonName: "x",
    dnsNames: [],
    ips: [],
    validForMs: 30 * DAY,
    now: new Date("2049-12-20T00:00:00Z"),
  });
  const cert = new X509Certificate(certPem);
  assert.ok(cert.checkPrivateKey(createPrivateKey(keyPem)));
  assert.ok(cert.verify(createPublicKey(certPem)));
  assert.equal(cert.subjectAltName, undefined);
  assert.equal(new Date(cert.validTo).toISOString(), "2050-01-19T00:00:00.000Z");
  // Fresh keys and serials each time.
  const again = new X509Certificate(selfSignedCertificate({ commonName: "x", dnsNames: [], ips: [], validForMs: DAY }).certPem);
  assert.notEqual(again.serialNumber, cert.serialNumber);
  assert.notEqual(again.publicKey.export({ format: "jwk" }).x, cert.publicKey.export({ format: "jwk" }).x);
});

test("a TLS client that trusts the certificate completes a handshake with a server using it", async () => {
  const { certPem, keyPem } = selfSignedCertificate({
    commonName: "local-ccm",
    dnsNames: ["localhost"],
    ips: ["127.0.0.1"],
    validForMs: DAY,
  });
  const server = https.createServer({ cert: certPem, key: keyPem }, (_, res) => res.end("ok"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const { port } = server.address() as { port: number };
    const body = await new Promise<string>((resolve, reject) => {
      https
        .get({ host: "127.0.0.1", port, ca: certPem, agent: false }, (res) => {
          let text = "";
          res.on("data", (chunk: Buffer) => (text += chunk.toString()));
          res.on("end", () => resolve(text));
        })
        .on("error", reject);
    });
    assert.equal(body, "ok");
  } finally {
    server.close();
  }
});
