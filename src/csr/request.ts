// A PKCS#10 certificate request (RFC 2986) read into the plain facts the approver decides on: the subject's
// CN and O, and the subjectAltName of the extensionRequest attribute. Node has X509Certificate but no CSR
// parser; this reads exactly these fields with der.ts (docs/architecture.md, "Dependencies": why no library).
//
// What the approver judges must be what the signer issues. kube-apiserver and kube-controller-manager's signer
// read spec.request with Go: pem.Decode (the FIRST block it finds, even with text around it or whitespace after
// a BEGIN line's dashes) and x509.ParseCertificateRequest. So this reads only canonical input, the one PEM block
// Go's pem.Encode writes and kubelets send, within MAX_REQUEST_BYTES; anything else is refused, never
// interpreted. In the DER it refuses wherever Go could read something else: several CNs (Go keeps the last one),
// string types other than UTF8String, PrintableString and IA5String, URI SANs (Go rewrites them as it parses
// them), a repeated extension (Go refuses it), trailing data, and public keys other than ECDSA on P-256, P-384 or
// P-521 (the only keys it checks as Go does; kubelets use P-256). The signature is not verified: the signer does.
// test/oracle/csr.test.ts compares this reader with Go's on generated requests.
import { createPublicKey } from "node:crypto";
import { canonicalIp } from "../net/ip.ts";
import {
  children,
  DerError,
  expectTag,
  readAll,
  readAscii,
  readBitString,
  readBoolean,
  readOid,
  readSingle,
  readString,
  TAG,
  type Tlv,
} from "./der.ts";

export interface ParsedRequest {
  ok: true;
  commonNames: string[];
  organizations: string[];
  /** Subject attributes other than CN and O, by short name (OU, C, …) or OID. */
  otherSubjectAttributes: string[];
  /** As requested (case kept). */
  dnsNames: string[];
  /** Canonical text (canonicalIp): IPv4-mapped IPv6 as IPv4, as the issued certificate will carry it. */
  ipAddresses: string[];
  emailAddresses: string[];
  /** SAN kinds no kubelet asks for: otherName, directoryName, registeredID, … (URIs are refused outright). */
  otherSans: string[];
}

export type CsrRequest = ParsedRequest | { ok: false; error: string };

const OID = {
  commonName: "2.5.4.3",
  organization: "2.5.4.10",
  extensionRequest: "1.2.840.113549.1.9.14",
  subjectAltName: "2.5.29.17",
  ecPublicKey: "1.2.840.10045.2.1",
};

/** The named curves whose keys are read (as Go does: an uncompressed point on the curve), by point length. */
const CURVES: Record<string, { name: string; pointBytes: number }> = {
  "1.2.840.10045.3.1.7": { name: "P-256", pointBytes: 65 },
  "1.3.132.0.34": { name: "P-384", pointBytes: 97 },
  "1.3.132.0.35": { name: "P-521", pointBytes: 133 },
};

const ATTRIBUTE_NAMES: Record<string, string> = {
  "2.5.4.5": "serialNumber",
  "2.5.4.6": "C",
  "2.5.4.7": "L",
  "2.5.4.8": "ST",
  "2.5.4.11": "OU",
  "1.2.840.113549.1.9.1": "emailAddress",
};

const GENERAL_NAME = { email: 0x81, dns: 0x82, uri: 0x86, ip: 0x87 };
const OTHER_GENERAL_NAMES: Record<number, string> = {
  0xa0: "otherName",
  0xa3: "x400Address",
  0xa4: "directoryName",
  0xa5: "ediPartyName",
  0x88: "registeredID",
};

/**
 * The largest spec.request read. A kubelet's (P-256 key, a few SANs) is about 600 bytes; 16 KiB leaves room for
 * hundreds of SANs while bounding what one node can make the approver read.
 */
export const MAX_REQUEST_BYTES = 16 * 1024;

const BEGIN = "-----BEGIN CERTIFICATE REQUEST-----";
const END = "-----END CERTIFICATE REQUEST-----";
const PEM_LINE = 64;
// One character class, no alternation or nesting: linear on any input.
const BASE64_LINE = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * The request of a CertificateSigningRequest (spec.request, base64-decoded, as latin1 text so every byte is one
 * character): exactly one PEM block as pem.Encode writes it (BEGIN line, base64 in lines of 64 characters and a
 * shorter or full last one, END line, an optional final newline). One pass over the text, no backtracking.
 */
export function parseCsrPem(text: string): CsrRequest {
  if (text.length > MAX_REQUEST_BYTES)
    return { ok: false, error: `request of ${text.length} bytes is over the bound of ${MAX_REQUEST_BYTES}` };
  const der = readCanonicalPem(text);
  if (typeof der === "string") return { ok: false, error: `not one canonical PEM block: ${der}` };
  return parseCsrDer(der);
}

