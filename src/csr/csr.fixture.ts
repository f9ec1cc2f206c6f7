// Certificate requests for the CSR tests: real ones made by `openssl req` (about 10 ms each), and a small DER
// encoder for the malformed ones openssl will not make.
import { execFileSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";

export interface OpensslRequest {
  /** `openssl req -subj` text; default: a kubelet's for node n1. */
  subject?: string;
  /** `subjectAltName` extension text (e.g. "DNS:n1,IP:198.18.0.12"); undefined: no extension. */
  sans?: string;
}

/** A PEM certificate request made by openssl with a fresh P-256 key. */
export function opensslCsr({ subject = "/O=system:nodes/CN=system:node:n1", sans }: OpensslRequest): string {
  const args = ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout"];
  args.push("/dev/null", "-subj", subject, "-multivalue-rdn");
  if (sans !== undefined) args.push("-addext", `subjectAltName=${sans}`);
  return execFileSync("openssl", args, { stdio: ["ignore", "pipe", "pipe"] }).toString();
}

/** A CertificateSigningRequest as the API returns it, with a kubelet's serving defaults. */
export function csrObject(
  pem: string,
  spec: Partial<CertificateSigningRequest["spec"]> = {},
  created = "2026-01-01T12:00:00Z",
): CertificateSigningRequest {
  return {
    metadata: { name: "csr-1", creationTimestamp: created },
    spec: {
      signerName: "kubernetes.io/kubelet-serving",
      username: "system:node:n1",
      groups: ["system:nodes", "system:authenticated"],
      usages: ["digital signature", "server auth"],
      ...spec,
      request: Buffer.from(pem).toString("base64"),
    },
  };
}

// ---- a DER encoder, for the requests openssl will not make ----

export function tlv(tag: number, ...parts: Uint8Array[]): Buffer {
  const content = Buffer.concat(parts);
  const length = content.length;
  const header =
    length < 0x80 ? [length] : length < 0x100 ? [0x81, length] : [0x82, length >> 8, length & 0xff];
  return Buffer.concat([Buffer.from([tag, ...header]), content]);
}

export const sequence = (...parts: Uint8Array[]) => tlv(0x30, ...parts);
export const set = (...parts: Uint8Array[]) => tlv(0x31, ...parts);

export function oid(text: string): Buffer {
  const [first = 0, second = 0, ...rest] = text.split(".").map(Number);
  const base128 = (arc: number): number[] => {
    const bytes = [arc & 0x7f];
    for (let value = Math.floor(arc / 128); value > 0; value = Math.floor(value / 128))
      bytes.unshift((value & 0x7f) | 0x80);
    return bytes;
  };
  return tlv(0x06, Buffer.from([first * 40 + second, ...rest.flatMap(base128)]));
}

export const UTF8 = 0x0c;
/** A string TLV: text in UTF-8 for UTF8String, else in latin1; or the given bytes. */
export const text = (tag: number, value: string | Uint8Array) =>
  tlv(tag, typeof value === "string" ? Buffer.from(value, tag === UTF8 ? "utf8" : "latin1") : value);
export const PRINTABLE = 0x13;

/** One attribute per RDN; `type` is an OID, `tag` the string type. */
export const name = (...attributes: [type: string, tag: number, value: string | Uint8Array][]) =>
  sequence(...attributes.map(([type, tag, value]) => set(sequence(oid(type), text(tag, value)))));

export const KUBELET_SUBJECT = name(["2.5.4.10", PRINTABLE, "system:nodes"], ["2.5.4.3", PRINTABLE, "system:node:n1"]);

/** A subjectAltName extension of ready-made GeneralNames (e.g. tlv(0x82, …) for a DNS name). */
export const sanExtension = (...names: Uint8Array[]) =>
  sequence(oid("2.5.29.17"), tlv(0x04, sequence(...names)));

/** The extensionRequest attribute, one value holding these extensions. */
export const extensionRequest = (...extensions: Uint8Array[]) =>
  sequence(oid("1.2.840.113549.1.9.14"), set(sequence(...extensions)));

const PUBLIC_KEY = generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "der", type: "spki" });

/** A CertificationRequest DER with a dummy signature (the approver does not verify signatures). */
export function requestDer(subject: Uint8Array, ...attributes: Uint8Array[]): Buffer {
  return requestDerWithKey(PUBLIC_KEY, subject, ...attributes);
}

/** The same with the given subjectPublicKeyInfo (DER). */
export function requestDerWithKey(publicKey: Uint8Array, subject: Uint8Array, ...attributes: Uint8Array[]): Buffer {
  const info = sequence(tlv(0x02, Buffer.from([0])), subject, publicKey, tlv(0xa0, ...attributes));
  return sequence(info, sequence(oid("1.2.840.10045.4.3.2")), tlv(0x03, Buffer.from([0, 1, 2, 3])));
}

/** PEM text as Go's pem.Encode writes it: base64 in lines of 64 characters. */
export const pem = (der: Uint8Array, type = "CERTIFICATE REQUEST") => {
  const lines = Buffer.from(der).toString("base64").replace(/.{1,64}/g, "$&\n");
  return `-----BEGIN ${type}-----\n${lines}-----END ${type}-----\n`;
};
