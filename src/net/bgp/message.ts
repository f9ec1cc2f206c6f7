// BGP-4 messages (RFC 4271 §4) as bytes and back: the 19-byte header, OPEN with the capabilities an export-only
// speaker offers (4-octet ASNs RFC 6793, multiprotocol RFC 4760 for IPv4/IPv6 unicast, route refresh RFC 2918,
// graceful restart RFC 4724), UPDATE (update.ts), NOTIFICATION, KEEPALIVE and ROUTE-REFRESH. Pure: no I/O. The
// reader never throws: a message it refuses comes back as a BgpError naming the NOTIFICATION to send (RFC 4271 §6,
// RFC 7606). Messages are at most 4096 bytes (no extended messages, RFC 8654).
import { bgpError, type BgpError, type Notification } from "./errors.ts";
import { type Family, ipFromBytes, ipToBytes } from "../ip.ts";
import { Reader, Refusal, refuse } from "./reader.ts";
import { encodeUpdateBody, readUpdateBody, type Update } from "./update.ts";

export const HEADER_LENGTH = 19;
export const MAX_MESSAGE_LENGTH = 4096;
export const BGP_VERSION = 4;
/** The 2-octet stand-in for a 4-octet ASN in OPEN's My AS field (RFC 6793). */
export const AS_TRANS = 23456;

const TYPES = { open: 1, update: 2, notification: 3, keepalive: 4, "route-refresh": 5 } as const;
type MessageType = keyof typeof TYPES;
const TYPE_NAMES = Object.keys(TYPES) as MessageType[];

export interface GracefulRestart {
  /** The R bit: we restarted, and the peer is to keep our routes (marked stale) until our End-of-RIB. */
  restarting: boolean;
  /** Seconds the peer waits for the session to come back (12 bits: at most 4095). */
  restartTime: number;
  /** The families whose forwarding survived the restart (F bit) or not. */
  families: { family: Family; forwarding: boolean }[];
}

export interface Capabilities {
  /** Whether the 4-octet AS capability was sent; our reader requires it of peers (see the session). */
  fourOctetAs: boolean;
  /** Multiprotocol capabilities for IPv4/IPv6 unicast, in order; others a peer offers are left out. */
  families: Family[];
  routeRefresh: boolean;
  gracefulRestart?: GracefulRestart;
}

export interface Open {
  /** The speaker's ASN: from the 4-octet AS capability when present, else the My AS field. */
  asn: number;
  holdTime: number;
  /** The BGP identifier as a dotted quad. */
  identifier: string;
  capabilities: Capabilities;
}

export interface RouteRefresh {
  afi: number;
  safi: number;
}

export type Message =
  | { type: "open"; open: Open }
  | { type: "update"; update: Update }
  | { type: "notification"; notification: Notification }
  | { type: "keepalive" }
  | { type: "route-refresh"; routeRefresh: RouteRefresh };

// ---- writing ----

const CAP = { multiprotocol: 1, routeRefresh: 2, gracefulRestart: 64, fourOctetAs: 65 } as const;
const OPT_PARAM_CAPABILITIES = 2;
const AFI: Record<Family, number> = { 4: 1, 6: 2 };

function capability(code: number, value: Buffer): Buffer {
  return Buffer.concat([Buffer.from([code, value.length]), value]);
}

function encodeOpenBody(open: Open): Buffer {
  const { capabilities: caps } = open;
  if (!caps.fourOctetAs && open.asn > 0xffff) throw new Error(`ASN ${open.asn} needs the 4-octet AS capability`);
  const parts: Buffer[] = [];
  for (const family of caps.families) parts.push(capability(CAP.multiprotocol, Buffer.from([0, AFI[family], 0, 1])));
  if (caps.routeRefresh) parts.push(capability(CAP.routeRefresh, Buffer.alloc(0)));
  if (caps.gracefulRestart) {
    const gr = caps.gracefulRestart;
    const value = Buffer.alloc(2 + 4 * gr.families.length);
    value.writeUInt16BE((gr.restarting ? 0x8000 : 0) | (gr.restartTime & 0xfff));
    gr.families.forEach(({ family, forwarding }, i) => {
      value.writeUInt16BE(AFI[family], 2 + 4 * i);
      value[4 + 4 * i] = 1;
      value[5 + 4 * i] = forwarding ? 0x80 : 0;
    });
    parts.push(capability(CAP.gracefulRestart, value));
  }
  if (caps.fourOctetAs) {
    const value = Buffer.alloc(4);
    value.writeUInt32BE(open.asn);
    parts.push(capability(CAP.fourOctetAs, value));
  }
  const capabilityBytes = Buffer.concat(parts);
  const params =
    capabilityBytes.length > 0
      ? Buffer.concat([Buffer.from([OPT_PARAM_CAPABILITIES, capabilityBytes.length]), capabilityBytes])
      : capabilityBytes;
  const fixed = Buffer.alloc(10);
  fixed[0] = BGP_VERSION;
  fixed.writeUInt16BE(open.asn > 0xffff ? AS_TRANS : open.asn, 1);
  fixed.writeUInt16BE(open.holdTime, 3);
  ipToBytes(open.identifier).copy(fixed, 5);
  fixed[9] = params.length;
  return Buffer.concat([fixed, params]);
}

