// The socket adapter of one BGP session: a TCP connection to the peer (node:net, signed with TCP MD5 when the
// peer has a password), the peer's own connection while a collision is resolved, the session's timers, and the
// byte stream cut into messages; every decision is fsm.ts's. A hostile peer costs at most one 4096-byte buffer and
// bounded work per chunk read: a bad header is refused before its body is awaited.
import type net from "node:net";
import { decodeMessage, encodeMessage, splitMessages } from "../../../net/bgp/message.ts";
import { connectTcp, passwordProblem } from "../../../net/tcpmd5.ts";
import { runMachine } from "../fsm-runner.ts";
import {
  type Decision,
  decide,
  initialState,
  type SessionConfig,
  type SessionEvent,
  type SessionState,
} from "./fsm.ts";
import { type Route } from "./ribout.ts";

export const BGP_PORT = 179;
/** How long a closing connection may take to flush its last NOTIFICATION before it is cut. */
const LINGER_MS = 1000;

export interface SessionOptions {
  config: SessionConfig;
  peerAddress: string;
  peerPort?: number;
  /** The source address of our connection (the node's address towards the peer). */
  localAddress?: string;
  /** TCP MD5 (RFC 2385) key of our connection; the listener holds it for the peer's. Never logged. */
  password?: string;
  /** Every decision, for the log (rule, reason) and for tests. */
  onDecision?: (decision: Decision, event: SessionEvent) => void;
  random?: () => number;
}

export interface BgpSession {
  /** The routes the peer should have: the differences go out as UPDATEs. */
  setRoutes(routes: readonly Route[]): void;
  /** A connection the peer made to us (from a listener that matched its address), paused and unread. */
  offer(socket: net.Socket): void;
  state(): SessionState;
  /**
   * Sends Cease when a session is up, closes, and stops retrying. `restarting` (graceful restart): closes without
   * Cease, so that the peer keeps our routes until the next process's End-of-RIB or the restart time.
   */
  stop(restarting?: boolean): void;
  /** The BFD session to the peer left Up (false: the session goes at once) or came Up again (true: it reconnects). */
  bfd(up: boolean): void;
}

export function startSession(options: SessionOptions): BgpSession {
  const { config, peerAddress, peerPort = BGP_PORT, localAddress, password, onDecision } = options;
  const random = options.random ?? Math.random;
  const problem = password === undefined ? undefined : passwordProblem(password);
  if (problem) throw new Error(`BGP peer ${peerAddress}: ${problem}`);
  let socket: net.Socket | undefined;
  let incoming: net.Socket | undefined;
  const { apply, state } = runMachine({
    initial: initialState(),
    decide: (current: SessionState, event: SessionEvent) => decide(config, current, event, random()),
    onDecision,
    perform(action) {
      switch (action.type) {
        case "connect":
          socket = connectTcp({ host: peerAddress, port: peerPort, localAddress, password });
          attach(socket, true);
          break;
        case "accept":
          drop(socket);
          socket = incoming;
          incoming = undefined;
          break;
        case "send":
          (action.on === "incoming" ? incoming : socket)?.write(encodeMessage(action.message));
          break;
        case "close":
          if (action.on === "incoming") {
            drop(incoming);
            incoming = undefined;
          } else {
            drop(socket);
            socket = undefined;
          }
          break;
      }
    },
  });

  /** Ends a connection: what was written (a NOTIFICATION) is flushed, and the socket cut if that takes too long. */
  function drop(old: net.Socket | undefined) {
    if (!old) return;
    old.removeAllListeners("data");
    old.end();
    setTimeout(() => old.destroy(), LINGER_MS).unref();
  }

  /** Events of a connection name the one they are on: the session's, the peer's waiting one, or none (closed). */
  const role = (connection: net.Socket) =>
    connection === socket ? {} : connection === incoming ? ({ on: "incoming" } as const) : undefined;

  function attach(next: net.Socket, outgoing: boolean) {
    next.setNoDelay(true);
    let pending = Buffer.alloc(0);
    if (outgoing) next.once("connect", () => socket === next && apply({ type: "connected" }));
    next.on("data", (chunk: Buffer) => {
      const { messages, rest, error } = splitMessages(pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk);
      pending = Buffer.from(rest); // a copy: the chunk is not kept alive by a few bytes of it
      for (const message of messages) {
        const on = role(next);
        if (!on) return; // a decision closed this connection: the rest is not read
        apply({ type: "received", message: decodeMessage(message), ...on });
      }
      const on = role(next);
      if (error && on) apply({ type: "received", message: error, ...on });
    });
    let failure = "the peer closed the connection";
    next.on("error", (err) => (failure = err.message)); // "close" follows
    next.once("close", () => {
      const on = role(next);
      if (on?.on === "incoming") incoming = undefined;
      if (on) apply({ type: "closed", reason: failure, ...on });
    });
  }

  apply({ type: "start" });
  return {
    setRoutes: (routes) => apply({ type: "routes", routes }),
    offer(peerSocket) {
      // a peer has one connection of its own at a time: one still waiting is given up
      if (incoming) {
        const old = incoming;
        incoming = undefined;
        old.destroy();
        apply({ type: "closed", reason: "the peer connected again", on: "incoming" });
      }
      incoming = peerSocket;
      attach(peerSocket, false);
      apply({ type: "incoming" });
      if (role(peerSocket)) peerSocket.resume(); // read only once the session kept it
    },
    state,
    stop: (restarting) => apply({ type: "stop", restarting: restarting === true }),
    bfd: (up) => apply({ type: "bfd", up }),
  };
}
