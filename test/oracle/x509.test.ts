// The self-signed serving certificate (src/cli/selfsigned.ts) read by Go's crypto/x509, as Prometheus and every
// other Go client reads it, on generated names, addresses and dates: it parses, its fields are the ones asked
// for, its signature checks, and it verifies as its own root for each of its names.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { selfSignedCertificate } from "../../src/cli/selfsigned.ts";
import { canonicalIp } from "../../src/net/ip.ts";
import { type Oracle, startOracle } from "./oracle.ts";

const seed = Number(process.env.ORACLE_SEED ?? 20261124);
const numRuns = 300;

interface GoAnswer {
  error?: string;
  version?: number;
  algorithm?: string;
  subject?: string;
  issuer?: string;
  dnsNames: string[];
  ips: string[];
  notBefore?: string;
  notAfter?: string;
  isCA: boolean;
  serverAuth: boolean;
  signatureError: string;
  verifyError: string;
}

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

/** RFC 3339 in whole seconds, as Go prints a certificate's times. */
const seconds = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");

test("Go reads every generated certificate as written and verifies it as its own root", async () => {
  const seen = { utcTime: 0, generalizedTime: 0, ipv6: 0, noSans: 0 };
  await fc.assert(
    fc.asyncProperty(
      fc.stringMatching(/^[a-z][a-z0-9-]{0,30}$/),
      fc.uniqueArray(fc.domain(), { maxLength: 3 }),
      fc.uniqueArray(fc.oneof(fc.ipV4(), fc.ipV6()), { maxLength: 3 }),
      fc.date({ min: new Date("2000-01-01T00:00:00Z"), max: new Date("2150-01-01T00:00:00Z"), noInvalidDate: true }),
      fc.integer({ min: 60, max: 100 * 365 * 86_400 }),
      fc.nat(),
      async (commonName, dnsNames, ips, now, validForS, pick) => {
        const { certPem } = selfSignedCertificate({ commonName, dnsNames, ips, validForMs: validForS * 1000, now });
        const names = [...dnsNames, ...ips];
        const host = names.length > 0 ? (names[pick % names.length] as string) : "";
        const go = await oracle.ask<GoAnswer>("x509", { pem: certPem, host, atUnix: Math.floor(now.getTime() / 1000) });
        const notAfter = now.getTime() + validForS * 1000;
        if (notAfter >= Date.UTC(2050, 0, 1)) seen.generalizedTime++;
        else seen.utcTime++;
        if (ips.some((ip) => ip.includes(":"))) seen.ipv6++;
        if (names.length === 0) seen.noSans++;
        assert.deepEqual(go, {
          version: 3,
          algorithm: "ECDSA-SHA256",
          subject: `CN=${commonName}`,
          issuer: `CN=${commonName}`,
          dnsNames,
          ips: ips.map((ip) => canonicalIp(ip)),
          notBefore: seconds(now.getTime() - 3_600_000),
          notAfter: seconds(notAfter),
          isCA: false,
          serverAuth: true,
          signatureError: "",
          verifyError: "",
        });
      },
    ),
    { seed, numRuns },
  );
  // The generators reached both time encodings, IPv6 SANs and certificates without SANs.
  for (const [what, count] of Object.entries(seen)) assert.ok(count > 0, `${what}: ${count}`);
});

test("Go refuses what is not a certificate, and a certificate verified for a name it does not hold", async () => {
  const { certPem } = selfSignedCertificate({ commonName: "x", dnsNames: ["a.example"], ips: [], validForMs: 86_400_000 });
  const now = Math.floor(Date.now() / 1000);
  assert.equal((await oracle.ask<GoAnswer>("x509", { pem: "junk", host: "", atUnix: now })).error, "no CERTIFICATE PEM block");
  const wrong = await oracle.ask<GoAnswer>("x509", { pem: certPem, host: "b.example", atUnix: now });
  assert.match(wrong.verifyError, /certificate is valid for a\.example, not b\.example/);
  const expired = await oracle.ask<GoAnswer>("x509", { pem: certPem, host: "a.example", atUnix: now + 2 * 86_400 });
  assert.match(expired.verifyError, /expired/);
});
