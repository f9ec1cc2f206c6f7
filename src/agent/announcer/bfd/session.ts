// The UDP adapter of BFD single hop (RFC 5881): for one local address, a listener on port 3784 and one sender bound
// to a port in 49152-65535 (§4: the same for every packet of a session), and the sessions to peers on that link;
// every decision is fsm.ts's. Packets are sent with TTL (hop limit) 255, and the listener's kernel filter drops
// any received with another (§5, GTSM: a packet from beyond the link cannot reach the session). Node's dgram can
// neither read a received TTL nor attach a filter, so both sockets are the sockets addon's.
import { type ControlPacket, decodeControl, encodeControl, isDropped } from "../../../net/bfd/control.ts";
import { ipFamily } from "../../../net/ip.ts";
import {
  Bpf,
  BPF_NETWORK_HEADER,
  bpfProgram,
  Family,
  ipSockaddr,
  openSocket,
  type Socket,
  sockaddrIp,
  SocketType,
} from "../../../net/sockets.ts";
import { runMachine } from "../fsm-runner.ts";
import {
  type BfdConfig,
  type BfdDecision,
  type BfdEvent,
  type BfdSessionState,
  decideBfd,
  initialBfdState,
} from "./fsm.ts";

export const BFD_PORT = 3784;
const SOURCE_PORTS = { first: 49152, count: 16384 };
const GTSM_TTL = 255;
const IPPROTO_IP = 0;
const IP_TTL = 2;
const IPPROTO_IPV6 = 41;
const IPV6_UNICAST_HOPS = 16;
const IPPROTO_UDP = 17;

/** Who hears of the session leaving and regaining Up: the BGP session to the same peer (BgpSession.bfd). */
export interface BfdClient {
  bfd(up: boolean): void;
}

export interface BfdSessionOptions {
  peerAddress: string;
  config: BfdConfig;
  client?: BfdClient;
  /** Every decision, for the log (rule, reason) and for tests. */
  onDecision?: (decision: BfdDecision, event: BfdEvent) => void;
}

export interface BfdSession {
  /** New timers: applied with a Poll Sequence, without taking the session down. */
  configure(config: BfdConfig): void;
  state(): BfdSessionState;
  /** Sends AdminDown and ends the session. */
  stop(): void;
  /** Ends the session without a word: the peer detects it, as after a crash (the "abandon" event). */
  abandon(): void;
}

export interface BfdEndpoint {
  session(options: BfdSessionOptions): BfdSession;
  /** Packets refused before reaching a session, by rule (§6.8.6's checks, "unknown-session", "receive-error"). */
  dropped(): ReadonlyMap<string, number>;
  /** Stops every session (AdminDown) and closes the sockets. */
  close(): void;
}

/**
 * A classic BPF program that keeps only datagrams whose IP header says TTL (IPv4, byte 8) or hop limit (IPv6,
 * byte 7) 255: run by the kernel before the datagram is queued, so a remote sender costs us nothing.
 */
function gtsmFilter(family: 4 | 6): Buffer {
  return bpfProgram([
    { code: Bpf.LOAD_BYTE, k: BPF_NETWORK_HEADER + (family === 4 ? 8 : 7) },
    { code: Bpf.JUMP_IF_EQUAL, k: GTSM_TTL, jt: 0, jf: 1 },
    { code: Bpf.RETURN, k: 0xffff },
    { code: Bpf.RETURN, k: 0 },
  ]);
}

