import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  extensionRequest,
  KUBELET_SUBJECT,
  name,
  opensslCsr,
  oid,
  pem,
  requestDer,
  sanExtension,
  sequence,
  set,
  text,
  tlv,
  UTF8,
} from "./csr.fixture.ts";
import { type CsrRequest, parseCsrDer, parseCsrPem } from "./request.ts";

const KUBELET = { commonNames: ["system:node:n1"], organizations: ["system:nodes"], otherSubjectAttributes: [] };
const NO_SANS = { dnsNames: [], ipAddresses: [], emailAddresses: [], uris: [], otherSans: [] };
const parsed = (fields: Partial<Exclude<CsrRequest, { ok: false }>>): CsrRequest => ({
  ok: true,
  ...KUBELET,
  ...NO_SANS,
  ...fields,
});

test("requests made by openssl read as their subject and SANs, IPs canonical", () => {
  const cases: [string, string | undefined, string | undefined, CsrRequest][] = [
    [
      "a kubelet's request",
      undefined,
      "DNS:n1,IP:198.18.0.12,IP:fd00:198:18::c",
      parsed({ dnsNames: ["n1"], ipAddresses: ["198.18.0.12", "fd00:198:18::c"] }),
    ],
    [
      "IPv6 written long and upper case, IPv4-mapped IPv6",
      undefined,
      "IP:FD00:0198:0018:0:0:0:0:000C,IP:::ffff:198.18.0.12",
      parsed({ ipAddresses: ["fd00:198:18::c", "198.18.0.12"] }),
    ],
    ["upper-case DNS kept as written", undefined, "DNS:N1.Example", parsed({ dnsNames: ["N1.Example"] })],
    ["no subjectAltName extension", undefined, undefined, parsed({})],
    [
      "email, URI and SAN kinds no kubelet asks for",
      undefined,
      "email:a@example.com,URI:spiffe://x/y,otherName:1.2.3.4;UTF8:x,RID:1.2.3",
      parsed({
        emailAddresses: ["a@example.com"],
        uris: ["spiffe://x/y"],
        otherSans: ["otherName", "registeredID"],
      }),
    ],
    [
      "other subject attributes, two CNs, two Os, one multi-valued RDN",
      "/C=DE/O=system:nodes+OU=ops/O=system:masters/CN=system:node:n1/CN=system:node:n2",
      "DNS:n1",
      parsed({
        commonNames: ["system:node:n1", "system:node:n2"],
        organizations: ["system:nodes", "system:masters"],
        otherSubjectAttributes: ["C", "OU"],
        dnsNames: ["n1"],
      }),
    ],
    ["empty subject", "/", "DNS:n1", parsed({ commonNames: [], organizations: [], dnsNames: ["n1"] })],
  ];
  for (const [title, subject, sans, expected] of cases)
    assert.deepEqual(parseCsrPem(opensslCsr({ ...(subject ? { subject } : {}), sans })), expected, title);
});

test("odd but well-formed requests: PrintableString subject, empty SAN list, SANs in a second extension", () => {
  const dns = (value: string) => tlv(0x82, Buffer.from(value));
  const basicConstraints = sequence(oid("2.5.29.19"), tlv(0x01, Buffer.from([0xff])), tlv(0x04, sequence()));
  const cases: [string, Buffer, CsrRequest][] = [
    [
      "PrintableString subject",
      requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension(dns("n1")))),
      parsed({ dnsNames: ["n1"] }),
    ],
    ["empty SAN list", requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension())), parsed({})],
    [
      "critical extension before the SANs, and a challengePassword attribute",
      requestDer(
        KUBELET_SUBJECT,
        sequence(oid("1.2.840.113549.1.9.7"), set(text(UTF8, "secret"))),
        extensionRequest(basicConstraints, sanExtension(dns("n1"))),
      ),
      parsed({ dnsNames: ["n1"] }),
    ],
    [
      "UTF-8 CN",
      requestDer(name(["2.5.4.3", UTF8, "système"]), extensionRequest(sanExtension(dns("n1")))),
      parsed({ commonNames: ["système"], organizations: [], dnsNames: ["n1"] }),
    ],
  ];
  for (const [title, der, expected] of cases) {
    assert.deepEqual(parseCsrDer(der), expected, title);
    assert.deepEqual(parseCsrPem(pem(der)), expected, `${title} (PEM)`);
  }
});

