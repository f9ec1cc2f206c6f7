// One BFD session in asynchronous mode (RFC 5880), as a pure state machine: the three-way handshake
// (Down → Init → Up), timer negotiation (§6.8.2, §6.8.3), the Poll Sequence that changes timers without taking the
// session down (§6.5), and detection (§6.8.4). We never use Demand mode, echo or authentication. `decide` returns
// the next state, the actions for the UDP adapter (session.ts) and a rule id and reason for the log. The session's
// client (the BGP session to the same peer) hears of it through the "up" and "down" actions.
import { type BfdState, type ControlPacket, Diag } from "../../../net/bfd/control.ts";
import type { TimerAction, TimerEvent } from "../fsm-runner.ts";

/** The BGPPeer's `bfd` settings, in milliseconds. */
export interface BfdConfig {
  /** Desired Min TX Interval: how often we would like to send. */
  minTx: number;
  /** Required Min RX Interval: how often we can take the peer's packets. */
  minRx: number;
  /** Detect Mult: how many of our packets the peer may miss. */
  multiplier: number;
}

export interface BfdSessionState {
  state: BfdState;
  diag: number;
  /** Ours: chosen by the adapter, unique among its sessions, non-zero. */
  localDiscriminator: number;
  /** The peer's, 0 until heard and again after a Detection Time of silence. */
  remoteDiscriminator: number;
  remoteState: BfdState;
  /** Microseconds, as on the wire: the peer's last Required Min RX and Desired Min TX, and its Detect Mult. */
  remoteMinRx: number;
  remoteMinTx: number;
  remoteMultiplier: number;
  /** What our packets say (µs): Desired Min TX is at least 1 s while not Up (§6.8.3). */
  minTx: number;
  minRx: number;
  /** What our timers use (µs): during a Poll Sequence, the safer of the old and new values. */
  effectiveMinTx: number;
  effectiveMinRx: number;
  /** A Poll Sequence runs: our packets carry P until the peer answers with F. */
  polling: boolean;
}

export type BfdTimer = "tx" | "detect";

export type BfdEvent =
  | { type: "start" }
  /** AdminDown: we tell the peer, then stop sending. */
  | { type: "stop" }
  /**
   * We stop sending and tell the peer nothing: it finds us gone at its detection time, as after a crash. For a
   * graceful restart, after the BGP connection closed: the router helping the restart by then keeps the routes (FRR
   * 8.4 took an AdminDown sent while the session lived for a failure, and dropped them).
   */
  | { type: "abandon" }
  | { type: "configure"; config: BfdConfig }
  | { type: "received"; packet: ControlPacket }
  | TimerEvent<BfdTimer>;

export type BfdAction =
  | { type: "send"; packet: ControlPacket }
  | TimerAction<BfdTimer>
  /**
   * The session came Up / left Up (diag: why). `pathFailure` is what the client acts on: not when the peer
   * signalled AdminDown or we stopped, which say nothing of the path (RFC 5882 §3.2).
   */
  | { type: "up" }
  | { type: "down"; diag: number; pathFailure: boolean };

export interface BfdDecision {
  state: BfdSessionState;
  actions: BfdAction[];
  rule: string;
  reason: string;
}

const SLOW_TX = 1_000_000;
const µs = (ms: number) => Math.round(ms * 1000);

/** Desired Min TX as our packets say it in `state` (§6.8.3: at least 1 s while the session is not Up). */
const advertisedMinTx = (config: BfdConfig, state: BfdState) =>
  state === "up" ? µs(config.minTx) : Math.max(SLOW_TX, µs(config.minTx));

export function initialBfdState(config: BfdConfig, localDiscriminator: number): BfdSessionState {
  const minTx = advertisedMinTx(config, "down");
  return {
    state: "admin-down",
    diag: Diag.NONE,
    localDiscriminator,
    remoteDiscriminator: 0,
    remoteState: "down",
    remoteMinRx: 1, // §6.8.1: 1 µs until the peer says otherwise
    remoteMinTx: 0,
    remoteMultiplier: 0,
    minTx,
    minRx: µs(config.minRx),
    effectiveMinTx: minTx,
    effectiveMinRx: µs(config.minRx),
    polling: false,
  };
}

/** §6.8.7: the interval between our packets, before jitter (µs); 0 when the peer wants none. */
export function txInterval(s: BfdSessionState): number {
  return s.remoteMinRx === 0 ? 0 : Math.max(s.effectiveMinTx, s.remoteMinRx);
}

/** §6.8.4: how long the peer may stay silent before the session goes Down (µs). */
export function detectionTime(s: BfdSessionState): number {
  return s.remoteMultiplier * Math.max(s.effectiveMinRx, s.remoteMinTx);
}

