// ICMP echo ("ping") of one address, over the Node-API addon in native/icmp. A raw socket needs
// CAP_NET_RAW only (not root); without it an unprivileged ping socket is used where
// net.ipv4.ping_group_range admits our group. When neither is permitted, or the addon is not
// built, ICMP is "unavailable": a fact for the caller to log once, never a sign of a dead host.
import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { isIP } from "node:net";
import { sleep } from "../time/backoff.ts";

type Handle = { readonly icmpSocket: unique symbol };

interface Addon {
  open(family: 4 | 6, dgram: boolean, onMessage: (data: Buffer) => void): Handle;
  send(handle: Handle, address: string, packet: Buffer): void;
  close(handle: Handle): void;
}

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

let loaded: Addon | string | undefined;

function addon(): Addon | string {
  if (loaded === undefined) {
    try {
      loaded = createRequire(import.meta.url)("local-ccm-icmp") as Addon;
    } catch (err) {
      loaded = `icmp unavailable: addon not built (${(err as Error).message.split("\n")[0]})`;
    }
  }
  return loaded;
}

const codeOf = (err: unknown) => (err as NodeJS.ErrnoException).code ?? "";
const messageOf = (err: unknown) => (err as Error).message;

/** A raw socket if permitted, else a ping socket, else why ICMP is unavailable. */
function openSocket(
  lib: Addon,
  family: 4 | 6,
  onMessage: (data: Buffer) => void,
): { handle: Handle; raw: boolean } | EchoOutcome {
  try {
    return { handle: lib.open(family, false, onMessage), raw: true };
  } catch (err) {
    if (!PERMISSION.has(codeOf(err))) return { kind: "failed", reason: `icmp: ${messageOf(err)}` };
  }
  try {
    return { handle: lib.open(family, true, onMessage), raw: false };
  } catch (err) {
    if (!PERMISSION.has(codeOf(err))) return { kind: "failed", reason: `icmp: ${messageOf(err)}` };
    return {
      kind: "unavailable",
      reason:
        "icmp unavailable: no raw socket (needs CAP_NET_RAW) and no ping socket (group not in net.ipv4.ping_group_range)",
    };
  }
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
  const lib = addon();
  if (typeof lib === "string") return { kind: "unavailable", reason: lib };

  const token = randomBytes(16);
  let answered = false;
  let raw = false;
  let attempt = new AbortController();
  const socket = openSocket(lib, family, (data) => {
    if (answered || !isOurReply(data, family, raw, token)) return;
    answered = true;
    attempt.abort();
  });
  if ("kind" in socket) return socket;
  raw = socket.raw;
  try {
    for (let sequence = 1; sequence <= options.count && !answered && !options.signal?.aborted; sequence++) {
      attempt = new AbortController();
      try {
        lib.send(socket.handle, address, echoRequest(family, sequence, token));
      } catch (err) {
        if (!NO_PATH.has(codeOf(err))) return { kind: "failed", reason: `icmp: ${messageOf(err)}` };
      }
      const signals = options.signal ? [options.signal, attempt.signal] : [attempt.signal];
      await sleep(options.timeoutMs, AbortSignal.any(signals));
    }
    return answered ? { kind: "answered" } : { kind: "silent" };
  } finally {
    lib.close(socket.handle);
  }
}