/** spec.request as the API serves it, base64 of the PEM bytes: its size is bounded before it is decoded. */
export function parseCsrRequest(base64: string): CsrRequest {
  const bytes = Buffer.byteLength(base64, "base64");
  if (bytes > MAX_REQUEST_BYTES)
    return { ok: false, error: `request of ${bytes} bytes is over the bound of ${MAX_REQUEST_BYTES}` };
  // latin1 keeps every byte as one character, so stray bytes are seen as such by the PEM reader.
  return parseCsrPem(Buffer.from(base64, "base64").toString("latin1"));
}

/** The DER of the one canonical block, or what was found instead. */
function readCanonicalPem(text: string): Buffer | string {
  const firstLine = lineAt(text, 0);
  if (firstLine.text !== BEGIN) return beginProblem(text, firstLine.text);
  const lines: string[] = [];
  for (let at = firstLine.next; ; ) {
    if (at < 0) return "no END line";
    const line = lineAt(text, at);
    if (line.text.startsWith("-----")) {
      if (line.text !== END) return `${quote(line.text)} where the END line ${quote(END)} belongs`;
      if (line.next >= 0 && line.next < text.length)
        return text.includes("-----BEGIN", line.next) ? "another block after the END line" : "text after the END line";
      break;
    }
    if (line.text.endsWith("\r")) return "a line ending in CR LF";
    if (!BASE64_LINE.test(line.text)) return line.text.includes(":") ? "a header line" : "a line that is not base64";
    lines.push(line.text);
    at = line.next;
  }
  if (!lines.length) return "no base64 body";
  const last = lines.length - 1;
  if (lines.some((line, i) => (i < last ? line.length !== PEM_LINE : !line.length || line.length > PEM_LINE)))
    return `base64 lines not ${PEM_LINE} characters wide`;
  const base64 = lines.join("");
  const der = Buffer.from(base64, "base64");
  // Padding in the middle, or stray bits in the last character, would decode but not encode back.
  if (der.toString("base64") !== base64) return "base64 not in canonical form";
  return der;
}

function beginProblem(text: string, line: string): string {
  if (line.startsWith(BEGIN)) return `characters after the BEGIN line's dashes: ${quote(line)}`;
  if (line.startsWith("-----BEGIN ")) return `block type other than CERTIFICATE REQUEST: ${quote(line)}`;
  return text.includes("-----BEGIN") ? "text before the BEGIN line" : "no BEGIN line";
}

/** The line starting at `at`, without its newline, and where the next one starts (-1: none). */
function lineAt(text: string, at: number): { text: string; next: number } {
  const end = text.indexOf("\n", at);
  return end < 0 ? { text: text.slice(at), next: -1 } : { text: text.slice(at, end), next: end + 1 };
}

/** A line as JSON text, cut short: a reason stays one short line whatever the request holds. */
const quote = (line: string) => JSON.stringify(line.length > 60 ? `${line.slice(0, 60)}…` : line);

export function parseCsrDer(der: Uint8Array): CsrRequest {
  try {
    return readRequest(der);
  } catch (error) {
    // Anything else would be a bug here; still a refusal, never an exception out of the decision.
    return { ok: false, error: `unreadable: ${error instanceof DerError ? error.message : String(error)}` };
  }
}

function readRequest(der: Uint8Array): ParsedRequest {
  const [info, algorithm, signature, ...extra] = children(
    readSingle(der, TAG.sequence, "CertificationRequest"),
    TAG.sequence,
    "CertificationRequest",
  );
  if (!info || !algorithm || !signature || extra.length)
    throw new DerError("CertificationRequest: expected 3 elements");
  readAlgorithm(algorithm, "signatureAlgorithm");
  readBitString(signature, "signature");
  const [version, subject, publicKey, attributes, ...rest] = children(
    info,
    TAG.sequence,
    "CertificationRequestInfo",
  );
  if (!version || !subject || !publicKey || !attributes || rest.length)
    throw new DerError("CertificationRequestInfo: expected 4 elements");
  const versionBytes = expectTag(version, TAG.integer, "version").content;
  if (versionBytes.length !== 1 || versionBytes[0] !== 0) throw new DerError("version: not v1 (0)");
  readPublicKey(publicKey);
  return { ok: true, ...readSubject(subject), ...readSans(expectTag(attributes, 0xa0, "attributes")) };
}

/** An AlgorithmIdentifier: its OID, and at most one parameter of any type. */
function readAlgorithm(tlv: Tlv, what: string): { oid: string; parameters?: Tlv } {
  const [oid, parameters, ...rest] = children(tlv, TAG.sequence, what);
  if (!oid || rest.length) throw new DerError(`${what}: expected an OID and at most one parameter`);
  return { oid: readOid(oid, what), ...(parameters ? { parameters } : {}) };
}

/**
 * The subjectPublicKeyInfo, read only when Go reads the same key: ECDSA on a named curve, an uncompressed point
 * on it (Go's ecdsa.ParseUncompressedPublicKey; OpenSSL checks the same when Node builds the key).
 */
