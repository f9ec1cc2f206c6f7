import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { type BfdState, type ControlPacket, Diag, STATES } from "../../../net/bfd/control.ts";
import {
  type BfdAction,
  type BfdConfig,
  type BfdDecision,
  type BfdEvent,
  type BfdSessionState,
  decideBfd,
  detectionTime,
  initialBfdState,
  jittered,
  txInterval,
} from "./fsm.ts";

const CONFIG: BfdConfig = { minTx: 300, minRx: 300, multiplier: 3 };
const LOCAL = 0x1111;
const REMOTE = 0x2222;

const peer = (state: BfdState, more: Partial<ControlPacket> = {}): BfdEvent => ({
  type: "received",
  packet: {
    diag: 0,
    state,
    poll: false,
    final: false,
    cpi: false,
    demand: false,
    detectMult: 3,
    myDiscriminator: REMOTE,
    yourDiscriminator: state === "down" || state === "admin-down" ? 0 : LOCAL,
    desiredMinTx: 1_000_000,
    requiredMinRx: 200_000,
    requiredMinEchoRx: 0,
    ...more,
  },
});

/** Runs events from the initial state; returns every decision. */
function run(events: BfdEvent[], config = CONFIG, from?: BfdSessionState): BfdDecision[] {
  let state = from ?? initialBfdState(config, LOCAL);
  return events.map((event) => {
    const decision = decideBfd(config, state, event, 0.5);
    state = decision.state;
    return decision;
  });
}
const last = (decisions: BfdDecision[]) => decisions.at(-1)!;
const sent = (actions: BfdAction[]) => actions.flatMap((a) => (a.type === "send" ? [a.packet] : []));
const armed = (actions: BfdAction[], timer: string) =>
  actions.flatMap((a) => (a.type === "arm" && a.timer === timer ? [a.ms] : []));

const UP: BfdEvent[] = [{ type: "start" }, peer("down"), peer("up")];
const upState = () => last(run(UP)).state;

test("the three-way handshake: Down, Init on the peer's Down, Up on its Up; discriminators learned", () => {
  const [start, init, up] = run(UP);
  assert.deepEqual(
    [start!, init!, up!].map((d) => [d.state.state, d.rule]),
    [
      ["down", "start"],
      ["init", "init"],
      ["up", "up"],
    ],
  );
  assert.deepEqual(sent(start!.actions).map((p) => [p.state, p.myDiscriminator, p.yourDiscriminator]), [
    ["down", LOCAL, 0],
  ]);
  // Init answers at once, naming the peer's discriminator
  assert.deepEqual(sent(init!.actions).map((p) => [p.state, p.yourDiscriminator]), [["init", REMOTE]]);
  assert.ok(up!.actions.some((a) => a.type === "up"));
  // the other side of the handshake: the peer says Init first
  assert.equal(last(run([{ type: "start" }, peer("init")])).state.state, "up");
});

test("timer negotiation: TX = max(our Desired Min TX, their Required Min RX), detection = their mult × max(our RX, their TX)", () => {
  const up = upState();
  // we want 300 ms, the peer can take 200 ms: 300 ms; the peer sends at 1 s (its slow rate): 3 × 1 s
  assert.equal(txInterval(up), 300_000);
  assert.equal(detectionTime(up), 3_000_000);
  const fast = last(run([peer("up", { requiredMinRx: 500_000, desiredMinTx: 100_000, detectMult: 5 })], CONFIG, up));
  assert.equal(txInterval(fast.state), 500_000);
  assert.equal(detectionTime(fast.state), 5 * 300_000);
  assert.deepEqual(armed(fast.actions, "detect"), [1500]);
});

