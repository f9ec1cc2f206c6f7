import assert from "node:assert/strict";
import { test } from "node:test";
import { generateKeyPairSync } from "node:crypto";
import fc from "fast-check";
import {
  extensionRequest,
  KUBELET_SUBJECT,
  name,
  opensslCsr,
  oid,
  pem,
  PRINTABLE,
  requestDer,
  requestDerWithKey,
  sanExtension,
  sequence,
  set,
  text,
  tlv,
  UTF8,
} from "./csr.fixture.ts";
import { type CsrRequest, MAX_REQUEST_BYTES, parseCsrDer, parseCsrPem } from "./request.ts";

const KUBELET = { commonNames: ["system:node:n1"], organizations: ["system:nodes"], otherSubjectAttributes: [] };
const NO_SANS = { dnsNames: [], ipAddresses: [], emailAddresses: [], otherSans: [] };
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
      "email and SAN kinds no kubelet asks for",
      undefined,
      "email:a@example.com,otherName:1.2.3.4;UTF8:x,RID:1.2.3",
      parsed({ emailAddresses: ["a@example.com"], otherSans: ["otherName", "registeredID"] }),
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
    ["garbage", "hello", /^not one canonical PEM block: no BEGIN line$/],
    ["empty", "", /^not one canonical PEM block: no BEGIN line$/],
    ["a certificate", good.replaceAll("CERTIFICATE REQUEST", "CERTIFICATE"), /block type other than CERTIFICATE R/],
    ["openssl's old label", good.replaceAll("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"), /block type/],
    ["two blocks", good + good, /: another block after the END line$/],
    ["PEM headers", good.replace("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n"), /: a header line$/],
    ["BEGIN and END differ", good.replace("END CERTIFICATE REQUEST", "END CERTIFICATE"), /where the END line/],
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
    [
      "URI SAN",
      pem(requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension(tlv(0x86, Buffer.from("spiffe://x")))))),
      /^unreadable: URI SAN "spiffe:\/\/x": not read/,
    ],
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

