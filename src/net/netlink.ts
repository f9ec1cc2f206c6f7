// The kernel adapter for node address detection: route-source lookups and address listings over one
// long-lived rtnetlink request socket, and change notifications over one subscription socket per watch.
// NETLINK_ROUTE requests and these multicast groups need no privilege.
import { getSystemErrorName } from "node:util";
import {
  CHANGE_GROUPS,
  decodeMessages,
  defaultRouteGateways,
  dumpQuery,
  encodeMessage,
  errorCode,
  Flags,
  hostAddress,
  type HostAddress,
  hostLink,
  type HostLink,
  type Message,
  MessageType,
  routeQuery,
  routeSource,
} from "./rtnetlink.ts";
import { Family, openSocket, type Socket, SocketType } from "./sockets.ts";

export interface Netlink {
  /** The source address the kernel would pick to reach `target` (RTM_GETROUTE: rules and tables honoured, nothing sent); undefined when there is no route or no usable source. */
  routeSource(target: string): Promise<string | undefined>;
  /** Every IPv4 and IPv6 address of the host: IPv4 first, then by interface index, then in the kernel's order on each interface. */
  listAddresses(): Promise<HostAddress[]>;
  /** Every link of the host, by interface index. */
  listLinks(): Promise<HostLink[]>;
  /** The next hops of the host's default routes (IPv4 and IPv6, every table), unique, in the kernel's order. */
  listDefaultGateways(): Promise<string[]>;
  /** Calls onChange once per burst of link, address, route or rule changes (IPv4 and IPv6), debounceMs after the burst's first change. The open watch keeps the process alive until closed. */
  watchChanges(onChange: () => void, debounceMs: number): { close(): void };
  /** Closes the sockets, open watches included; pending requests fail. */
  close(): void;
}

/** A kernel answer to a request: `code` is the errno name (ENETUNREACH, …). */
export class NetlinkError extends Error {
  code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "NetlinkError";
    this.code = code;
  }
}