test("§6.8.3: Desired Min TX is at least 1 s while not Up, the configured value once Up (with a Poll)", () => {
  const [start, init, up] = run(UP);
  assert.equal(sent(start!.actions)[0]!.desiredMinTx, 1_000_000);
  assert.equal(sent(init!.actions)[0]!.desiredMinTx, 1_000_000);
  assert.ok(txInterval(init!.state) >= 1_000_000);
  assert.equal(up!.state.minTx, 300_000);
  assert.equal(up!.state.polling, true);
  assert.equal(sent(up!.actions)[0]!.poll, true);
  const ended = last(run([peer("up", { final: true })], CONFIG, up!.state));
  assert.equal(ended.rule, "final");
  assert.equal(ended.state.polling, false);
  assert.equal(sent(last(run([{ type: "timer", timer: "tx" }], CONFIG, ended.state)).actions)[0]!.poll, false);
});

test("a Poll from the peer is answered at once with F, and its new values apply", () => {
  const d = last(run([peer("up", { poll: true, requiredMinRx: 900_000 })], CONFIG, upState()));
  const [final] = sent(d.actions);
  assert.equal(final!.final, true);
  assert.equal(final!.poll, false);
  assert.equal(txInterval(d.state), 900_000);
  // a Poll for faster packets: the schedule restarts from the F at the new interval, not after the old one (FRR
  // counts its new detection time from our F)
  const slow = last(run([peer("up", { requiredMinRx: 1_000_000 })], CONFIG, upState()));
  const faster = last(run([peer("up", { poll: true, requiredMinRx: 300_000 })], CONFIG, slow.state));
  assert.deepEqual(armed(faster.actions, "tx"), [jittered(300_000, 3, 0.5)]);
});

test("a configuration change while Up: a Poll, and the safer timers until F; never a flap", () => {
  const up = last(run([peer("up", { final: true, desiredMinTx: 300_000, requiredMinRx: 300_000 })], CONFIG, upState()));
  assert.equal(up.state.polling, false);
  const slower: BfdConfig = { minTx: 900, minRx: 100, multiplier: 3 };
  const changed = decideBfd(slower, up.state, { type: "configure", config: slower }, 0.5);
  assert.equal(changed.rule, "poll");
  assert.equal(changed.state.state, "up");
  // until the peer's F: TX stays at 300 ms (an increase waits), detection keeps our old 300 ms RX (a decrease waits)
  assert.equal(txInterval(changed.state), 300_000);
  assert.equal(detectionTime(changed.state), 900_000);
  const tx = decideBfd(slower, changed.state, { type: "timer", timer: "tx" }, 0.5);
  assert.equal(sent(tx.actions)[0]!.poll, true);
  assert.equal(sent(tx.actions)[0]!.desiredMinTx, 900_000);
  const final = decideBfd(slower, changed.state, peer("up", { final: true, desiredMinTx: 300_000 }), 0.5);
  assert.equal(txInterval(final.state), 900_000);
  assert.equal(detectionTime(final.state), 900_000);
  assert.equal(final.state.state, "up");
});

test("Down: the peer's Down or AdminDown (diag 3), detection (diag 1), our stop (AdminDown, diag 7)", () => {
  const up = upState();
  for (const state of ["down", "admin-down"] as const) {
    const d = last(run([peer(state)], CONFIG, up));
    assert.equal(d.state.state, "down");
    assert.equal(d.state.diag, Diag.NEIGHBOR_SIGNALED_DOWN);
    assert.deepEqual(
      d.actions.find((a) => a.type === "down"),
      // the peer's AdminDown says nothing of the path: the client keeps its session (RFC 5882 §3.2)
      { type: "down", diag: Diag.NEIGHBOR_SIGNALED_DOWN, pathFailure: state === "down" },
    );
  }
  const detected = last(run([{ type: "timer", timer: "detect" }], CONFIG, up));
  assert.equal(detected.rule, "detection-time-expired");
  assert.equal(detected.state.diag, Diag.DETECTION_TIME_EXPIRED);
  assert.equal(detected.state.remoteDiscriminator, 0);
  assert.deepEqual(
    detected.actions.find((a) => a.type === "down"),
    { type: "down", diag: Diag.DETECTION_TIME_EXPIRED, pathFailure: true },
  );
  assert.equal(sent(detected.actions)[0]!.desiredMinTx, 1_000_000);
  const stopped = last(run([{ type: "stop" }], CONFIG, up));
  assert.deepEqual(
    sent(stopped.actions).map((p) => [p.state, p.diag]),
    [["admin-down", Diag.ADMINISTRATIVELY_DOWN]],
  );
  assert.ok(stopped.actions.some((a) => a.type === "disarm" && a.timer === "tx"));
  assert.ok(stopped.actions.some((a) => a.type === "down" && !a.pathFailure));
  assert.equal(last(run([peer("up")], CONFIG, stopped.state)).rule, "admin-down");
});

