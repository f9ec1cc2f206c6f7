// One BGP session, as a pure state machine: RFC 4271 §8's FSM cut down to what an export-only speaker needs. We
// connect to the peer (or take its connection when we have none), exchange OPENs, keep the session with
// KEEPALIVEs and the negotiated hold time, send the RIB-out's differences, and on any error send the NOTIFICATION
// that names it, close, and try again after a backoff with jitter. When both sides connect at once, the collision
// is resolved as RFC 4271 §6.8 says as soon as the peer's identifier is known: the connection opened by the speaker
// with the higher BGP identifier survives, the other is closed with Cease/Connection Collision Resolution (see
// `incoming`). Routes the peer sends are validated (the wire reader) and ignored. `decide` returns the next state,
// the actions for the socket adapter (session.ts), and a rule id and reason for the log.
import { type BgpError, notification, notificationName } from "../../../net/bgp/errors.ts";
import { type Message, type Open } from "../../../net/bgp/message.ts";
import { endOfRib, type Update } from "../../../net/bgp/update.ts";
import { type Family, ipToBytes } from "../../../net/ip.ts";
import type { TimerAction, TimerEvent } from "../fsm-runner.ts";
import { type Advertised, planUpdates, type Route } from "./ribout.ts";

export interface SessionConfig {
  myAsn: number;
  peerAsn: number;
  /** Our BGP identifier (a dotted quad; the node's IPv4 address, or one derived from its name when it has none). */
  routerId: string;
  /** Seconds: 0 (no keepalives, no hold timer) or at least 3. */
  holdTime: number;
  /** Seconds between KEEPALIVEs; a third of the negotiated hold time when unset or longer than that. */
  keepaliveTime?: number;
  families: Family[];
  /** Graceful restart as restarting speaker (RFC 4724); `restarting` sets the R bit in the first OPEN. */
  gracefulRestart?: { restartTime: number; restarting: boolean };
}

export type Phase = "idle" | "connecting" | "open-sent" | "open-confirm" | "established" | "stopped";
export type Timer = "retry" | "hold" | "keepalive";

export interface Negotiated {
  holdTime: number;
  keepaliveTime: number;
  families: Family[];
  peer: Open;
}

export interface SessionState {
  phase: Phase;
  /** Sessions that failed in a row: the backoff's exponent. */
  failures: number;
  /** Whether a session came up since the process started: the R bit is set only before. */
  established: boolean;
  negotiated?: Negotiated;
  /** The routes the peer should have. */
  desired: readonly Route[];
  /** What the peer has been told in this session. */
  advertised: Advertised;
  /** Whether the session's connection is one the peer opened (false: ours, or none). */
  accepted: boolean;
  /**
   * A second connection, opened by the peer while ours was in open-sent: we sent our OPEN on it and wait for the
   * peer's identifier (from an OPEN on either connection) to resolve the collision.
   */
  incoming: boolean;
}

export type SessionEvent =
  | { type: "start" }
  /**
   * Ends the session for good: Cease, then close. `restarting`: this process is going and another comes (graceful
   * restart, RFC 4724 §4.1): no Cease, so that the peer keeps our routes for the restart time.
   */
  | { type: "stop"; restarting?: boolean }
  /** Our connection to the peer is up. */
  | { type: "connected" }
  /** The peer connected to us. */
  | { type: "incoming" }
  /** `on: "incoming"`: of the peer's connection that waits for collision resolution; else the session's. */
  | { type: "closed"; reason: string; on?: "incoming" }
  | { type: "received"; message: Message | BgpError; on?: "incoming" }
  | TimerEvent<Timer>
  | { type: "routes"; routes: readonly Route[] }
  /** The BFD session to the peer left Up (false) or came Up again (true). */
  | { type: "bfd"; up: boolean };

export type SessionAction =
  | { type: "connect" }
  /** The peer's connection becomes the session's; ours, if any, is closed (after what was sent on it). */
  | { type: "accept" }
  /** `on: "incoming"`: on the peer's connection that waits (or was just offered); else on the session's. */
  | { type: "send"; message: Message; on?: "incoming" }
  | { type: "close"; on?: "incoming" }
  | TimerAction<Timer>;

