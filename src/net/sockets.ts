// Datagram sockets of any family (netlink, ICMP, packet) over our Node-API addon in native/sockets: each
// socket has a receiving thread of its own and no libuv handle, so the addon loads in any Node-API runtime.
// This module only types it; what is sent and read is built in the modules that speak each protocol. It also makes
// TCP sockets Node's net module then adopts (openStream): options such as TCP_MD5SIG must be set before connect()
// or listen(), which net does not let its callers reach (src/net/tcpmd5.ts).
import { createRequire } from "node:module";
import { ipFromBytes, ipToBytes } from "./ip.ts";

type Handle = { readonly socket: unique symbol };

interface Addon {
  open(family: number, type: number, protocol: number, onReceive: Receiver): Handle;
  bind(handle: Handle | number, address: Buffer): void;
  setOption(handle: Handle | number, level: number, name: number, value: number | Buffer): void;
  send(handle: Handle, data: Buffer, to: string | Buffer): void;
  ref(handle: Handle, keepAlive: boolean): void;
  close(handle: Handle): void;
  openStream(family: number): number;
  closeStream(fd: number): void;
}

/**
 * A received datagram with its sender's sockaddr, or a receive error (`code`: errno name; no data then) after
 * which the socket goes on receiving.
 */
export type Receiver = (error: NodeJS.ErrnoException | null, data: Buffer, source: Buffer) => void;

const SOL_SOCKET = 1;
const SO_ATTACH_FILTER = 26;

/** Linux's values. */
export const Family = { INET: 2, INET6: 10, NETLINK: 16, PACKET: 17 } as const;
export const SocketType = { DGRAM: 2, RAW: 3 } as const;

export interface Socket {
  bind(address: Buffer): void;
  /** setsockopt(); a number is passed as a C int. */
  setOption(level: number, name: number, value: number | Buffer): void;
  /**
   * SO_ATTACH_FILTER: a classic BPF program (struct sock_filter instructions, see bpfProgram) the kernel runs on
   * each datagram before queueing it; what it returns 0 for is dropped.
   */
  attachFilter(program: Buffer): void;
  /** A synchronous sendto(): `to` is a numeric IP address (IPv6 with a %zone) or a sockaddr. */
  send(data: Buffer, to: string | Buffer): void;
  /** Whether the open socket keeps the process alive; a new socket does not. */
  keepAlive(on: boolean): void;
  /** Idempotent; the socket's thread has ended when it returns, and nothing more is received. */
  close(): void;
}

let loaded: Addon | undefined;
const loadAddon = () => (loaded ??= createRequire(import.meta.url)("local-ccm-sockets") as Addon);

/** Throws (errno `code`: EPERM, EACCES, …) when the kernel refuses the socket, or when the addon is not built. */
export function openSocket(
  kind: { family: number; type: number; protocol: number },
  onReceive: Receiver,
): Socket {
  const addon = loadAddon();
  const handle = addon.open(kind.family, kind.type, kind.protocol, onReceive);
  return {
    bind: (address) => addon.bind(handle, address),
    setOption: (level, name, value) => addon.setOption(handle, level, name, value),
    attachFilter: (program) => addon.setOption(handle, SOL_SOCKET, SO_ATTACH_FILTER, program),
    send: (data, to) => addon.send(handle, data, to),
    keepAlive: (on) => addon.ref(handle, on),
    close: () => addon.close(handle),
  };
}

/** A TCP socket not yet connected or listening, for `new net.Socket({ fd })` or `server.listen({ fd })`. */
export interface StreamSocket {
  readonly fd: number;
  bind(address: Buffer): void;
  setOption(level: number, name: number, value: number | Buffer): void;
  /** For a socket never adopted by net (which closes what it adopted). */
  close(): void;
}

/** A non-blocking, close-on-exec TCP socket of `family` (Family.INET or INET6). */
export function openStream(family: number): StreamSocket {
  const addon = loadAddon();
  const fd = addon.openStream(family);
  return {
    fd,
    bind: (address) => addon.bind(fd, address),
    setOption: (level, name, value) => addon.setOption(fd, level, name, value),
    close: () => addon.closeStream(fd),
  };
}

/** One classic BPF instruction: struct sock_filter { u16 code; u8 jt; u8 jf; u32 k } (see bpf(4), filter.txt). */
export interface BpfInstruction {
  code: number;
  /** Instructions skipped when a jump's test holds / fails. */
  jt?: number;
  jf?: number;
  k: number;
}

/** Classic BPF opcodes this code uses. */
export const Bpf = {
  /** A = the byte at offset k. */
  LOAD_BYTE: 0x30,
  /** if A == k skip jt else skip jf. */
  JUMP_IF_EQUAL: 0x15,
  /** Accept k bytes of the datagram (0: drop it). */
  RETURN: 0x06,
} as const;

/** The instructions as the kernel reads them (machine byte order: little-endian on x64 and arm64). */
export function bpfProgram(instructions: BpfInstruction[]): Buffer {
  const program = Buffer.alloc(8 * instructions.length);
  instructions.forEach(({ code, jt = 0, jf = 0, k }, i) => {
    program.writeUInt16LE(code, 8 * i);
    program[8 * i + 2] = jt;
    program[8 * i + 3] = jf;
    program.writeUInt32LE(k >>> 0, 8 * i + 4);
  });
  return program;
}

/** SKF_NET_OFF: a LOAD_BYTE offset past this reads the IP header rather than the datagram (linux/filter.h). */
export const BPF_NETWORK_HEADER = -0x100000;

/** struct sockaddr_in / sockaddr_in6 of a numeric IP address and a port. */
export function ipSockaddr(address: string, port: number): Buffer {
  const bytes = ipToBytes(address);
  const sockaddr = Buffer.alloc(bytes.length === 4 ? 16 : 28);
  sockaddr.writeUInt16LE(bytes.length === 4 ? Family.INET : Family.INET6, 0);
  sockaddr.writeUInt16BE(port, 2);
  bytes.copy(sockaddr, bytes.length === 4 ? 4 : 8);
  return sockaddr;
}

/** The address and port of a sockaddr_in / sockaddr_in6 (a received datagram's source); undefined for others. */
export function sockaddrIp(sockaddr: Buffer): { address: string; port: number } | undefined {
  if (sockaddr.length < 16) return undefined;
  const family = sockaddr.readUInt16LE(0);
  if (family === Family.INET) return { address: ipFromBytes(sockaddr.subarray(4, 8)), port: sockaddr.readUInt16BE(2) };
  if (family === Family.INET6 && sockaddr.length >= 24)
    return { address: ipFromBytes(sockaddr.subarray(8, 24)), port: sockaddr.readUInt16BE(2) };
  return undefined;
}