test("abandoned (a graceful restart's shutdown): nothing sent, timers gone, Down for the client but no path failure", () => {
  const up = upState();
  const abandoned = last(run([{ type: "abandon" }], CONFIG, up));
  assert.equal(abandoned.rule, "abandoned");
  assert.deepEqual(sent(abandoned.actions), [], "no AdminDown: the peer finds us gone at its detection time");
  assert.deepEqual(
    abandoned.actions.filter((a) => a.type === "disarm").map((a) => a.timer).sort(),
    ["detect", "tx"],
  );
  assert.ok(abandoned.actions.some((a) => a.type === "down" && !a.pathFailure));
  assert.equal(last(run([peer("up")], CONFIG, abandoned.state)).rule, "admin-down", "later packets change nothing");
  assert.equal(last(run([{ type: "abandon" }], CONFIG, abandoned.state)).rule, "already-stopped");
  assert.equal(last(run([{ type: "stop" }], CONFIG, abandoned.state)).rule, "already-stopped", "nor a later stop");
});

test("a packet for another discriminator changes nothing", () => {
  const up = upState();
  const d = last(run([peer("down", { yourDiscriminator: 0x9999 })], CONFIG, up));
  assert.equal(d.rule, "wrong-discriminator");
  assert.equal(d.state, up);
  assert.deepEqual(d.actions, []);
});

test("§6.8.7 jitter: 75-100 % of the interval, 75-90 % with Detect Mult 1", () => {
  fc.assert(
    fc.property(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (j) => {
      const ms = jittered(300_000, 3, j);
      assert.ok(ms >= 225 && ms <= 300, String(ms));
      const one = jittered(300_000, 1, j);
      assert.ok(one >= 225 && one <= 270, String(one));
    }),
  );
});

// ---- properties over arbitrary event sequences ----

const packetArb: fc.Arbitrary<BfdEvent> = fc
  .record({
    state: fc.constantFrom(...STATES),
    poll: fc.boolean(),
    final: fc.boolean(),
    detectMult: fc.integer({ min: 1, max: 10 }),
    yourDiscriminator: fc.constantFrom(LOCAL, 0x9999),
    desiredMinTx: fc.integer({ min: 1, max: 2_000_000 }),
    requiredMinRx: fc.integer({ min: 0, max: 2_000_000 }),
  })
  // only what the wire reader lets through: your discriminator 0 only from a peer that is Down or AdminDown
  .map((p) => peer(p.state, { ...p, yourDiscriminator: p.state.endsWith("down") ? 0 : p.yourDiscriminator }));
const configArb = fc.record({
  minTx: fc.integer({ min: 10, max: 3000 }),
  minRx: fc.integer({ min: 10, max: 3000 }),
  multiplier: fc.integer({ min: 1, max: 10 }),
});
const eventArb: fc.Arbitrary<BfdEvent> = fc.oneof(
  { weight: 5, arbitrary: packetArb },
  { weight: 1, arbitrary: fc.constant<BfdEvent>({ type: "timer", timer: "detect" }) },
  { weight: 2, arbitrary: fc.constant<BfdEvent>({ type: "timer", timer: "tx" }) },
  { weight: 1, arbitrary: configArb.map((config): BfdEvent => ({ type: "configure", config })) },
  { weight: 1, arbitrary: fc.constantFrom<BfdEvent>({ type: "start" }, { type: "stop" }, { type: "abandon" }) },
);