export interface Decision {
  state: SessionState;
  actions: SessionAction[];
  rule: string;
  reason: string;
}

/** RFC 4271 §10's "large value" for the hold timer until OPENs are exchanged; also the connect timeout's bound. */
export const OPEN_HOLD_TIME = 240;
export const CONNECT_TIMEOUT = 30;
const BACKOFF_BASE = 1;
export const BACKOFF_MAX = 60;

export function initialState(): SessionState {
  return {
    phase: "idle",
    failures: 0,
    established: false,
    desired: [],
    advertised: new Map(),
    accepted: false,
    incoming: false,
  };
}

/** Arms a timer: BGP counts its timers in seconds (RFC 4271), the runner in milliseconds. */
const arm = (timer: Timer, seconds: number): SessionAction => ({ type: "arm", timer, ms: seconds * 1000 });

/** Seconds before the next attempt after `failures` failures in a row: doubling from 1 s to 60 s, ±25 % jitter. */
export function backoffSeconds(failures: number, jitter: number): number {
  const base = Math.min(BACKOFF_MAX, BACKOFF_BASE * 2 ** Math.max(0, failures - 1));
  return base * (0.75 + 0.5 * jitter);
}

function openMessage(config: SessionConfig, state: SessionState): Message {
  const gr = config.gracefulRestart;
  return {
    type: "open",
    open: {
      asn: config.myAsn,
      holdTime: config.holdTime,
      identifier: config.routerId,
      capabilities: {
        fourOctetAs: true,
        families: config.families,
        routeRefresh: true,
        ...(gr && {
          gracefulRestart: {
            restarting: gr.restarting && !state.established,
            restartTime: gr.restartTime,
            // our data plane (the node's own forwarding) outlives the speaker
            families: config.families.map((family) => ({ family, forwarding: true })),
          },
        }),
      },
    },
  };
}

/** Why the peer's OPEN is refused (the NOTIFICATION), or what the session negotiates with it. */
export function checkOpen(config: SessionConfig, open: Open): Negotiated | BgpError {
  const refuse = (subcode: Parameters<typeof notification<"open">>[1], reason: string, data?: Buffer): BgpError => ({
    notification: notification("open", subcode, data),
    reason,
    treatAsWithdraw: false,
  });
  if (!open.capabilities.fourOctetAs)
    return refuse(
      "unsupported-capability",
      "the peer does not offer 4-octet ASNs (RFC 6793)",
      Buffer.from([65, 4, 0, 0, 0, 0]),
    );
  if (open.asn !== config.peerAsn) return refuse("bad-peer-as", `peer ASN ${open.asn}, expected ${config.peerAsn}`);
  if (open.identifier === config.routerId)
    return refuse("bad-bgp-identifier", `peer BGP identifier ${open.identifier} is ours`);
  // a peer without multiprotocol capabilities speaks IPv4 unicast only (RFC 4760 §8)
  const offered = open.capabilities.families.length > 0 ? open.capabilities.families : [4];
  const families = config.families.filter((family) => offered.includes(family));
  if (families.length === 0)
    return refuse("unsupported-capability", `no family in common (ours ${config.families}, the peer's ${offered})`);
  const holdTime = Math.min(config.holdTime, open.holdTime);
  const third = Math.floor(holdTime / 3);
  const keepaliveTime = config.keepaliveTime ? Math.min(config.keepaliveTime, third) : third;
  return { holdTime, keepaliveTime, families, peer: open };
}

const disarmAll: SessionAction[] = [
  { type: "disarm", timer: "hold" },
  { type: "disarm", timer: "keepalive" },
];