/** Throws (errno `code`) when a socket cannot be had: the address is not ours, or port 3784 is taken. */
export function openBfdEndpoint(localAddress: string, random: () => number = Math.random): BfdEndpoint {
  const family = ipFamily(localAddress);
  if (!family) throw new Error(`BFD: not an IP address: ${JSON.stringify(localAddress)}`);
  const kind = { family: family === 4 ? Family.INET : Family.INET6, type: SocketType.DGRAM, protocol: IPPROTO_UDP };
  const sessions = new Map<number, Driver>();
  const dropped = new Map<string, number>();
  const count = (rule: string) => dropped.set(rule, (dropped.get(rule) ?? 0) + 1);

  const listener = openSocket(kind, (error, data, source) => {
    if (error) return void count("receive-error"); // the socket goes on receiving
    const from = sockaddrIp(source);
    const packet = decodeControl(data);
    if (isDropped(packet)) return void count(packet.drop);
    // §6.8.6: a packet names our session by its discriminator or, before it knows it, comes from the session's peer
    const driver =
      packet.yourDiscriminator !== 0
        ? sessions.get(packet.yourDiscriminator)
        : [...sessions.values()].find((d) => d.peerAddress === from?.address);
    if (!driver || driver.peerAddress !== from?.address) return void count("unknown-session");
    driver.receive(packet);
  });
  let sender: Socket | undefined;
  try {
    listener.attachFilter(gtsmFilter(family));
    listener.bind(ipSockaddr(localAddress, BFD_PORT));
    sender = bindSender(kind, family, localAddress, random);
  } catch (err) {
    listener.close();
    throw err;
  }
  const send = sender;

  function newDiscriminator(): number {
    for (;;) {
      const discriminator = 1 + Math.floor(random() * 0xfffffffe);
      if (!sessions.has(discriminator)) return discriminator;
    }
  }

  return {
    session(options) {
      const driver = startDriver(options, newDiscriminator(), send, random, (d) =>
        sessions.delete(d.discriminator),
      );
      sessions.set(driver.discriminator, driver);
      return driver.session;
    },
    dropped: () => dropped,
    close() {
      for (const driver of [...sessions.values()]) driver.session.stop();
      listener.close();
      send.close();
    },
  };
}

function bindSender(
  kind: { family: number; type: number; protocol: number },
  family: 4 | 6,
  localAddress: string,
  random: () => number,
): Socket {
  const socket = openSocket(kind, () => {}); // nothing is sent to it: the peer sends to port 3784
  try {
    if (family === 4) socket.setOption(IPPROTO_IP, IP_TTL, GTSM_TTL);
    else socket.setOption(IPPROTO_IPV6, IPV6_UNICAST_HOPS, GTSM_TTL);
    for (let attempt = 0; ; attempt++) {
      const port = SOURCE_PORTS.first + Math.floor(random() * SOURCE_PORTS.count);
      try {
        socket.bind(ipSockaddr(localAddress, port));
        return socket;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EADDRINUSE" || attempt >= 32) throw err;
      }
    }
  } catch (err) {
    socket.close();
    throw err;
  }
}

interface Driver {
  discriminator: number;
  peerAddress: string;
  receive(packet: ControlPacket): void;
  session: BfdSession;
}

function startDriver(
  options: BfdSessionOptions,
  discriminator: number,
  sender: Socket,
  random: () => number,
  forget: (driver: Driver) => void,
): Driver {
  const { peerAddress, client, onDecision } = options;
  const to = ipSockaddr(peerAddress, BFD_PORT);
  let config = options.config;
  const machine = runMachine({
    initial: initialBfdState(config, discriminator),
    decide: (current: BfdSessionState, event: BfdEvent) => decideBfd(config, current, event, random()),
    onDecision,
    perform(action) {
      switch (action.type) {
        case "send":
          try {
            sender.send(encodeControl(action.packet), to);
          } catch {
            // no route or a full buffer: the peer's detection, not ours, decides what a lost packet means
          }
          break;
        case "up":
          client?.bfd(true);
          break;
        case "down":
          if (action.pathFailure) client?.bfd(false);
          break;
      }
    },
  });

  const driver: Driver = {
    discriminator,
    peerAddress,
    receive: (packet) => machine.apply({ type: "received", packet }),
    session: {
      configure(next) {
        config = next;
        machine.apply({ type: "configure", config: next });
      },
      state: machine.state,
      stop() {
        machine.apply({ type: "stop" });
        forget(driver);
      },
      abandon() {
        machine.apply({ type: "abandon" });
        forget(driver);
      },
    },
  };
  machine.apply({ type: "start" });
  return driver;
}
