// A minimal DER reader: what reading a PKCS#10 certificate request needs, no more. It is strict where BER is
// lenient (definite, minimal lengths; single-byte tags; nothing left over), so that whatever it accepts reads the
// same as in Go's encoding/asn1, which kube-apiserver and the signer use. Failures throw DerError with a short
// message naming the field; request.ts turns them into a refusal.

export class DerError extends Error {}

export const TAG = {
  boolean: 0x01,
  integer: 0x02,
  bitString: 0x03,
  octetString: 0x04,
  oid: 0x06,
  utf8String: 0x0c,
  printableString: 0x13,
  ia5String: 0x16,
  sequence: 0x30,
  set: 0x31,
} as const;

export interface Tlv {
  tag: number;
  /** The content octets: a view into the input, not a copy. */
  content: Uint8Array;
}

/** The TLVs that exactly fill `bytes`. */
export function readAll(bytes: Uint8Array, what: string): Tlv[] {
  const items: Tlv[] = [];
  for (let offset = 0; offset < bytes.length; ) {
    const { tlv, end } = readOne(bytes, offset, what);
    items.push(tlv);
    offset = end;
  }
  return items;
}

function readOne(bytes: Uint8Array, offset: number, what: string): { tlv: Tlv; end: number } {
  const tag = bytes[offset];
  const first = bytes[offset + 1];
  if (tag === undefined || first === undefined) throw new DerError(`${what}: truncated`);
  if ((tag & 0x1f) === 0x1f) throw new DerError(`${what}: multi-byte tag`);
  let start = offset + 2;
  let length = first;
  if (first & 0x80) {
    const count = first & 0x7f;
    if (count === 0) throw new DerError(`${what}: indefinite length`);
    if (count > 3) throw new DerError(`${what}: length too large`);
    length = 0;
    for (let i = 0; i < count; i++) {
      const byte = bytes[start + i];
      if (byte === undefined) throw new DerError(`${what}: truncated`);
      length = length * 256 + byte;
    }
    // DER: the shortest form, so a value has one encoding.
    if (length < 0x80 || bytes[start] === 0) throw new DerError(`${what}: non-minimal length`);
    start += count;
  }
  const end = start + length;
  if (end > bytes.length) throw new DerError(`${what}: truncated`);
  return { tlv: { tag, content: bytes.subarray(start, end) }, end };
}

/** The one TLV that fills `bytes`, with the expected tag. */
export function readSingle(bytes: Uint8Array, tag: number, what: string): Tlv {
  const items = readAll(bytes, what);
  const [item] = items;
  if (items.length !== 1 || !item) throw new DerError(`${what}: expected one element, got ${items.length}`);
  return expectTag(item, tag, what);
}

export function expectTag(tlv: Tlv, tag: number, what: string): Tlv {
  if (tlv.tag !== tag) throw new DerError(`${what}: unexpected tag 0x${tlv.tag.toString(16)}`);
  return tlv;
}

/** The elements of a SEQUENCE or SET (any constructed TLV) with the expected tag. */
export function children(tlv: Tlv, tag: number, what: string): Tlv[] {
  return readAll(expectTag(tlv, tag, what).content, what);
}

/** Dotted text of an OBJECT IDENTIFIER. */
export function readOid(tlv: Tlv, what: string): string {
  const { content } = expectTag(tlv, TAG.oid, what);
  const arcs: number[] = [];
  let arc = 0;
  for (let i = 0; i < content.length; i++) {
    const byte = content[i] ?? 0;
    if (arc === 0 && byte === 0x80) throw new DerError(`${what}: non-minimal OID`);
    arc = arc * 128 + (byte & 0x7f);
    if (arc > Number.MAX_SAFE_INTEGER / 128) throw new DerError(`${what}: OID arc too large`);
    if (byte & 0x80) continue;
    arcs.push(arc);
    arc = 0;
  }
  const [head] = arcs;
  if (head === undefined || (content.at(-1) ?? 0) & 0x80) throw new DerError(`${what}: malformed OID`);
  const [first, second] = head < 80 ? [Math.floor(head / 40), head % 40] : [2, head - 80];
  return [first, second, ...arcs.slice(1)].join(".");
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A UTF8String, PrintableString or IA5String; other string types are refused (no kubelet writes them). */
export function readString(tlv: Tlv, what: string): string {
  if (tlv.tag === TAG.utf8String) {
    try {
      return utf8.decode(tlv.content);
    } catch {
      throw new DerError(`${what}: invalid UTF-8`);
    }
  }
  if (tlv.tag === TAG.printableString || tlv.tag === TAG.ia5String) return readAscii(tlv.content, what);
  throw new DerError(`${what}: unsupported string type 0x${tlv.tag.toString(16)}`);
}

/** Seven-bit text, as Go requires of IA5String SAN values. */
export function readAscii(content: Uint8Array, what: string): string {
  if (content.some((byte) => byte >= 0x80)) throw new DerError(`${what}: not ASCII`);
  return Buffer.from(content.buffer, content.byteOffset, content.length).toString("ascii");
}