/** Close and try again later: every failure path ends here. */
function fail(
  state: SessionState,
  jitter: number,
  rule: string,
  reason: string,
  send?: BgpError["notification"],
): Decision {
  const notify: SessionAction[] = send ? [{ type: "send", message: { type: "notification", notification: send } }] : [];
  // the peer's connection, which has our OPEN already, carries on in place of the one that failed
  if (state.incoming)
    return {
      state: { ...state, phase: "open-sent", negotiated: undefined, accepted: true, incoming: false },
      actions: [
        ...notify,
        { type: "accept" },
        { type: "disarm", timer: "keepalive" },
        arm("hold", OPEN_HOLD_TIME),
      ],
      rule,
      reason: `${reason}; carried on with the peer's own connection`,
    };
  const failures = state.failures + 1;
  const seconds = backoffSeconds(failures, jitter);
  return {
    state: { ...state, phase: "idle", failures, negotiated: undefined, advertised: new Map(), accepted: false },
    actions: [...notify, { type: "close" }, ...disarmAll, arm("retry", seconds)],
    rule,
    reason: `${reason}; next attempt in ${seconds.toFixed(1)} s`,
  };
}

function keep(state: SessionState, rule: string, reason: string, actions: SessionAction[] = []): Decision {
  return { state, actions, rule, reason };
}

const armHold = (negotiated: Negotiated): SessionAction[] =>
  negotiated.holdTime > 0 ? [arm("hold", negotiated.holdTime)] : [];

const sendUpdates = (plan: { updates: Update[] }): SessionAction[] =>
  plan.updates.map((update) => ({ type: "send", message: { type: "update", update } }));

function opening(
  config: SessionConfig,
  state: SessionState,
  rule: string,
  reason: string,
  first: SessionAction[],
): Decision {
  return {
    state: { ...state, phase: "open-sent" },
    actions: [
      ...first,
      { type: "disarm", timer: "retry" },
      { type: "send", message: openMessage(config, state) },
      arm("hold", OPEN_HOLD_TIME),
    ],
    rule,
    reason,
  };
}

/** OPEN accepted: KEEPALIVE, and the negotiated timers (none with hold time 0). */
function confirmed(
  state: SessionState,
  negotiated: Negotiated,
  rule: string,
  reason: string,
  first: SessionAction[] = [],
): Decision {
  return {
    state: { ...state, phase: "open-confirm", negotiated },
    actions: [
      ...first,
      { type: "send", message: { type: "keepalive" } },
      ...(negotiated.holdTime > 0
        ? [...armHold(negotiated), arm("keepalive", negotiated.keepaliveTime)]
        : [{ type: "disarm", timer: "hold" } as const]),
    ],
    rule,
    reason,
  };
}

/** RFC 4271 §6.8: whether the connection we opened survives a collision (BGP identifiers as 4-octet numbers). */
export function oursSurvives(ourIdentifier: string, peerIdentifier: string): boolean {
  return ipToBytes(ourIdentifier).readUInt32BE(0) > ipToBytes(peerIdentifier).readUInt32BE(0);
}

const collisionCease = (on?: "incoming"): SessionAction => ({
  type: "send",
  message: { type: "notification", notification: notification("cease", "connection-collision-resolution") },
  ...(on ? { on } : {}),
});

const collisionReason = (config: SessionConfig, peer: string) =>
  oursSurvives(config.routerId, peer)
    ? `a collision: our BGP identifier ${config.routerId} is higher than the peer's ${peer}, kept our connection`
    : `a collision: the peer's BGP identifier ${peer} is higher than ours ${config.routerId}, took its connection`;

/** The peer's second connection is closed with Cease/Connection Collision Resolution; ours goes on. */
function keepOurs(config: SessionConfig, decision: Decision, peer: string): Decision {
  return {
    state: { ...decision.state, incoming: false },
    actions: [...decision.actions, collisionCease("incoming"), { type: "close", on: "incoming" }],
    rule: "collision-kept-ours",
    reason: collisionReason(config, peer),
  };
}