/** §6.8.7: 75-100 % of the interval (75-90 % with Detect Mult 1), for `jitter` in [0, 1). */
export function jittered(intervalMicros: number, multiplier: number, jitter: number): number {
  return (intervalMicros * (0.75 + (multiplier === 1 ? 0.15 : 0.25) * jitter)) / 1000;
}

function packet(config: BfdConfig, s: BfdSessionState, final = false): ControlPacket {
  return {
    diag: s.diag,
    state: s.state,
    poll: s.polling && !final,
    final,
    cpi: false, // we share fate with the control plane (the agent)
    demand: false,
    detectMult: config.multiplier,
    myDiscriminator: s.localDiscriminator,
    yourDiscriminator: s.remoteDiscriminator,
    desiredMinTx: s.minTx,
    requiredMinRx: s.minRx,
    requiredMinEchoRx: 0,
  };
}

/**
 * New values for our packets: a change starts a Poll Sequence (§6.8.3), and until the peer's F the timers use the
 * safer of the old and new value — the longer detection time, the faster TX — so the peer's detection never fires
 * on its own old numbers: a configuration change never takes the session down.
 */
function retime(config: BfdConfig, s: BfdSessionState, state: BfdState): BfdSessionState {
  const minTx = advertisedMinTx(config, state);
  const minRx = µs(config.minRx);
  if (minTx === s.minTx && minRx === s.minRx) return { ...s, state };
  // only an Up session has a detection to keep; any other applies the new values at once
  const held = s.state === "up" && state === "up";
  return {
    ...s,
    state,
    minTx,
    minRx,
    effectiveMinTx: held ? Math.min(s.effectiveMinTx, minTx) : minTx,
    effectiveMinRx: held ? Math.max(s.effectiveMinRx, minRx) : minRx,
    polling: true,
  };
}

const armDetect = (s: BfdSessionState): BfdAction => ({ type: "arm", timer: "detect", ms: detectionTime(s) / 1000 });

function armTx(config: BfdConfig, s: BfdSessionState, jitter: number): BfdAction {
  const interval = txInterval(s);
  // a peer asking for no packets (Required Min RX 0) is asked again at the slow rate, never faster than our own
  // Desired Min TX (§6.8.7: a minTx over 1 s is that interval)
  const slow = Math.max(SLOW_TX, s.effectiveMinTx);
  return { type: "arm", timer: "tx", ms: jittered(interval || slow, config.multiplier, jitter) };
}

/** §6.8.6's state table for a packet from the peer while we are not AdminDown. */
function next(state: BfdState, remote: BfdState): { state: BfdState; diag?: number; rule: string } {
  if (remote === "admin-down")
    return state === "down"
      ? { state, rule: "peer-admin-down" }
      : { state: "down", diag: Diag.NEIGHBOR_SIGNALED_DOWN, rule: "peer-admin-down" };
  switch (state) {
    case "down":
      if (remote === "down") return { state: "init", rule: "init" };
      if (remote === "init") return { state: "up", rule: "up" };
      return { state, rule: "waiting" }; // the peer still thinks it is Up with an older session of ours
    case "init":
      return remote === "down" ? { state, rule: "waiting" } : { state: "up", rule: "up" };
    default:
      return remote === "down"
        ? { state: "down", diag: Diag.NEIGHBOR_SIGNALED_DOWN, rule: "peer-down" }
        : { state, rule: "keep" };
  }
}

