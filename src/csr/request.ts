// A PKCS#10 certificate request (RFC 2986) read into the plain facts the approver decides on: the subject's
// CN and O, and the subjectAltName of the extensionRequest attribute. Node has X509Certificate but no CSR
// parser; this reads exactly these fields with der.ts (see README "Dependencies" for why not a library).
//
// It refuses rather than guesses wherever Go's x509 (which kube-apiserver validates with and which builds the
// issued certificate) could read something else: several PEM blocks, several CNs (Go keeps the last one),
// several subjectAltName extensions (Go keeps the last one). The signature is not verified: the signer does.
import { canonicalIp } from "../net/ip.ts";
import {
  children,
  DerError,
  expectTag,
  readAll,
  readAscii,
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
  uris: string[];
  /** SAN kinds no kubelet asks for: otherName, directoryName, registeredID, … */
  otherSans: string[];
}

export type CsrRequest = ParsedRequest | { ok: false; error: string };

const OID = {
  commonName: "2.5.4.3",
  organization: "2.5.4.10",
  extensionRequest: "1.2.840.113549.1.9.14",
  subjectAltName: "2.5.29.17",
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

const PEM_BLOCK = /-----BEGIN ([^-\r\n]*)-----\r?\n([\s\S]*?)-----END \1-----/g;

/** The request of a CertificateSigningRequest (spec.request, base64-decoded): one PEM block. */
export function parseCsrPem(pem: string): CsrRequest {
  const blocks = [...pem.matchAll(PEM_BLOCK)];
  const [block] = blocks;
  if (!block) return { ok: false, error: "no PEM block" };
  if (blocks.length > 1) return { ok: false, error: `${blocks.length} PEM blocks, expected one` };
  const [, type, body = ""] = block;
  if (type !== "CERTIFICATE REQUEST")
    return { ok: false, error: `PEM block type is "${type}", not "CERTIFICATE REQUEST"` };
  if (!/^[A-Za-z0-9+/=\s]*$/.test(body)) return { ok: false, error: "PEM body is not base64 (headers?)" };
  return parseCsrDer(Buffer.from(body, "base64"));
}

export function parseCsrDer(der: Uint8Array): CsrRequest {
  try {
    return readRequest(der);
  } catch (error) {
    // Anything else would be a bug here; still a refusal, never an exception out of the decision.
    return { ok: false, error: error instanceof DerError ? error.message : `unreadable: ${String(error)}` };
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
  expectTag(algorithm, TAG.sequence, "signatureAlgorithm");
  expectTag(signature, TAG.bitString, "signature");
  const [version, subject, publicKey, attributes, ...rest] = children(
    info,
    TAG.sequence,
    "CertificationRequestInfo",
  );
  if (!version || !subject || !publicKey || !attributes || rest.length)
    throw new DerError("CertificationRequestInfo: expected 4 elements");
  const versionBytes = expectTag(version, TAG.integer, "version").content;
  if (versionBytes.length !== 1 || versionBytes[0] !== 0) throw new DerError("version: not v1 (0)");
  expectTag(publicKey, TAG.sequence, "subjectPKInfo");
  return { ok: true, ...readSubject(subject), ...readSans(expectTag(attributes, 0xa0, "attributes")) };
}

function readSubject(subject: Tlv) {
  const names = { commonNames: [] as string[], organizations: [] as string[], otherSubjectAttributes: [] as string[] };
  for (const rdn of children(subject, TAG.sequence, "subject"))
    for (const attribute of children(rdn, TAG.set, "subject")) {
      const [type, value, ...rest] = children(attribute, TAG.sequence, "subject attribute");
      if (!type || !value || rest.length) throw new DerError("subject attribute: expected type and value");
      const oid = readOid(type, "subject attribute");
      if (oid === OID.commonName) names.commonNames.push(readString(value, "subject CN"));
      else if (oid === OID.organization) names.organizations.push(readString(value, "subject O"));
      else names.otherSubjectAttributes.push(ATTRIBUTE_NAMES[oid] ?? oid);
    }
  return names;
}

type Sans = Pick<ParsedRequest, "dnsNames" | "ipAddresses" | "emailAddresses" | "uris" | "otherSans">;

/** The subjectAltName of the extensionRequest attribute(s); no SAN at all is not an error here. */
function readSans(attributes: Tlv): Sans {
  const sans: Sans = { dnsNames: [], ipAddresses: [], emailAddresses: [], uris: [], otherSans: [] };
  let seen = false;
  for (const attribute of readAll(attributes.content, "attributes")) {
    const [type, values, ...rest] = children(attribute, TAG.sequence, "attribute");
    if (!type || !values || rest.length) throw new DerError("attribute: expected type and values");
    if (readOid(type, "attribute") !== OID.extensionRequest) continue;
    const [extensions, ...more] = children(values, TAG.set, "extensionRequest");
    if (!extensions || more.length) throw new DerError("extensionRequest: expected one value");
    for (const extension of children(extensions, TAG.sequence, "extensionRequest")) {
      const value = readSanExtension(extension);
      if (!value) continue;
      if (seen) throw new DerError("subjectAltName: requested twice");
      seen = true;
      for (const name of children(readSingle(value, TAG.sequence, "subjectAltName"), TAG.sequence, "subjectAltName"))
        addSan(sans, name);
    }
  }
  return sans;
}

/** The extnValue of a subjectAltName extension, or undefined for any other extension. */
function readSanExtension(extension: Tlv): Uint8Array | undefined {
  const fields = children(extension, TAG.sequence, "extension");
  const [type, critical, value] = fields.length === 2 ? [fields[0], undefined, fields[1]] : fields;
  if (!type || !value || fields.length > 3) throw new DerError("extension: expected 2 or 3 elements");
  if (critical) expectTag(critical, TAG.boolean, "extension critical flag");
  const oid = readOid(type, "extension");
  return oid === OID.subjectAltName ? expectTag(value, TAG.octetString, "extension value").content : undefined;
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
    case GENERAL_NAME.uri:
      sans.uris.push(readAscii(name.content, "URI SAN"));
      return;
    default:
      sans.otherSans.push(OTHER_GENERAL_NAMES[name.tag] ?? `tag 0x${name.tag.toString(16)}`);
  }
}