/** A message on the peer's second connection, which waits for its OPEN while ours is in open-sent. */
function receivedOnIncoming(config: SessionConfig, state: SessionState, message: Message | BgpError): Decision {
  if (!state.incoming) return keep(state, "stale-message", "on a connection already closed");
  const refuse = (reason: string, send?: BgpError["notification"]) =>
    keep({ ...state, incoming: false }, "incoming-refused", `the peer's second connection: ${reason}`, [
      ...(send
        ? [{ type: "send", message: { type: "notification", notification: send }, on: "incoming" } as const]
        : []),
      { type: "close", on: "incoming" },
    ]);
  if ("reason" in message) return refuse(message.reason, message.notification);
  if (message.type === "notification")
    return refuse(`the peer sent NOTIFICATION ${notificationName(message.notification)}`);
  if (message.type !== "open")
    return refuse(`${message.type} before OPEN`, notification("fsm", "unexpected-message-in-open-sent"));
  const negotiated = checkOpen(config, message.open);
  if ("reason" in negotiated) return refuse(negotiated.reason, negotiated.notification);
  const peer = message.open.identifier;
  // ours may still be connecting: the same rule then, as the peer applies it to the same two connections
  if (oursSurvives(config.routerId, peer)) return keepOurs(config, keep(state, "", ""), peer);
  const taken = { ...state, accepted: true, incoming: false };
  return confirmed(taken, negotiated, "collision-took-peers", collisionReason(config, peer), [
    collisionCease(),
    { type: "accept" },
  ]);
}

function received(config: SessionConfig, state: SessionState, message: Message | BgpError, jitter: number): Decision {
  if ("reason" in message) {
    if (message.treatAsWithdraw && state.phase === "established")
      return keep(
        state,
        "update-treat-as-withdraw",
        `ignored an UPDATE (${notificationName(message.notification)}): ${message.reason}`,
        armHold(state.negotiated!),
      );
    return fail(
      state,
      jitter,
      "message-refused",
      `${notificationName(message.notification)}: ${message.reason}`,
      message.notification,
    );
  }
  if (message.type === "notification")
    return fail(
      state,
      jitter,
      "peer-notification",
      `the peer sent NOTIFICATION ${notificationName(message.notification)}`,
    );
  const unexpected = (
    subcode:
      "unexpected-message-in-open-sent" | "unexpected-message-in-open-confirm" | "unexpected-message-in-established",
  ) => fail(state, jitter, "unexpected-message", `${message.type} in ${state.phase}`, notification("fsm", subcode));
  switch (state.phase) {
    case "open-sent": {
      if (message.type !== "open") return unexpected("unexpected-message-in-open-sent");
      const negotiated = checkOpen(config, message.open);
      if ("reason" in negotiated)
        return fail(state, jitter, "open-refused", negotiated.reason, negotiated.notification);
      const peer = message.open.identifier;
      const families = `IPv${negotiated.families.join("+IPv")}`;
      const reason = `peer ${peer} AS ${message.open.asn}: hold time ${negotiated.holdTime} s, ${families}`;
      if (!state.incoming) return confirmed(state, negotiated, "open-accepted", reason);
      if (oursSurvives(config.routerId, peer))
        return keepOurs(config, confirmed(state, negotiated, "open-accepted", reason), peer);
      // the peer's connection (with our OPEN sent on it, its own OPEN to come) takes over
      return {
        state: { ...state, phase: "open-sent", accepted: true, incoming: false },
        actions: [
          collisionCease(),
          { type: "accept" },
          { type: "disarm", timer: "keepalive" },
          arm("hold", OPEN_HOLD_TIME),
        ],
        rule: "collision-took-peers",
        reason: collisionReason(config, peer),
      };
    }
    case "open-confirm": {
      if (message.type !== "keepalive") return unexpected("unexpected-message-in-open-confirm");
      const negotiated = state.negotiated!;
      const peer = { myAsn: config.myAsn, ibgp: config.myAsn === config.peerAsn, families: negotiated.families };
      const plan = planUpdates(new Map(), state.desired, peer);
      return {
        state: { ...state, phase: "established", failures: 0, established: true, advertised: plan.advertised },
        actions: [
          ...armHold(negotiated),
          ...sendUpdates(plan),
          // End-of-RIB after the initial table (RFC 4724 §2): a helper then drops what we no longer announce
          ...negotiated.families.map(
            (family) => ({ type: "send", message: { type: "update", update: endOfRib(family) } }) as const,
          ),
        ],
        rule: "established",
        reason: `sent ${plan.advertised.size} routes in ${plan.updates.length} UPDATEs and End-of-RIB`,
      };
    }
    case "established": {
      const negotiated = state.negotiated!;
      if (message.type === "open") return unexpected("unexpected-message-in-established");
      if (message.type === "route-refresh") {
        const { afi, safi } = message.routeRefresh;
        const family = safi === 1 ? ({ 1: 4, 2: 6 } as const)[afi as 1 | 2] : undefined;
        // RFC 2918 §4: a refresh for a family not negotiated is ignored
        if (!family || !negotiated.families.includes(family))
          return keep(state, "refresh-ignored", `ROUTE-REFRESH for AFI ${afi} SAFI ${safi}`);
        const peer = { myAsn: config.myAsn, ibgp: config.myAsn === config.peerAsn, families: [family] };
        const plan = planUpdates(new Map(), state.desired, peer);
        return keep(state, "refresh", `resent ${plan.advertised.size} IPv${family} routes`, sendUpdates(plan));
      }
      // KEEPALIVE and UPDATE (whose routes we ignore) keep the session alive
      return keep(state, message.type === "update" ? "update-ignored" : "keepalive", "", armHold(negotiated));
    }
    default:
      return keep(state, "stale-message", `${message.type} while ${state.phase}`);
  }
}