test("malformed requests are refused with a reason, never thrown", () => {
  const good = opensslCsr({ sans: "DNS:n1" });
  const der = Buffer.from(good.replace(/-----[^\n]*-----|\s/g, ""), "base64");
  const dns = tlv(0x82, Buffer.from("n1"));
  const cases: [string, string, RegExp][] = [
    ["garbage", "hello", /^no PEM block$/],
    ["empty", "", /^no PEM block$/],
    ["a certificate", good.replaceAll("CERTIFICATE REQUEST", "CERTIFICATE"), /type is "CERTIFICATE"/],
    ["openssl's old label", good.replaceAll("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"), /type is "NEW/],
    ["two blocks", good + good, /2 PEM blocks/],
    ["PEM headers", good.replace("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n"), /not base64/],
    ["BEGIN and END differ", good.replace("END CERTIFICATE REQUEST", "END CERTIFICATE"), /^no PEM block$/],
    ["truncated", pem(der.subarray(0, der.length - 10)), /truncated/],
    ["trailing bytes", pem(Buffer.concat([der, Buffer.from([0x05, 0])])), /expected one element, got 2/],
    ["not DER at all", pem(Buffer.from("hello world")), /CertificationRequest/],
    ["indefinite length", pem(Buffer.from([0x30, 0x80, 0, 0])), /indefinite length/],
    ["non-minimal length", pem(Buffer.from([0x30, 0x81, 0x01, 0x05])), /non-minimal length/],
    ["version 2", pem(replaceOnce(der, [0x02, 0x01, 0x00], [0x02, 0x01, 0x01])), /version/],
    [
      "IP SAN of 5 bytes",
      pem(requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension(tlv(0x87, Buffer.alloc(5)))))),
      /IP SAN: 5 bytes/,
    ],
    [
      "two subjectAltName extensions (Go would keep the last)",
      pem(requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension(dns)), extensionRequest(sanExtension(dns)))),
      /subjectAltName: requested twice/,
    ],
    [
      "extensionRequest with two values",
      pem(requestDer(KUBELET_SUBJECT, sequence(oid("1.2.840.113549.1.9.14"), set(sequence(), sequence())))),
      /extensionRequest: expected one value/,
    ],
    [
      "BMPString CN",
      pem(requestDer(name(["2.5.4.3", 0x1e, "\0n\x001"]), extensionRequest(sanExtension(dns)))),
      /subject CN: unsupported string type 0x1e/,
    ],
    [
      "invalid UTF-8 CN",
      pem(requestDer(name(["2.5.4.3", UTF8, Buffer.from([0xff])]), extensionRequest(sanExtension(dns)))),
      /subject CN: invalid UTF-8/,
    ],
    [
      "non-ASCII DNS SAN",
      pem(requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension(tlv(0x82, Buffer.from("nö")))))),
      /DNS SAN: not ASCII/,
    ],
    ["subject not a SEQUENCE", pem(requestDer(set(), extensionRequest())), /subject: unexpected tag 0x31/],
  ];
  for (const [title, input, error] of cases) {
    const result = parseCsrPem(input);
    assert.equal(result.ok, false, title);
    if (!result.ok) assert.match(result.error, error, title);
  }
});

function replaceOnce(bytes: Buffer, from: number[], to: number[]): Buffer {
  const at = bytes.indexOf(Buffer.from(from));
  assert.ok(at >= 0);
  return Buffer.concat([bytes.subarray(0, at), Buffer.from(to), bytes.subarray(at + from.length)]);
}

test("property: no input makes the parser throw, and a damaged request never grows SANs", () => {
  const der = Buffer.from(
    opensslCsr({ sans: "DNS:n1,IP:198.18.0.12" }).replace(/-----[^\n]*-----|\s/g, ""),
    "base64",
  );
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
      assert.equal(typeof parseCsrDer(bytes).ok, "boolean");
    }),
    { numRuns: 2000 },
  );
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.nat(der.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
      (changes) => {
        const damaged = Buffer.from(der);
        for (const [at, value] of changes) damaged[at] = value;
        const result = parseCsrDer(damaged);
        if (result.ok) assert.ok(result.dnsNames.length + result.ipAddresses.length <= 2);
      },
    ),
    { numRuns: 2000 },
  );
});