test("only one PEM block exactly as Go's pem.Encode writes it is read, within the size bound", () => {
  const good = opensslCsr({ sans: "DNS:n1" });
  const lines = good.split("\n");
  const cases: [string, string, RegExp][] = [
    ["whitespace after the BEGIN line's dashes", good.replace("REQUEST-----\n", "REQUEST----- \n"), /after the BEGIN/],
    ["a tab there", good.replace("REQUEST-----\n", "REQUEST-----\t\n"), /after the BEGIN line's dashes/],
    ["text before", `hello\n${good}`, /^not one canonical PEM block: text before the BEGIN line$/],
    ["text after", `${good}hello\n`, /^not one canonical PEM block: text after the END line$/],
    ["a blank line after", `${good}\n`, /text after the END line/],
    ["CR LF line ends", good.replaceAll("\n", "\r\n"), /after the BEGIN line's dashes/],
    ["CR LF in the body", inBody(good, "\r\n"), /a line ending in CR LF/],
    ["lines of 76", pem64to76(good), /base64 lines not 64 characters wide/],
    ["one long line", [lines[0], lines.slice(1, -2).join(""), ...lines.slice(-2)].join("\n"), /not 64/],
    ["an empty line in the body", inBody(good, "\n\n"), /not 64 characters wide/],
    ["a second BEGIN inside", inBody(good, "\n-----BEGIN X-----\n"), /where the END line/],
    ["no END line", good.slice(0, good.indexOf("-----END")), /^not one canonical PEM block: no END line$/],
    ["spaces in the body", inBody(good, "\n "), /a line that is not base64/],
    ["stray bits in the last character", strayBits(paddedPem()), /base64 not in canonical form/],
    ["no body", "-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n", /no base64 body/],
    ["over the bound", good + "\n".repeat(MAX_REQUEST_BYTES), /^request of \d+ bytes is over the bound of 16384$/],
  ];
  for (const [title, input, error] of cases) {
    const result = parseCsrPem(input);
    assert.equal(result.ok, false, title);
    if (!result.ok) assert.match(result.error, error, title);
  }
  assert.equal(parseCsrPem(good.slice(0, -1)).ok, true, "no final newline");
});

/** The PEM text with the newline after its first base64 line replaced. */
function inBody(text: string, newline: string): string {
  return text.replace(/(\n[A-Za-z0-9+/]{64})\n/, (_, line: string) => line + newline);
}

function requestWithKey(type: "ec" | "ed25519" | "rsa", namedCurve = "P-256"): Buffer {
  const options = type === "ec" ? { namedCurve } : type === "rsa" ? { modulusLength: 1024 } : {};
  // The overloads of generateKeyPairSync want a literal type; the key's DER is all that matters here.
  const { publicKey } = generateKeyPairSync(type as "ec", options as { namedCurve: string });
  return requestDerWithKey(publicKey.export({ format: "der", type: "spki" }), KUBELET_SUBJECT, extensionRequest());
}

function pem64to76(text: string): string {
  const [begin, ...rest] = text.trimEnd().split("\n");
  const end = rest.pop();
  return [begin, ...(rest.join("").match(/.{1,76}/g) ?? []), end, ""].join("\n");
}

/** A request whose base64 ends in padding (its DER's length is no multiple of 3). */
function paddedPem(): string {
  const ders = [1, 2, 3].map((n) =>
    requestDer(KUBELET_SUBJECT, extensionRequest(sanExtension(tlv(0x82, Buffer.from("n".repeat(n)))))),
  );
  return pem(ders.find((der) => der.length % 3 !== 0) ?? assert.fail("no DER of such a length"));
}

/** The request with its last base64 character changed to one that decodes the same (non-zero padding bits). */
function strayBits(text: string): string {
  const at = text.indexOf("=");
  assert.ok(at > 0, "a request whose base64 ends in padding");
  const index = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".indexOf(text[at - 1] ?? "");
  const padding = text[at + 1] === "=" ? 4 : 2;
  const changed = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[index ^ (padding - 1)];
  return text.slice(0, at - 1) + changed + text.slice(at);
}

test("fields read as Go reads them, or refused: BOMs kept, Go's PrintableString set, DER booleans and bits", () => {
  const dns = sanExtension(tlv(0x82, Buffer.from("n1")));
  const withSubject = (...attributes: [string, number, string | Uint8Array][]) =>
    parseCsrDer(requestDer(name(...attributes), extensionRequest(dns)));
  const bom = withSubject(["2.5.4.10", UTF8, "\uFEFFsystem:nodes"], ["2.5.4.3", UTF8, "\uFEFFsystem:node:n1"]);
  const expected = { commonNames: ["\uFEFFsystem:node:n1"], organizations: ["\uFEFFsystem:nodes"], dnsNames: ["n1"] };
  assert.deepEqual(bom, parsed(expected));
  const printable = withSubject(["2.5.4.3", PRINTABLE, "a*b&c"]);
  assert.deepEqual(printable, parsed({ commonNames: ["a*b&c"], organizations: [], dnsNames: ["n1"] }));
  const critical = (flag: number) => sequence(oid("2.5.29.19"), tlv(0x01, Buffer.from([flag])), tlv(0x04, sequence()));
  const refused: [string, CsrRequest, RegExp][] = [
    ["PrintableString with '_'", withSubject(["2.5.4.3", PRINTABLE, "system_node"]), /subject CN: PrintableString/],
    ["T61String O", withSubject(["2.5.4.10", 0x14, "system:nodes"]), /subject O: unsupported string type 0x14/],
    ["INTEGER OU", withSubject(["2.5.4.11", 0x02, Buffer.from([1])]), /subject OU: unsupported string type 0x2/],
    [
      "critical flag 01",
      parseCsrDer(requestDer(KUBELET_SUBJECT, extensionRequest(critical(1)))),
      /extension critical flag: not DER/,
    ],
    [
      "an extension requested twice, across two extensionRequest attributes",
      parseCsrDer(
        requestDer(KUBELET_SUBJECT, extensionRequest(dns, basicConstraints()), extensionRequest(basicConstraints())),
      ),
      /extension 2.5.29.19: requested twice/,
    ],
    [
      "an extension value that is not an OCTET STRING",
      parseCsrDer(requestDer(KUBELET_SUBJECT, extensionRequest(sequence(oid("2.5.29.19"), sequence())))),
      /extension value: unexpected tag 0x30/,
    ],
    ["OID arc over 2^31-1", withSubject(["2.5.4.2147483648", UTF8, "x"]), /OID arc too large/],
  ];
  for (const [title, result, error] of refused) {
    assert.equal(result.ok, false, title);
    if (!result.ok) assert.match(result.error, error, title);
  }
});

const basicConstraints = () => sequence(oid("2.5.29.19"), tlv(0x04, sequence()));

test("only ECDSA keys on P-256, P-384 or P-521, as points on the curve, and signatures with valid padding", () => {
  const der = Buffer.from(opensslCsr({ sans: "DNS:n1" }).replace(/-----[^\n]*-----|\s/g, ""), "base64");
  const point = der.indexOf(Buffer.from([0x03, 0x42, 0x00, 0x04]));
  assert.ok(point > 0);
  const offCurve = Buffer.from(der);
  offCurve[point + 40] = (offCurve[point + 40] ?? 0) ^ 1;
  const compressed = Buffer.from(der);
  compressed[point + 3] = 2;
  const cases: [string, Uint8Array, RegExp][] = [
    ["a point off the curve", offCurve, /subjectPKInfo: not a point on P-256/],
    ["a compressed point", compressed, /not an uncompressed P-256 point/],
    ["an Ed25519 key", requestWithKey("ed25519"), /key algorithm 1.3.101.112, not ECDSA/],
    ["an RSA key", requestWithKey("rsa"), /key algorithm 1.2.840.113549.1.1.1, not ECDSA/],
  ];
  for (const [title, input, error] of cases) {
    const result = parseCsrDer(input);
    assert.equal(result.ok, false, title);
    if (!result.ok) assert.match(result.error, error, title);
  }
  for (const curve of ["P-384", "P-521"])
    assert.equal(parseCsrDer(requestWithKey("ec", curve)).ok, true, curve);
  const badPadding = requestDer(KUBELET_SUBJECT, extensionRequest());
  badPadding[badPadding.length - 4] = 1; // the dummy signature 00 01 02 03 becomes 01 01 02 03: a set padding bit
  const result = parseCsrDer(badPadding);
  assert.equal(result.ok, false);
  if (!result.ok) assert.match(result.error, /signature: invalid BIT STRING padding/);
});