const NETLINK_ROUTE = 0;
const SOL_NETLINK = 270;
const NETLINK_ADD_MEMBERSHIP = 1;
/** sockaddr_nl of the kernel (port 0, no groups); bound to it, a socket gets a port the kernel picks. */
const KERNEL = Buffer.from([Family.NETLINK, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
const REQUEST_TIMEOUT_MS = 5000;
const DUMP_ATTEMPTS = 3;
/** How the kernel answers a lookup with no usable route: none, `unreachable`, `prohibit`, `blackhole`. */
const NO_ROUTE = new Set(["ENETUNREACH", "EHOSTUNREACH", "EACCES", "EINVAL"]);
const CHANGE_TYPES = new Set<number>([
  MessageType.NEWLINK,
  MessageType.DELLINK,
  MessageType.NEWADDR,
  MessageType.DELADDR,
  MessageType.NEWROUTE,
  MessageType.DELROUTE,
  MessageType.NEWRULE,
  MessageType.DELRULE,
]);

export function openNetlink(): Netlink {
  const requests = openRequester();
  const watches = new Set<{ close(): void }>();
  const listLinks = async () =>
    (await requests.dump(MessageType.GETLINK, MessageType.NEWLINK))
      .map((message) => hostLink(message.body))
      .filter((link) => link !== undefined)
      .sort((a, b) => a.index - b.index);
  return {
    async routeSource(target) {
      try {
        const { messages } = await requests.send(MessageType.GETROUTE, Flags.REQUEST, routeQuery(target));
        const reply = messages.find((message) => message.type === MessageType.NEWROUTE);
        return reply && routeSource(reply.body);
      } catch (error) {
        if (error instanceof NetlinkError && NO_ROUTE.has(error.code)) return undefined;
        throw error;
      }
    },

    async listAddresses() {
      const addresses = await requests.dump(MessageType.GETADDR, MessageType.NEWADDR);
      // Links after addresses: an interface that vanished in between takes its addresses with it.
      const names = new Map((await listLinks()).map((link) => [link.index, link.name]));
      return addresses
        .map((message) => hostAddress(message.body, names))
        .filter((address) => address !== undefined)
        .sort((a, b) => a.family - b.family || a.interfaceIndex - b.interfaceIndex);
    },

    listLinks,

    async listDefaultGateways() {
      const routes = await requests.dump(MessageType.GETROUTE, MessageType.NEWROUTE);
      return [...new Set(routes.flatMap((message) => defaultRouteGateways(message.body)))];
    },

    watchChanges(onChange, debounceMs) {
      const watch = openWatch(onChange, debounceMs);
      watches.add(watch);
      return {
        close() {
          watches.delete(watch);
          watch.close();
        },
      };
    },

    close() {
      requests.close();
      for (const watch of watches) watch.close();
      watches.clear();
    },
  };
}

/** Calls `fn` once, `delayMs` after the first trigger of a burst: later triggers join it, so a steady stream of changes cannot postpone it. */
export function coalesce(fn: () => void, delayMs: number): { trigger(): void; cancel(): void } {
  let timer: NodeJS.Timeout | undefined;
  return {
    trigger() {
      timer ??= setTimeout(() => {
        timer = undefined;
        fn();
      }, delayMs);
    },
    cancel() {
      clearTimeout(timer);
      timer = undefined;
    },
  };
}

/** `negativeErrno` as the kernel sends it, e.g. -101. */
function errnoError(negativeErrno: number): NetlinkError {
  const code = getSystemErrorName(negativeErrno);
  return new NetlinkError(code, `netlink: ${code}`);
}

interface Pending {
  messages: Message[];
  interrupted: boolean;
  resolve(reply: { messages: Message[]; interrupted: boolean }): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

type DumpQuery = typeof MessageType.GETADDR | typeof MessageType.GETLINK | typeof MessageType.GETROUTE;

/** One request socket, opened on first use and replaced after a socket error; referenced only while requests are pending. */
function openRequester() {
  let socket: Socket | undefined;
  let seq = 0;
  const pending = new Map<number, Pending>();

  const finish = (id: number, outcome: Error | undefined) => {
    const request = pending.get(id);
    if (!request) return;
    pending.delete(id);
    clearTimeout(request.timer);
    if (pending.size === 0) socket?.keepAlive(false);
    if (outcome) request.reject(outcome);
    else request.resolve({ messages: request.messages, interrupted: request.interrupted });
  };

  const receive = (message: Message) => {
    const request = pending.get(message.seq);
    if (!request) return; // the late answer of a request that timed out
    if (message.flags & Flags.DUMP_INTR) request.interrupted = true;
    if (message.type === MessageType.ERROR || message.type === MessageType.DONE) {
      const code = errorCode(message);
      return finish(message.seq, code < 0 ? errnoError(code) : undefined);
    }
    if (message.type === MessageType.NOOP) return;
    request.messages.push(message);
    if (!(message.flags & Flags.MULTI)) finish(message.seq, undefined);
  };

  const connect = (): Socket => {
    const fresh = openRouteSocket(
      [],
      (datagram) => {
        for (const message of decodeMessages(datagram)) receive(message);
      },
      (error) => {
        // Replies may be lost (ENOBUFS): fail what waits, start afresh next time.
        fresh.close();
        if (socket === fresh) socket = undefined;
        for (const id of [...pending.keys()]) finish(id, error);
      },
    );
    return fresh;
  };

  const send = (type: number, flags: number, body: Buffer) =>
    new Promise<{ messages: Message[]; interrupted: boolean }>((resolve, reject) => {
      seq = (seq + 1) >>> 0;
      const id = seq;
      const timer = setTimeout(() => finish(id, new Error("netlink request timed out")), REQUEST_TIMEOUT_MS);
      pending.set(id, { messages: [], interrupted: false, resolve, reject, timer });
      try {
        socket ??= connect();
        socket.keepAlive(true);
        socket.send(encodeMessage({ type, flags, seq: id, body }), KERNEL);
      } catch (error) {
        finish(id, error as Error);
      }
    });

  /** A consistent dump (retried when the kernel flags it as interrupted by a change) of the messages of one type. */
  const dumpNow = async (query: DumpQuery, type: number): Promise<Message[]> => {
    let reply = await send(query, Flags.REQUEST | Flags.DUMP, dumpQuery(query));
    for (let attempt = 1; reply.interrupted && attempt < DUMP_ATTEMPTS; attempt++)
      reply = await send(query, Flags.REQUEST | Flags.DUMP, dumpQuery(query));
    return reply.messages.filter((message) => message.type === type);
  };
  // The kernel runs one dump at a time per socket and answers a second one EBUSY: dumps wait for each other.
  let dumps: Promise<unknown> = Promise.resolve();

  return {
    send,
    dump(query: DumpQuery, type: number): Promise<Message[]> {
      const next = dumps.then(() => dumpNow(query, type));
      dumps = next.catch(() => undefined);
      return next;
    },
    close() {
      const closing = socket;
      socket = undefined;
      closing?.close();
      for (const id of [...pending.keys()]) finish(id, new Error("netlink closed"));
    },
  };
}

/** A subscription socket; on a socket error (ENOBUFS: notifications were dropped) it reports a change and resubscribes on a fresh socket. */
function openWatch(onChange: () => void, debounceMs: number): { close(): void } {
  const changed = coalesce(onChange, debounceMs);
  let socket: Socket | undefined;
  const subscribe = (): Socket => {
    const fresh = openRouteSocket(
      Object.values(CHANGE_GROUPS),
      (datagram) => {
        if (decodeMessages(datagram).some((message) => CHANGE_TYPES.has(message.type))) changed.trigger();
      },
      () => {
        fresh.close();
        if (socket !== fresh) return;
        socket = subscribe();
        changed.trigger();
      },
    );
    fresh.keepAlive(true);
    return fresh;
  };
  socket = subscribe();
  return {
    close() {
      changed.cancel();
      socket?.close();
      socket = undefined;
    },
  };
}

/**
 * A NETLINK_ROUTE socket on a port the kernel picks, in the given multicast groups, passing on only the kernel's
 * datagrams (sender port 0).
 */
function openRouteSocket(
  groups: number[],
  onDatagram: (datagram: Buffer) => void,
  onError: (error: Error) => void,
): Socket {
  const kind = { family: Family.NETLINK, type: SocketType.RAW, protocol: NETLINK_ROUTE };
  const socket = openSocket(kind, (error, data, source) => {
    if (error) onError(error);
    else if (source.readUInt32LE(4) === 0) onDatagram(data); // nl_pid: 0 in either byte order
  });
  try {
    socket.bind(KERNEL);
    for (const group of groups) socket.setOption(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group);
  } catch (error) {
    socket.close();
    throw error;
  }
  return socket;
}