function readPublicKey(tlv: Tlv): void {
  const [algorithm, key, ...rest] = children(tlv, TAG.sequence, "subjectPKInfo");
  if (!algorithm || !key || rest.length) throw new DerError("subjectPKInfo: expected 2 elements");
  const { oid, parameters } = readAlgorithm(algorithm, "subjectPKInfo algorithm");
  if (oid !== OID.ecPublicKey) throw new DerError(`subjectPKInfo: key algorithm ${oid}, not ECDSA`);
  const curveOid = parameters && readOid(parameters, "subjectPKInfo curve");
  const curve = curveOid === undefined ? undefined : CURVES[curveOid];
  if (!curve) throw new DerError(`subjectPKInfo: curve ${curveOid ?? "missing"}, not P-256, P-384 or P-521`);
  const { unusedBits, bytes } = readBitString(key, "subjectPKInfo key");
  if (unusedBits || bytes.length !== curve.pointBytes || bytes[0] !== 4)
    throw new DerError(`subjectPKInfo: not an uncompressed ${curve.name} point`);
  try {
    createPublicKey({ key: Buffer.from(tlv.whole), format: "der", type: "spki" });
  } catch {
    throw new DerError(`subjectPKInfo: not a point on ${curve.name}`);
  }
}

function readSubject(subject: Tlv) {
  const names = { commonNames: [] as string[], organizations: [] as string[], otherSubjectAttributes: [] as string[] };
  for (const rdn of children(subject, TAG.sequence, "subject"))
    for (const attribute of children(rdn, TAG.set, "subject")) {
      const [type, value, ...rest] = children(attribute, TAG.sequence, "subject attribute");
      if (!type || !value || rest.length) throw new DerError("subject attribute: expected type and value");
      const oid = readOid(type, "subject attribute");
      const name = oid === OID.commonName ? "CN" : oid === OID.organization ? "O" : (ATTRIBUTE_NAMES[oid] ?? oid);
      // Every value is read, not only CN's and O's: Go refuses the whole request over one it cannot read.
      const text = readString(value, `subject ${name}`);
      if (oid === OID.commonName) names.commonNames.push(text);
      else if (oid === OID.organization) names.organizations.push(text);
      else names.otherSubjectAttributes.push(name);
    }
  return names;
}

type Sans = Pick<ParsedRequest, "dnsNames" | "ipAddresses" | "emailAddresses" | "otherSans">;

/** The subjectAltName of the extensionRequest attribute(s); no SAN at all is not an error here. */
function readSans(attributes: Tlv): Sans {
  const sans: Sans = { dnsNames: [], ipAddresses: [], emailAddresses: [], otherSans: [] };
  // Go refuses a request that asks for one extension twice, in one extensionRequest or across several.
  const seen = new Set<string>();
  for (const attribute of readAll(attributes.content, "attributes")) {
    const [type, values, ...rest] = children(attribute, TAG.sequence, "attribute");
    if (!type || !values || rest.length) throw new DerError("attribute: expected type and values");
    if (readOid(type, "attribute") !== OID.extensionRequest) continue;
    const [extensions, ...more] = children(values, TAG.set, "extensionRequest");
    if (!extensions || more.length) throw new DerError("extensionRequest: expected one value");
    for (const extension of children(extensions, TAG.sequence, "extensionRequest")) {
      const { oid, value } = readExtension(extension);
      const name = oid === OID.subjectAltName ? "subjectAltName" : `extension ${oid}`;
      if (seen.has(oid)) throw new DerError(`${name}: requested twice`);
      seen.add(oid);
      if (oid !== OID.subjectAltName) continue;
      for (const san of children(readSingle(value, TAG.sequence, name), TAG.sequence, name)) addSan(sans, san);
    }
  }
  return sans;
}

/** An Extension: its OID and extnValue (the critical flag, when present, must be DER). */
function readExtension(extension: Tlv): { oid: string; value: Uint8Array } {
  const fields = children(extension, TAG.sequence, "extension");
  const [type, critical, value] = fields.length === 2 ? [fields[0], undefined, fields[1]] : fields;
  if (!type || !value || fields.length > 3) throw new DerError("extension: expected 2 or 3 elements");
  if (critical) readBoolean(critical, "extension critical flag");
  return { oid: readOid(type, "extension"), value: expectTag(value, TAG.octetString, "extension value").content };
}

function addSan(sans: Sans, name: Tlv): void {
  switch (name.tag) {
    case GENERAL_NAME.dns:
      sans.dnsNames.push(readAscii(name.content, "DNS SAN"));
      return;
    case GENERAL_NAME.ip: {
      const ip = canonicalIp(name.content);
      if (ip === undefined) throw new DerError(`IP SAN: ${name.content.length} bytes, expected 4 or 16`);
      sans.ipAddresses.push(ip);
      return;
    }
    case GENERAL_NAME.email:
      sans.emailAddresses.push(readAscii(name.content, "email SAN"));
      return;
    case GENERAL_NAME.uri: {
      const text = quote(Buffer.from(name.content).toString("latin1"));
      throw new DerError(`URI SAN ${text}: not read (Go rewrites a URI as it parses it; no kubelet asks for one)`);
    }
    default:
      sans.otherSans.push(OTHER_GENERAL_NAMES[name.tag] ?? `tag 0x${name.tag.toString(16)}`);
  }
}