function body(message: Message): Buffer {
  switch (message.type) {
    case "open":
      return encodeOpenBody(message.open);
    case "update":
      return encodeUpdateBody(message.update);
    case "notification": {
      const { code, subcode, data } = message.notification;
      return Buffer.concat([Buffer.from([code, subcode]), data]);
    }
    case "keepalive":
      return Buffer.alloc(0);
    case "route-refresh": {
      const value = Buffer.alloc(4);
      value.writeUInt16BE(message.routeRefresh.afi);
      value[3] = message.routeRefresh.safi;
      return value;
    }
  }
}

/** The message's bytes, header included; throws (a bug of ours, not a peer's) if it would exceed 4096 bytes. */
export function encodeMessage(message: Message): Buffer {
  const content = body(message);
  const length = HEADER_LENGTH + content.length;
  if (length > MAX_MESSAGE_LENGTH)
    throw new Error(`BGP ${message.type} of ${length} bytes exceeds ${MAX_MESSAGE_LENGTH}`);
  const header = Buffer.alloc(HEADER_LENGTH, 0xff);
  header.writeUInt16BE(length, 16);
  header[18] = TYPES[message.type];
  return Buffer.concat([header, content]);
}

// ---- reading ----

/** The least length of each type's message, header included (RFC 4271 §4, RFC 2918 §3). */
const MIN_LENGTH: Record<MessageType, number> = {
  open: 29,
  update: 23,
  notification: 21,
  keepalive: 19,
  "route-refresh": 23,
};

/**
 * What the next message in a byte stream is: its length once its header can be checked (the bytes may not all be
 * there yet), undefined while fewer than 19 bytes have arrived, or the header error to send (RFC 4271 §6.1) — so an
 * oversized or unsynchronised stream is refused at its header, without waiting for (or buffering) its body.
 */
export function frameLength(stream: Buffer): number | BgpError | undefined {
  if (stream.length < HEADER_LENGTH) return undefined;
  for (let i = 0; i < 16; i++)
    if (stream[i] !== 0xff)
      return bgpError("message-header", "connection-not-synchronized", "the marker is not all ones");
  const length = stream.readUInt16BE(16);
  const code = stream[18] ?? 0;
  const type = TYPE_NAMES[code - 1];
  const lengthData = stream.subarray(16, 18);
  if (length < HEADER_LENGTH || length > MAX_MESSAGE_LENGTH)
    return bgpError(
      "message-header",
      "bad-message-length",
      `length ${length} outside 19-4096`,
      Buffer.from(lengthData),
    );
  if (!type) return bgpError("message-header", "bad-message-type", `message type ${code}`, Buffer.from([code]));
  if (length < MIN_LENGTH[type] || (type === "keepalive" && length !== HEADER_LENGTH))
    return bgpError("message-header", "bad-message-length", `${type} of ${length} bytes`, Buffer.from(lengthData));
  return length;
}

function openError(subcode: Parameters<typeof bgpError<"open">>[1], reason: string, data?: Buffer): BgpError {
  return bgpError("open", subcode, reason, data);
}

function readCapabilities(reader: Reader, caps: Capabilities, asn: { value: number }): void {
  while (reader.remaining > 0) {
    const code = reader.u8();
    const value = reader.take(reader.u8());
    const bad = () => refuse(openError("unspecific", `capability ${code} of length ${value.length}`));
    switch (code) {
      case CAP.multiprotocol: {
        if (value.length !== 4) bad();
        const [afi, safi] = [value.readUInt16BE(0), value[3]];
        const family: Family | undefined = safi === 1 ? (afi === 1 ? 4 : afi === 2 ? 6 : undefined) : undefined;
        if (family && !caps.families.includes(family)) caps.families.push(family);
        break;
      }
      case CAP.routeRefresh:
        if (value.length !== 0) bad();
        caps.routeRefresh = true;
        break;
      case CAP.gracefulRestart: {
        if (value.length < 2 || (value.length - 2) % 4 !== 0) bad();
        const flags = value.readUInt16BE(0);
        const families: GracefulRestart["families"] = [];
        for (let i = 2; i < value.length; i += 4) {
          const [afi, safi] = [value.readUInt16BE(i), value[i + 2]];
          if (safi === 1 && (afi === 1 || afi === 2))
            families.push({ family: afi === 1 ? 4 : 6, forwarding: ((value[i + 3] ?? 0) & 0x80) !== 0 });
        }
        caps.gracefulRestart = { restarting: (flags & 0x8000) !== 0, restartTime: flags & 0xfff, families };
        break;
      }
      case CAP.fourOctetAs:
        if (value.length !== 4) bad();
        caps.fourOctetAs = true;
        asn.value = value.readUInt32BE(0);
        break;
      // others (enhanced route refresh, ADD-PATH, FQDN, ...): not offered by us, so not in use; ignored (RFC 5492 §4)
    }
  }
}