function received(config: BfdConfig, s: BfdSessionState, p: ControlPacket, jitter: number): BfdDecision {
  if (p.yourDiscriminator !== 0 && p.yourDiscriminator !== s.localDiscriminator)
    return { state: s, actions: [], rule: "wrong-discriminator", reason: `your discriminator ${p.yourDiscriminator}` };
  if (s.state === "admin-down") return { state: s, actions: [], rule: "admin-down", reason: "a packet while AdminDown" };
  let heard: BfdSessionState = {
    ...s,
    remoteDiscriminator: p.myDiscriminator,
    remoteState: p.state,
    remoteMinRx: p.requiredMinRx,
    remoteMinTx: p.desiredMinTx,
    remoteMultiplier: p.detectMult,
  };
  // F ends our Poll Sequence: the new values apply to our timers from now on
  if (p.final && s.polling)
    heard = { ...heard, polling: false, effectiveMinTx: heard.minTx, effectiveMinRx: heard.minRx };
  const step = next(s.state, p.state);
  const after = retime(config, { ...heard, diag: step.diag ?? heard.diag }, step.state);
  const actions: BfdAction[] = [];
  if (p.poll) actions.push({ type: "send", packet: packet(config, after, true) });
  actions.push(armDetect(after));
  if (after.state !== s.state && after.state === "up") actions.push({ type: "up" });
  if (s.state === "up" && after.state !== "up")
    actions.push({ type: "down", diag: after.diag, pathFailure: p.state !== "admin-down" });
  // a state change or the peer's first word is said at once, not a slow interval later (the peer waits for it)
  if (after.state !== s.state || s.remoteDiscriminator === 0) actions.push({ type: "send", packet: packet(config, after) });
  // the schedule restarts from a packet sent out of turn (the peer's detection counts from it), and a shorter
  // interval the peer now expects (its Poll) applies at once, not after the old one has run out
  if (actions.some((a) => a.type === "send") || txInterval(after) !== txInterval(s)) actions.push(armTx(config, after, jitter));
  const reason =
    after.state !== s.state
      ? `${s.state} → ${after.state} (the peer is ${p.state}); TX every ${txInterval(after) / 1000} ms, ` +
        `detection ${detectionTime(after) / 1000} ms`
      : p.final && s.polling
        ? `Poll Sequence ended: TX every ${txInterval(after) / 1000} ms, detection ${detectionTime(after) / 1000} ms`
        : "";
  return { state: after, actions, rule: p.final && s.polling && step.rule === "keep" ? "final" : step.rule, reason };
}

/** The next state and what to do, for one event. `jitter` is a random number in [0, 1) for the TX interval. */
export function decideBfd(config: BfdConfig, s: BfdSessionState, event: BfdEvent, jitter: number): BfdDecision {
  switch (event.type) {
    case "start": {
      if (s.state !== "admin-down") return { state: s, actions: [], rule: "already-started", reason: "" };
      const started = retime(config, { ...s, diag: Diag.NONE, remoteDiscriminator: 0 }, "down");
      return {
        state: started,
        actions: [{ type: "send", packet: packet(config, started) }, armTx(config, started, jitter)],
        rule: "start",
        reason: "",
      };
    }
    case "stop":
    case "abandon": {
      if (s.state === "admin-down") return { state: s, actions: [], rule: "already-stopped", reason: "" };
      const stopped = { ...retime(config, s, "admin-down"), diag: Diag.ADMINISTRATIVELY_DOWN, polling: false };
      const tell = event.type === "stop";
      return {
        state: stopped,
        actions: [
          ...(tell ? [{ type: "send", packet: packet(config, stopped) } as const] : []),
          { type: "disarm", timer: "tx" },
          { type: "disarm", timer: "detect" },
          ...(s.state === "up"
            ? [{ type: "down", diag: Diag.ADMINISTRATIVELY_DOWN, pathFailure: false } as const]
            : []),
        ],
        rule: tell ? "admin-down" : "abandoned",
        reason: tell ? "" : "stopped sending, AdminDown not sent: the peer detects it",
      };
    }
    case "configure": {
      const after = retime(event.config, s, s.state);
      return {
        state: after,
        actions: [],
        rule: after.polling && !s.polling ? "poll" : "configured",
        reason: `Desired Min TX ${after.minTx / 1000} ms, Required Min RX ${after.minRx / 1000} ms, ` +
          `Detect Mult ${event.config.multiplier}`,
      };
    }
    case "received":
      return received(config, s, event.packet, jitter);
    case "timer":
      if (s.state === "admin-down") return { state: s, actions: [], rule: "stale-timer", reason: event.timer };
      if (event.timer === "tx")
        return {
          state: s,
          actions: [
            ...(txInterval(s) > 0 ? [{ type: "send", packet: packet(config, s) } as const] : []),
            armTx(config, s, jitter),
          ],
          rule: "tx",
          reason: "",
        };
      {
        // §6.8.4: silence for a Detection Time; and §6.8.1: the peer's discriminator is forgotten
        const wasUp = s.state === "up";
        const detected = s.state === "init" || wasUp;
        const after = retime(
          config,
          { ...s, remoteDiscriminator: 0, diag: detected ? Diag.DETECTION_TIME_EXPIRED : s.diag },
          "down",
        );
        return {
          state: after,
          actions: [
            ...(wasUp ? [{ type: "down", diag: Diag.DETECTION_TIME_EXPIRED, pathFailure: true } as const] : []),
            ...(detected ? [{ type: "send", packet: packet(config, after) } as const] : []),
            armTx(config, after, jitter),
          ],
          rule: detected ? "detection-time-expired" : "peer-forgotten",
          reason: `nothing from the peer for ${detectionTime(s) / 1000} ms (${s.state})`,
        };
      }
  }
}
