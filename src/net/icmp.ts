// ICMP echo ("ping") of one address, over our sockets addon (./sockets.ts). A raw socket needs
// CAP_NET_RAW only (not root); without it an unprivileged ping socket is used where
// net.ipv4.ping_group_range admits our group. When neither is permitted, or the addon is not
// built, ICMP is "unavailable": a fact for the caller to log once, never a sign of a dead host.
import { randomBytes } from "node:crypto";
import { isIP } from "node:net";
import { sleep } from "../time/backoff.ts";
import { Family, openSocket, type Receiver, type Socket, SocketType } from "./sockets.ts";

export type EchoOutcome =
  | { kind: "answered" }
  /** Requests went out (or the network said there is no path) and no reply came in time. */
  | { kind: "silent" }
  /** ICMP cannot run in this process at all. */
  | { kind: "unavailable"; reason: string }
  /** This address could not be pinged (e.g. IPv6 disabled, a local firewall refusing to send). */
  | { kind: "failed"; reason: string };

export interface EchoOptions {
  /** Requests sent, one after the other until a reply. */
  count: number;
  /** How long each request waits for its reply. */
  timeoutMs: number;
  signal?: AbortSignal;
}

const PERMISSION = new Set(["EPERM", "EACCES"]);
/** Send errors that are the network's answer ("no path to that host"), not a failure to probe. */
const NO_PATH = new Set(["EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "ENETDOWN"]);

const KIND = {
  4: { family: Family.INET, protocol: 1 }, // IPPROTO_ICMP
  6: { family: Family.INET6, protocol: 58 }, // IPPROTO_ICMPV6
} as const;
/** Raw sockets see every ICMP packet the host receives: their kernel filter passes echo replies only. */
const ECHO_REPLY_FILTER = {
  // SOL_RAW, ICMP_FILTER: a bit set per blocked type.
  4: { level: 255, name: 1, value: u32s([~(1 << 0)]) },
  // IPPROTO_ICMPV6, ICMP6_FILTER: 256 bits, a set bit blocks the type (129: echo reply).
  6: { level: 58, name: 1, value: u32s(Array.from({ length: 8 }, (_, i) => (i === 4 ? ~(1 << 1) : ~0))) },
} as const;

/** C ints in the machine's byte order: little-endian on both architectures we build for (x64, arm64). */
function u32s(words: number[]): Buffer {
  const buffer = Buffer.alloc(4 * words.length);
  words.forEach((word, i) => buffer.writeInt32LE(word | 0, 4 * i));
  return buffer;
}

const codeOf = (err: unknown) => (err as NodeJS.ErrnoException).code ?? "";
const messageOf = (err: unknown) => (err as Error).message;

/** A raw socket if permitted, else a ping socket, else why ICMP is unavailable. */
function openEchoSocket(
  family: 4 | 6,
  onMessage: (data: Buffer) => void,
): { socket: Socket; raw: boolean } | EchoOutcome {
  const onReceive: Receiver = (error, data) => {
    if (error === null) onMessage(data); // a receive error leaves the reply unseen: the request times out
  };
  try {
    const socket = openSocket({ ...KIND[family], type: SocketType.RAW }, onReceive);
    const { level, name, value } = ECHO_REPLY_FILTER[family];
    try {
      socket.setOption(level, name, value);
    } catch (err) {
      socket.close();
      throw err;
    }
    return { socket, raw: true };
  } catch (err) {
    if (!PERMISSION.has(codeOf(err))) return failedToOpen(err);
  }
  try {
    return { socket: openSocket({ ...KIND[family], type: SocketType.DGRAM }, onReceive), raw: false };
  } catch (err) {
    if (!PERMISSION.has(codeOf(err))) return failedToOpen(err);
    return {
      kind: "unavailable",
      reason:
        "icmp unavailable: no raw socket (needs CAP_NET_RAW) and no ping socket (group not in net.ipv4.ping_group_range)",
    };
  }
}

/** Not a refusal of privilege: the addon is missing, or the socket failed otherwise (e.g. IPv6 disabled). */
function failedToOpen(err: unknown): EchoOutcome {
  if (codeOf(err) === "MODULE_NOT_FOUND")
    return { kind: "unavailable", reason: `icmp unavailable: addon not built (${messageOf(err).split("\n")[0]})` };
  return { kind: "failed", reason: `icmp: ${messageOf(err)}` };
}

/** Internet checksum (RFC 1071); the kernel fills it in for ICMPv6 and for ping sockets. */
function checksum(data: Buffer): number {
  let sum = 0;
  for (let i = 0; i < data.length; i += 2) sum += (data[i] as number) * 256 + (data[i + 1] ?? 0);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

const ECHO_REQUEST = { 4: 8, 6: 128 } as const;
const ECHO_REPLY = { 4: 0, 6: 129 } as const;

function echoRequest(family: 4 | 6, sequence: number, token: Buffer): Buffer {
  const packet = Buffer.alloc(8 + token.length);
  packet[0] = ECHO_REQUEST[family];
  packet.writeUInt16BE(token.readUInt16BE(0), 4); // identifier (a ping socket replaces it)
  packet.writeUInt16BE(sequence, 6);
  token.copy(packet, 8);
  if (family === 4) packet.writeUInt16BE(checksum(packet), 2);
  return packet;
}

/**
 * Our reply, recognised by the random token we sent as payload: a raw socket sees every echo
 * reply the host receives, and a ping socket rewrites the identifier.
 */
function isOurReply(data: Buffer, family: 4 | 6, raw: boolean, token: Buffer): boolean {
  const ipHeader = family === 4 && raw ? ((data[0] ?? 0) & 0x0f) * 4 : 0;
  const icmp = data.subarray(ipHeader);
  return icmp[0] === ECHO_REPLY[family] && icmp.subarray(8, 8 + token.length).equals(token);
}

/** Pings `address` up to `count` times, stopping at the first reply or when the signal aborts. */
export async function echo(address: string, options: EchoOptions): Promise<EchoOutcome> {
  const family = isIP(address.split("%")[0] ?? "");
  if (family !== 4 && family !== 6) return { kind: "failed", reason: `icmp: not an IP address: ${address}` };

  const token = randomBytes(16);
  let answered = false;
  let raw = false;
  let attempt = new AbortController();
  const opened = openEchoSocket(family, (data) => {
    if (answered || !isOurReply(data, family, raw, token)) return;
    answered = true;
    attempt.abort();
  });
  if ("kind" in opened) return opened;
  const { socket } = opened;
  raw = opened.raw;
  try {
    for (let sequence = 1; sequence <= options.count && !answered && !options.signal?.aborted; sequence++) {
      attempt = new AbortController();
      try {
        socket.send(echoRequest(family, sequence, token), address);
      } catch (err) {
        if (!NO_PATH.has(codeOf(err))) return { kind: "failed", reason: `icmp: ${messageOf(err)}` };
      }
      const signals = options.signal ? [options.signal, attempt.signal] : [attempt.signal];
      await sleep(options.timeoutMs, AbortSignal.any(signals));
    }
    return answered ? { kind: "answered" } : { kind: "silent" };
  } finally {
    socket.close();
  }
}