/** The peer connected to us (the adapter has the connection, unread, until an action takes or closes it). */
function incoming(config: SessionConfig, state: SessionState): Decision {
  const take = (rule: string, reason: string, first: SessionAction[] = []) =>
    opening(config, { ...state, negotiated: undefined, accepted: true, incoming: false }, rule, reason, [
      ...first,
      { type: "accept" },
    ]);
  switch (state.phase) {
    case "idle":
      return take("accepted", "the peer connected; sent OPEN");
    case "stopped":
      return keep(state, "incoming-refused", "the session is stopped", [{ type: "close", on: "incoming" }]);
    case "established":
      // RFC 4271 §6.8: a collision with an established session closes the new connection
      return keep(state, "collision-established", "the session is established: closed the peer's new connection", [
        collisionCease("incoming"),
        { type: "close", on: "incoming" },
      ]);
    default: {
      // a peer has one connection of its own at a time: a new one means it gave up the one we took
      if (state.accepted) return take("incoming-replaced", "the peer connected again; sent OPEN");
      // connecting or open-sent: both connections go on until the peer's identifier is known (dropping ours here
      // would drop the one the peer keeps when it does the same)
      if (state.phase !== "open-confirm")
        return keep({ ...state, incoming: true }, "collision-pending", "the peer connected while ours opens", [
          { type: "send", message: openMessage(config, state), on: "incoming" },
        ]);
      // open-confirm: the peer's identifier is known, so the collision is resolved at once
      const peer = state.negotiated!.peer.identifier;
      if (oursSurvives(config.routerId, peer)) return keepOurs(config, keep(state, "", ""), peer);
      return take("collision-took-peers", collisionReason(config, peer), [
        collisionCease(),
        { type: "disarm", timer: "keepalive" },
      ]);
    }
  }
}