/** Runs arbitrary events (configure events change the config for what follows), checking each step. */
function walk(events: BfdEvent[], check: (before: BfdSessionState, event: BfdEvent, d: BfdDecision, config: BfdConfig) => void) {
  let config = CONFIG;
  let state = initialBfdState(config, LOCAL);
  for (const event of events) {
    if (event.type === "configure") config = event.config;
    const d = decideBfd(config, state, event, 0.5);
    check(state, event, d, config);
    state = d.state;
  }
}

test("property: never Up without hearing the peer say Init or Up to us", () => {
  fc.assert(
    fc.property(fc.array(eventArb, { maxLength: 40 }), (events) =>
      walk(events, (before, event, d) => {
        if (d.state.state === "up" && before.state !== "up") {
          assert.equal(event.type, "received");
          const p = (event as Extract<BfdEvent, { type: "received" }>).packet;
          assert.ok(p.state === "init" || p.state === "up", p.state);
          assert.equal(p.yourDiscriminator, LOCAL, "a packet for our session");
          assert.ok(d.actions.some((a) => a.type === "up"));
        }
      }),
    ),
    { numRuns: 2000 },
  );
});

test("property: detection expiring takes an Init or Up session Down with diag 1, and Up reports down", () => {
  fc.assert(
    fc.property(fc.array(eventArb, { maxLength: 30 }), (events) => {
      let config = CONFIG;
      let state = initialBfdState(config, LOCAL);
      for (const event of events) {
        if (event.type === "configure") config = event.config;
        state = decideBfd(config, state, event, 0.5).state;
      }
      const d = decideBfd(config, state, { type: "timer", timer: "detect" }, 0.5);
      if (state.state === "init" || state.state === "up") {
        assert.equal(d.state.state, "down");
        assert.equal(d.state.diag, Diag.DETECTION_TIME_EXPIRED);
        assert.equal(d.actions.some((a) => a.type === "down"), state.state === "up");
      } else assert.ok(d.state.state === state.state);
    }),
    { numRuns: 1000 },
  );
});

test("property: we never send faster than §6.8.7 allows, nor with Desired Min TX under 1 s while not Up", () => {
  fc.assert(
    fc.property(fc.array(eventArb, { maxLength: 40 }), (events) =>
      walk(events, (_, event, d, config) => {
        for (const ms of armed(d.actions, "tx")) {
          const floor = Math.max(d.state.effectiveMinTx, d.state.remoteMinRx) / 1000;
          assert.ok(ms >= 0.75 * floor - 1e-9, `${ms} ms < 75 % of ${floor} ms`);
        }
        for (const p of sent(d.actions)) {
          assert.equal(p.detectMult, config.multiplier);
          if (p.state !== "up") assert.ok(p.desiredMinTx >= 1_000_000, `${p.desiredMinTx} µs while ${p.state}`);
          assert.equal(p.myDiscriminator, LOCAL);
          if (event.type === "received" && event.packet.poll && p.final) assert.equal(p.poll, false);
        }
        // every packet sent restarts the schedule (the peer's detection counts from it); AdminDown ends it
        if (sent(d.actions).length > 0 && d.state.state !== "admin-down")
          assert.equal(armed(d.actions, "tx").length, 1, JSON.stringify(d.actions));
      }),
    ),
    { numRuns: 2000 },
  );
});

test("property: configuration changes on an Up session answered by a live peer never take it down", () => {
  fc.assert(
    fc.property(fc.array(configArb, { minLength: 1, maxLength: 8 }), (configs) => {
      let state = upState();
      for (const config of configs) {
        state = decideBfd(config, state, { type: "configure", config }, 0.5).state;
        // the peer's next packets: a periodic one, then its answer to our Poll
        for (const event of [peer("up"), peer("up", { final: state.polling })]) {
          const d = decideBfd(config, state, event, 0.5);
          assert.ok(!d.actions.some((a) => a.type === "down"));
          state = d.state;
        }
        assert.equal(state.state, "up");
        assert.equal(state.polling, false);
        assert.equal(state.minTx, config.minTx * 1000);
      }
    }),
  );
});
