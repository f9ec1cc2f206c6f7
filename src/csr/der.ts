// A minimal DER reader: what reading a PKCS#10 certificate request needs, no more. It is strict where BER is
// lenient (definite, minimal lengths; single-byte tags; nothing left over), and at least as strict as Go's
// encoding/asn1 (which kube-apiserver and the signer use) wherever Go refuses something (OID arcs over 2^31-1,
// BOOLEANs other than 00/ff, BIT STRING padding), so that whatever it accepts reads the same in Go. Failures
// throw DerError with a short message naming the field; request.ts turns them into a refusal.

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
  /** Tag, length and content: a view into the input. */
  whole: Uint8Array;
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
  return { tlv: { tag, content: bytes.subarray(start, end), whole: bytes.subarray(offset, end) }, end };
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
    // Go's encoding/asn1 refuses arcs that do not fit an int32 (the first one before it is split in two).
    if (arc > 0x7fffffff) throw new DerError(`${what}: OID arc too large`);
    if (byte & 0x80) continue;
    arcs.push(arc);
    arc = 0;
  }
  const [head] = arcs;
  if (head === undefined || (content.at(-1) ?? 0) & 0x80) throw new DerError(`${what}: malformed OID`);
  const [first, second] = head < 80 ? [Math.floor(head / 40), head % 40] : [2, head - 80];
  return [first, second, ...arcs.slice(1)].join(".");
}

/** BOOLEAN as DER (and Go) has it: one octet, 00 or ff. */
export function readBoolean(tlv: Tlv, what: string): boolean {
  const { content } = expectTag(tlv, TAG.boolean, what);
  if (content.length !== 1 || (content[0] !== 0 && content[0] !== 0xff)) throw new DerError(`${what}: not DER`);
  return content[0] === 0xff;
}

/** The bits of a BIT STRING, refused where Go's encoding/asn1 refuses its padding. */
export function readBitString(tlv: Tlv, what: string): { unusedBits: number; bytes: Uint8Array } {
  const { content } = expectTag(tlv, TAG.bitString, what);
  const [unusedBits] = content;
  if (unusedBits === undefined) throw new DerError(`${what}: empty BIT STRING`);
  const last = content.at(-1) ?? 0;
  if (unusedBits > 7 || (content.length === 1 && unusedBits > 0) || (last & ((1 << unusedBits) - 1)) !== 0)
    throw new DerError(`${what}: invalid BIT STRING padding`);
  return { unusedBits, bytes: content.subarray(1) };
}

// ignoreBOM keeps a leading U+FEFF, as Go does: "\uFEFFsystem:node:x" is not "system:node:x".
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

const STRING_TYPES: Record<number, string> = {
  0x12: "NumericString",
  0x14: "T61String",
  0x15: "VideotexString",
  0x1a: "VisibleString",
  0x1b: "GeneralString",
  0x1c: "UniversalString",
  0x1e: "BMPString",
};

/**
 * A UTF8String, PrintableString or IA5String, read as Go reads it. Other types are refused, though Go reads
 * some (T61String as Latin-1, BMPString as UCS-2 less a terminator, NumericString): no kubelet writes them.
 */
export function readString(tlv: Tlv, what: string): string {
  if (tlv.tag === TAG.utf8String) {
    try {
      return utf8.decode(tlv.content);
    } catch {
      throw new DerError(`${what}: invalid UTF-8`);
    }
  }
  if (tlv.tag === TAG.printableString) {
    if (!tlv.content.every(isPrintable)) throw new DerError(`${what}: PrintableString with other characters`);
    return readAscii(tlv.content, what);
  }
  if (tlv.tag === TAG.ia5String) return readAscii(tlv.content, what);
  const type = STRING_TYPES[tlv.tag] ?? "not a string";
  throw new DerError(`${what}: unsupported string type 0x${tlv.tag.toString(16)} (${type})`);
}

/** Go's PrintableString set: the standard's, plus '*' and '&' that Go lets through. */
const isPrintable = (byte: number) =>
  (byte >= 0x61 && byte <= 0x7a) || // a-z
  (byte >= 0x41 && byte <= 0x5a) || // A-Z
  (byte >= 0x30 && byte <= 0x39) || // 0-9
  (byte >= 0x27 && byte <= 0x29) || // ' ( )
  (byte >= 0x2b && byte <= 0x2f) || // + , - . /
  " :=?*&".includes(String.fromCharCode(byte));

/** Seven-bit text, as Go requires of IA5String SAN values. */
export function readAscii(content: Uint8Array, what: string): string {
  if (content.some((byte) => byte >= 0x80)) throw new DerError(`${what}: not ASCII`);
  return Buffer.from(content.buffer, content.byteOffset, content.length).toString("ascii");
}
