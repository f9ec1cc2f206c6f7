// A self-signed serving certificate for the metrics endpoint, made at start when no cert/key files are given
// (as controller-runtime's secure metrics server and kube-rbac-proxy do). Node can sign but has no certificate
// builder, so the X.509 DER is written here by a minimal encoder: the fields RFC 5280 requires and the extensions
// Go's crypto/x509 looks at for a TLS server (key usage, server auth, SANs). ECDSA P-256: fast to generate and to
// handshake with, and a small key in memory.
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { isIP } from "node:net";
import { ipToBytes } from "../net/ip.ts";

export interface SelfSigned {
  certPem: string;
  keyPem: string;
}

export interface SelfSignedOptions {
  commonName: string;
  dnsNames: string[];
  ips: string[];
  /** Certificate validity starts an hour before (clock skew) and lasts this long. */
  validForMs: number;
  now?: Date;
}

const OID = {
  ecdsaWithSha256: "1.2.840.10045.4.3.2",
  commonName: "2.5.4.3",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  extKeyUsage: "2.5.29.37",
  serverAuth: "1.3.6.1.5.5.7.3.1",
};

/** One DER TLV: a single-byte tag and a definite, minimal length. */
function tlv(tag: number, content: Uint8Array): Buffer {
  const n = content.length;
  let length: number[];
  if (n < 0x80) length = [n];
  else {
    const bytes: number[] = [];
    for (let rest = n; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest % 256);
    length = [0x80 | bytes.length, ...bytes];
  }
  return Buffer.concat([Buffer.from([tag, ...length]), content]);
}

const sequence = (...items: Uint8Array[]) => tlv(0x30, Buffer.concat(items));
const set = (...items: Uint8Array[]) => tlv(0x31, Buffer.concat(items));
/** Context-specific, constructed: [n] EXPLICIT. */
const explicit = (n: number, item: Uint8Array) => tlv(0xa0 | n, item);
const octetString = (content: Uint8Array) => tlv(0x04, content);
const bitString = (content: Uint8Array) => tlv(0x03, Buffer.concat([Buffer.from([0]), content]));
const utf8String = (text: string) => tlv(0x0c, Buffer.from(text, "utf8"));
const boolean = (value: boolean) => tlv(0x01, Buffer.from([value ? 0xff : 0]));

/** A non-negative INTEGER from its big-endian magnitude: no redundant leading zeros, a zero before a high bit. */
function unsignedInteger(magnitude: Uint8Array): Buffer {
  let start = 0;
  while (start < magnitude.length - 1 && magnitude[start] === 0) start++;
  const bytes = Buffer.from(magnitude.subarray(start));
  return tlv(0x02, (bytes[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes);
}

function oid(dotted: string): Buffer {
  const [first = 0, second = 0, ...rest] = dotted.split(".").map(Number);
  const bytes = [first * 40 + second];
  for (const arc of rest) {
    const base128 = [arc & 0x7f];
    for (let value = Math.floor(arc / 128); value > 0; value = Math.floor(value / 128)) {
      base128.unshift(0x80 | (value & 0x7f));
    }
    bytes.push(...base128);
  }
  return tlv(0x06, Buffer.from(bytes));
}

/** RFC 5280: UTCTime through 2049, GeneralizedTime from 2050; always UTC, seconds, no fraction. */
function time(date: Date): Buffer {
  const iso = date.toISOString(); // 2026-11-24T06:07:03.123Z
  const digits = iso.slice(0, 19).replace(/[-T:]/g, "") + "Z"; // 20261124060703Z
  return date.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(digits.slice(2))) : tlv(0x18, Buffer.from(digits));
}

function extension(id: string, critical: boolean, value: Uint8Array): Buffer {
  return sequence(oid(id), ...(critical ? [boolean(true)] : []), octetString(value));
}

/** A fresh P-256 key and a certificate for it, signed by itself. */
export function selfSignedCertificate(options: SelfSignedOptions): SelfSigned {
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const now = options.now ?? new Date();
  const name = sequence(set(sequence(oid(OID.commonName), utf8String(options.commonName))));
  const serial = randomBytes(16);
  serial[0] = ((serial[0] ?? 0) & 0x7f) | 0x01; // positive and 16 bytes long, as Go's certificates' serials
  const algorithm = sequence(oid(OID.ecdsaWithSha256));
  const ips = options.ips.filter((ip) => isIP(ip) !== 0);
  const sans = [
    ...options.dnsNames.map((dns) => tlv(0x82, Buffer.from(dns, "ascii"))), // [2] dNSName
    ...ips.map((ip) => tlv(0x87, ipToBytes(ip))), // [7] iPAddress
  ];
  const extensions = [
    // digitalSignature: an ECDSA key signs the handshake.
    extension(OID.keyUsage, true, Buffer.from([0x03, 0x02, 0x07, 0x80])),
    extension(OID.extKeyUsage, false, sequence(oid(OID.serverAuth))),
    extension(OID.basicConstraints, true, sequence()),
    ...(sans.length > 0 ? [extension(OID.subjectAltName, false, sequence(...sans))] : []),
  ];
  const tbs = sequence(
    explicit(0, unsignedInteger(Buffer.from([2]))), // v3
    unsignedInteger(serial),
    algorithm,
    name,
    sequence(time(new Date(now.getTime() - 3_600_000)), time(new Date(now.getTime() + options.validForMs))),
    name,
    publicKey.export({ type: "spki", format: "der" }),
    explicit(3, sequence(...extensions)),
  );
  const certificate = sequence(tbs, algorithm, bitString(sign("sha256", tbs, privateKey)));
  const base64 = certificate.toString("base64").replace(/.{64}/g, "$&\n").replace(/\n?$/, "\n");
  return {
    certPem: `-----BEGIN CERTIFICATE-----\n${base64}-----END CERTIFICATE-----\n`,
    keyPem: privateKey.export({ type: "pkcs8", format: "pem" }) as string,
  };
}