function readOpenBody(content: Buffer): Open {
  const reader = new Reader(content, () => openError("unspecific", "OPEN ends inside a field"));
  const version = reader.u8();
  if (version !== BGP_VERSION)
    refuse(openError("unsupported-version-number", `version ${version}`, Buffer.from([0, BGP_VERSION])));
  const asn = { value: reader.u16() };
  const holdTime = reader.u16();
  const identifierBytes = reader.take(4);
  const params = reader.sub(reader.u8(), () =>
    openError("unspecific", "an optional parameter runs past the parameters"),
  );
  if (reader.remaining !== 0) refuse(openError("unspecific", "bytes after the optional parameters"));
  if (holdTime === 1 || holdTime === 2) refuse(openError("unacceptable-hold-time", `hold time ${holdTime} s`));
  if (identifierBytes.readUInt32BE() === 0) refuse(openError("bad-bgp-identifier", "BGP identifier 0.0.0.0"));
  const capabilities: Capabilities = { fourOctetAs: false, families: [], routeRefresh: false };
  while (params.remaining > 0) {
    const type = params.u8();
    const value = params.sub(params.u8(), () => openError("unspecific", "a capability runs past its parameter"));
    if (type !== OPT_PARAM_CAPABILITIES)
      refuse(openError("unsupported-optional-parameter", `optional parameter type ${type}`));
    readCapabilities(value, capabilities, asn);
  }
  return { asn: asn.value, holdTime, identifier: ipFromBytes(identifierBytes), capabilities };
}

/** Reads one whole message (as frameLength measured it): the message, or the NOTIFICATION to answer it with. */
export function decodeMessage(bytes: Buffer): Message | BgpError {
  const length = frameLength(bytes);
  if (length === undefined)
    return bgpError("message-header", "bad-message-length", `${bytes.length} bytes is no header`);
  if (typeof length !== "number") return length;
  if (length !== bytes.length)
    return bgpError(
      "message-header",
      "bad-message-length",
      `length field ${length}, ${bytes.length} bytes`,
      bytes.subarray(16, 18),
    );
  const content = bytes.subarray(HEADER_LENGTH);
  try {
    switch (TYPE_NAMES[(bytes[18] ?? 0) - 1]) {
      case "open":
        return { type: "open", open: readOpenBody(content) };
      case "update": {
        const update = readUpdateBody(content);
        return "notification" in update ? update : { type: "update", update };
      }
      case "notification":
        return {
          type: "notification",
          notification: { code: content[0] ?? 0, subcode: content[1] ?? 0, data: Buffer.from(content.subarray(2)) },
        };
      case "route-refresh":
        if (content.length !== 4)
          return bgpError(
            "route-refresh",
            "invalid-message-length",
            `ROUTE-REFRESH of ${length} bytes`,
            Buffer.from(bytes),
          );
        return { type: "route-refresh", routeRefresh: { afi: content.readUInt16BE(0), safi: content[3] ?? 0 } };
      default:
        return { type: "keepalive" };
    }
  } catch (err) {
    if (err instanceof Refusal) return err.error;
    throw err;
  }
}

/** Splits what has arrived into whole messages; `rest` waits for more bytes, `error` ends the stream. */
export function splitMessages(stream: Buffer): { messages: Buffer[]; rest: Buffer; error?: BgpError } {
  const messages: Buffer[] = [];
  let offset = 0;
  for (;;) {
    const length = frameLength(stream.subarray(offset));
    if (length === undefined) break;
    if (typeof length !== "number") return { messages, rest: Buffer.alloc(0), error: length };
    if (stream.length - offset < length) break;
    messages.push(stream.subarray(offset, offset + length));
    offset += length;
  }
  return { messages, rest: stream.subarray(offset) };
}