/** The next state and what to do, for one event. `jitter` is a random number in [0, 1) for the backoff. */
export function decide(config: SessionConfig, state: SessionState, event: SessionEvent, jitter: number): Decision {
  switch (event.type) {
    case "start":
      if (state.phase !== "idle" && state.phase !== "stopped") return keep(state, "already-started", "");
      return {
        state: { ...state, phase: "connecting", accepted: false },
        actions: [{ type: "connect" }, arm("hold", CONNECT_TIMEOUT)],
        rule: "connect",
        reason: "",
      };
    case "stop": {
      const up = state.phase === "open-sent" || state.phase === "open-confirm" || state.phase === "established";
      const cease = up && !event.restarting && notification("cease", "administrative-shutdown");
      return {
        state: { ...state, phase: "stopped", negotiated: undefined, advertised: new Map(), incoming: false },
        actions: [
          ...(cease ? [{ type: "send", message: { type: "notification", notification: cease } } as const] : []),
          { type: "close" },
          ...(state.incoming ? [{ type: "close", on: "incoming" } as const] : []),
          ...disarmAll,
          { type: "disarm", timer: "retry" },
        ],
        rule: "stopped",
        reason: cease ? "sent Cease (administrative shutdown)" : up ? "closed without Cease (restarting)" : "",
      };
    }
    case "connected":
      if (state.phase !== "connecting")
        return keep(state, "stale-connection", `connected while ${state.phase}`, [{ type: "close" }]);
      return opening(config, state, "open-sent", "connected; sent OPEN", []);
    case "incoming":
      return incoming(config, state);
    case "closed":
      if (event.on === "incoming")
        return state.incoming
          ? keep({ ...state, incoming: false }, "incoming-closed", `the peer's second connection: ${event.reason}`)
          : keep(state, "closed", event.reason);
      if (state.phase === "idle" || state.phase === "stopped") return keep(state, "closed", event.reason);
      return fail(state, jitter, "connection-lost", event.reason);
    case "timer":
      switch (event.timer) {
        case "retry":
          return state.phase === "idle"
            ? decide(config, state, { type: "start" }, jitter)
            : keep(state, "stale-timer", "retry");
        case "keepalive":
          if (state.phase !== "open-confirm" && state.phase !== "established")
            return keep(state, "stale-timer", "keepalive");
          return keep(state, "keepalive-sent", "", [
            { type: "send", message: { type: "keepalive" } },
            arm("keepalive", state.negotiated!.keepaliveTime),
          ]);
        case "hold":
          if (state.phase === "connecting")
            return fail(state, jitter, "connect-timeout", `no connection within ${CONNECT_TIMEOUT} s`);
          if (state.phase === "idle" || state.phase === "stopped") return keep(state, "stale-timer", "hold");
          return fail(
            state,
            jitter,
            "hold-timer-expired",
            `nothing from the peer within the hold time`,
            notification("hold-timer-expired", "unspecific"),
          );
      }
      break;
    case "routes": {
      const desired = event.routes;
      if (state.phase !== "established")
        return keep({ ...state, desired }, "routes-kept", `${desired.length} routes for when the session is up`);
      const negotiated = state.negotiated!;
      const peer = { myAsn: config.myAsn, ibgp: config.myAsn === config.peerAsn, families: negotiated.families };
      const plan = planUpdates(state.advertised, desired, peer);
      return keep(
        { ...state, desired, advertised: plan.advertised },
        "routes-sent",
        `${plan.updates.length} UPDATEs`,
        sendUpdates(plan),
      );
    }
    case "received":
      return event.on === "incoming"
        ? receivedOnIncoming(config, state, event.message)
        : received(config, state, event.message, jitter);
    case "bfd":
      // The path is gone: no NOTIFICATION (it would not arrive), the routes go with the session at once. The next
      // attempt comes after the backoff, BFD up or not (RFC 5882 §3.2 leaves waiting for BFD optional; RFC 9384 calls
      // it strict mode): a router that runs BFD only for live neighbors, as FRR does for dynamic ones, would never
      // bring it back before the session.
      if (!event.up && state.phase !== "idle" && state.phase !== "stopped") {
        // The peer's connection waiting beside ours runs over the same path: it goes too, not carried on.
        const failed = fail({ ...state, incoming: false }, jitter, "bfd-down", "BFD to the peer went down");
        return state.incoming ? { ...failed, actions: [{ type: "close", on: "incoming" }, ...failed.actions] } : failed;
      }
      return keep(state, event.up ? "bfd-up" : "bfd-down", "");
  }
  return keep(state, "ignored", "");
}
