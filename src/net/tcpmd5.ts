// TCP connections signed with RFC 2385's MD5 option (BGP peers' "password"). Linux signs every segment to an
// address that has a key on the socket (setsockopt TCP_MD5SIG) and drops every segment from it without the right
// signature before it reaches the socket: a host without the key gets no connection, not even a refusal, and
// cannot inject into or reset one. The key must be on the socket before its first SYN, and Node's net.connect makes
// and connects its socket in one call: so the sockets addon makes the socket, the key is set here, and net adopts
// the descriptor (new net.Socket({ fd })) and connects it as any socket. A listening socket made the same way holds
// one key per peer, which the connections it accepts inherit. Passwords are never logged nor put in errors.
import net from "node:net";
import { type Family, ipFamily, ipToBytes } from "./ip.ts";
import { Family as SocketFamily, openStream } from "./sockets.ts";

const SOL_SOCKET = 1;
const SO_REUSEADDR = 2;
const IPPROTO_TCP = 6;
const TCP_MD5SIG = 14;
const IPPROTO_IPV6 = 41;
const IPV6_V6ONLY = 26;
/** TCP_MD5SIG_MAXKEYLEN. */
export const MAX_PASSWORD_BYTES = 80;

/** Why a password cannot be a key (without repeating it), or undefined. */
export function passwordProblem(password: string): string | undefined {
  const length = Buffer.byteLength(password);
  if (length === 0) return "the TCP MD5 password is empty";
  if (length > MAX_PASSWORD_BYTES)
    return `the TCP MD5 password has ${length} bytes, more than Linux's ${MAX_PASSWORD_BYTES}`;
  return undefined;
}

/**
 * struct sockaddr_in or sockaddr_in6 of `ip` for a socket of `family`: an IPv4 address on an IPv6 socket (a
 * dual-stack listener's peer) is IPv4-mapped, as the kernel keys such connections.
 */
export function sockaddr(family: Family, ip: string, port = 0): Buffer {
  const bytes = ipToBytes(ip);
  if (family === 4) {
    if (bytes.length !== 4) throw new Error(`${ip} on an IPv4 socket`);
    const address = Buffer.alloc(16);
    address.writeUInt16LE(SocketFamily.INET, 0);
    address.writeUInt16BE(port, 2);
    bytes.copy(address, 4);
    return address;
  }
  const address = Buffer.alloc(28);
  address.writeUInt16LE(SocketFamily.INET6, 0);
  address.writeUInt16BE(port, 2);
  if (bytes.length === 4) {
    address.writeUInt16BE(0xffff, 18);
    bytes.copy(address, 20);
  } else bytes.copy(address, 8);
  return address;
}

/** struct tcp_md5sig: the key for `peer` on a socket of `family`; without a password, its removal (key length 0). */
export function md5Signature(family: Family, peer: string, password?: string): Buffer {
  const option = Buffer.alloc(216); // sockaddr_storage, flags, prefix length, key length, ifindex, key[80]
  sockaddr(family, peer).copy(option, 0);
  if (password !== undefined) {
    const problem = passwordProblem(password);
    if (problem) throw new Error(problem);
    option.writeUInt16LE(option.write(password, 136), 130);
  }
  return option;
}

function socketFamily(ip: string): Family {
  const family = ipFamily(ip);
  if (!family) throw new Error(`not an IP address: ${JSON.stringify(ip)}`);
  return family;
}

export interface ConnectOptions {
  host: string;
  port: number;
  localAddress?: string;
  password?: string;
}

/**
 * A connection as net.connect makes one, signed when a password is given. A socket the kernel refuses fails as a
 * connection does (an "error" then "close"), not by throwing.
 */
export function connectTcp({ host, port, localAddress, password }: ConnectOptions): net.Socket {
  let fd: number;
  try {
    const family = socketFamily(host);
    const stream = openStream(family === 4 ? SocketFamily.INET : SocketFamily.INET6);
    try {
      if (password !== undefined) stream.setOption(IPPROTO_TCP, TCP_MD5SIG, md5Signature(family, host, password));
    } catch (err) {
      stream.close();
      throw err;
    }
    fd = stream.fd;
  } catch (err) {
    const failed = new net.Socket();
    process.nextTick(() => failed.destroy(err as Error));
    return failed;
  }
  return new net.Socket({ fd }).connect({ host, port, ...(localAddress ? { localAddress } : {}) });
}

export interface TcpListener {
  server: net.Server;
  address(): net.AddressInfo;
  /** Signs connections with `peer` (past and future accepts); without a password, no longer. */
  setPassword(peer: string, password: string | undefined): void;
  close(): Promise<void>;
}

/**
 * A listening socket on `host` (an IPv6 one, "::" included, also takes IPv4 connections) that hands each connection
 * over paused: nothing is read until its taker resumes it.
 */
export async function listenTcp(
  { host, port }: { host: string; port: number },
  onConnection: (socket: net.Socket) => void,
): Promise<TcpListener> {
  const family = socketFamily(host);
  const stream = openStream(family === 4 ? SocketFamily.INET : SocketFamily.INET6);
  try {
    stream.setOption(SOL_SOCKET, SO_REUSEADDR, 1); // a restarted agent binds while its old connections linger
    if (family === 6) stream.setOption(IPPROTO_IPV6, IPV6_V6ONLY, 0);
    stream.bind(sockaddr(family, host, port));
  } catch (err) {
    stream.close();
    throw err;
  }
  const server = net.createServer({ pauseOnConnect: true }, onConnection);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ fd: stream.fd }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    server,
    address: () => server.address() as net.AddressInfo,
    setPassword(peer, password) {
      try {
        stream.setOption(IPPROTO_TCP, TCP_MD5SIG, md5Signature(family, peer, password));
      } catch (err) {
        // removing a key that was never set
        if (password !== undefined || (err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
