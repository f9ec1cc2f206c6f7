import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { notificationName } from "../../../net/bgp/errors.ts";
import { decodeMessage, encodeMessage, type Message, type Open } from "../../../net/bgp/message.ts";
import { endOfRibFamily } from "../../../net/bgp/update.ts";
import {
  backoffSeconds,
  BACKOFF_MAX,
  decide,
  initialState,
  oursSurvives,
  type SessionAction,
  type SessionConfig,
  type SessionEvent,
  type SessionState,
} from "./fsm.ts";
import { planUpdates, type Route } from "./ribout.ts";

const CONFIG: SessionConfig = {
  myAsn: 4200000001,
  peerAsn: 65010,
  routerId: "198.18.0.1",
  holdTime: 90,
  families: [4, 6],
};
const PEER_OPEN: Open = {
  asn: 65010,
  holdTime: 30,
  identifier: "198.18.0.2",
  capabilities: { fourOctetAs: true, families: [4, 6], routeRefresh: true },
};
const ROUTES: Route[] = [
  { prefix: "198.51.100.7/32", nextHop: "198.18.0.1", communities: ["65001:2", "65001:1"] },
  { prefix: "2001:db8::7/128", nextHop: "fd00::1", localPref: 200 },
];

const received = (message: Message): SessionEvent => ({ type: "received", message });
const sent = (actions: SessionAction[]) => actions.flatMap((a) => (a.type === "send" ? [a.message] : []));

/** Runs events from the initial state; returns the last decision and every state on the way. */
function run(events: SessionEvent[], config = CONFIG, from: SessionState = initialState()) {
  let state = from;
  let last = { state, actions: [] as SessionAction[], rule: "", reason: "" };
  for (const event of events) {
    last = decide(config, state, event, 0.5);
    state = last.state;
  }
  return last;
}

const UP: SessionEvent[] = [
  { type: "start" },
  { type: "connected" },
  received({ type: "open", open: PEER_OPEN }),
  received({ type: "keepalive" }),
];

test("the handshake: connect, OPEN, KEEPALIVE, then the table and End-of-RIB for each family", () => {
  const steps: [SessionEvent, string, string][] = [
    [UP[0]!, "connecting", "connect"],
    [UP[1]!, "open-sent", "open-sent"],
    [UP[2]!, "open-confirm", "open-accepted"],
    [UP[3]!, "established", "established"],
  ];
  let state = initialState();
  for (const [event, phase, rule] of steps) {
    const decision = decide(CONFIG, state, event, 0.5);
    assert.deepEqual([decision.state.phase, decision.rule], [phase, rule]);
    state = decision.state;
    if (rule === "open-sent") {
      const open = sent(decision.actions)[0];
      assert.ok(open?.type === "open" && open.open.capabilities.fourOctetAs && open.open.holdTime === 90);
    }
    if (rule === "open-accepted") {
      assert.deepEqual(decision.state.negotiated?.holdTime, 30, "the lesser hold time");
      assert.ok(decision.actions.some((a) => a.type === "arm" && a.timer === "keepalive" && a.ms === 10_000));
    }
  }
  const withRoutes = run([{ type: "routes", routes: ROUTES }, ...UP]);
  const updates = sent(withRoutes.actions).flatMap((m) => (m.type === "update" ? [m.update] : []));
  assert.deepEqual(updates.slice(-2).map(endOfRibFamily), [4, 6], "End-of-RIB for IPv4 and IPv6 last");
  assert.equal(withRoutes.state.advertised.size, 2);
});

test("OPEN refusals name their NOTIFICATION, close, and back off", () => {
  const cases: [string, Partial<Open>, string][] = [
    ["another ASN", { asn: 65011 }, "open/bad-peer-as"],
    ["our identifier", { identifier: "198.18.0.1" }, "open/bad-bgp-identifier"],
    [
      "no 4-octet ASNs",
      { capabilities: { ...PEER_OPEN.capabilities, fourOctetAs: false } },
      "open/unsupported-capability",
    ],
  ];
  for (const [name, change, expected] of cases) {
    const decision = run([UP[0]!, UP[1]!, received({ type: "open", open: { ...PEER_OPEN, ...change } })]);
    const notification = sent(decision.actions).find((m) => m.type === "notification");
    assert.equal(notification?.type === "notification" && notificationName(notification.notification), expected, name);
    assert.equal(decision.state.phase, "idle", name);
    assert.ok(
      decision.actions.some((a) => a.type === "close") &&
        decision.actions.some((a) => a.type === "arm" && a.timer === "retry"),
      name,
    );
  }
  // no family in common: ours IPv6 only, the peer's IPv4 only
  const v6 = run(
    [
      UP[0]!,
      UP[1]!,
      received({ type: "open", open: { ...PEER_OPEN, capabilities: { ...PEER_OPEN.capabilities, families: [4] } } }),
    ],
    { ...CONFIG, families: [6] },
  );
  assert.equal(v6.rule, "open-refused");
});

test("in established: routes go out as differences; a refresh resends; a bad UPDATE resets or is ignored per RFC 7606", () => {
  const up = run([{ type: "routes", routes: ROUTES }, ...UP]);
  const change = decide(
    CONFIG,
    up.state,
    { type: "routes", routes: [ROUTES[0]!, { ...ROUTES[1]!, localPref: 300 }] },
    0.5,
  );
  // eBGP: local-pref is not sent, so a change of it alone sends nothing
  assert.equal(sent(change.actions).length, 0);
  const withdraw = decide(CONFIG, change.state, { type: "routes", routes: [ROUTES[1]!] }, 0.5);
  assert.deepEqual(sent(withdraw.actions), [
    { type: "update", update: { withdrawn: ["198.51.100.7/32"], attributes: {}, nlri: [] } },
  ]);
  const refresh = decide(
    CONFIG,
    withdraw.state,
    received({ type: "route-refresh", routeRefresh: { afi: 2, safi: 1 } }),
    0.5,
  );
  assert.equal(sent(refresh.actions).length, 1);
  assert.equal(
    decide(CONFIG, withdraw.state, received({ type: "route-refresh", routeRefresh: { afi: 25, safi: 70 } }), 0.5).rule,
    "refresh-ignored",
  );

  const badOrigin = Buffer.from(
    "ffffffffffffffffffffffffffffffff0029020000000e40010103400200400304c612000118c61200",
    "hex",
  );
  const ignored = decide(CONFIG, withdraw.state, received(decodeMessage(badOrigin) as Message), 0.5);
  assert.deepEqual([ignored.rule, ignored.state.phase], ["update-treat-as-withdraw", "established"]);
  const badLength = Buffer.from(encodeMessage({ type: "keepalive" }));
  badLength.writeUInt16BE(18, 16);
  const reset = decide(CONFIG, withdraw.state, received(decodeMessage(badLength) as Message), 0.5);
  assert.deepEqual([reset.rule, reset.state.phase], ["message-refused", "idle"]);
  assert.equal(
    notificationName((sent(reset.actions)[0] as { notification: { code: number; subcode: number } }).notification),
    "message-header/bad-message-length",
  );
});

test("timers: the hold timer's expiry sends its NOTIFICATION; hold time 0 arms neither timer; a connect timeout backs off", () => {
  const up = run(UP);
  const expired = decide(CONFIG, up.state, { type: "timer", timer: "hold" }, 0.5);
  assert.equal(expired.rule, "hold-timer-expired");
  assert.equal(
    notificationName((sent(expired.actions)[0] as { notification: { code: number; subcode: number } }).notification),
    "hold-timer-expired/unspecific",
  );
  const zero = run(UP.slice(0, 3), { ...CONFIG, holdTime: 0 });
  assert.ok(!zero.actions.some((a) => a.type === "arm"), "no timer with hold time 0");
  assert.equal(run([UP[0]!, { type: "timer", timer: "hold" }]).rule, "connect-timeout");
  const stopped = run([...UP, { type: "stop" }]);
  assert.equal(stopped.rule, "stopped");
  assert.equal(notificationName((sent(stopped.actions)[0] as { notification: { code: number; subcode: number } })
    .notification), "cease/administrative-shutdown");
  // A graceful restart's shutdown: closed without Cease, which would make the peer drop our routes (RFC 4724 §4.1).
  const restarting = run([...UP, { type: "stop", restarting: true }]);
  assert.deepEqual([restarting.rule, restarting.reason, sent(restarting.actions)],
    ["stopped", "closed without Cease (restarting)", []]);
  assert.ok(restarting.actions.some((a) => a.type === "close"));
});

test("BFD down (RFC 5882): the session closes at once without a NOTIFICATION, and reconnects after its backoff", () => {
  const up = run(UP);
  const down = decide(CONFIG, up.state, { type: "bfd", up: false }, 0.5);
  assert.equal(down.rule, "bfd-down");
  assert.equal(down.state.phase, "idle");
  assert.deepEqual(sent(down.actions), []);
  assert.ok(down.actions.some((a) => a.type === "close"));
  assert.ok(down.actions.some((a) => a.type === "arm" && a.timer === "retry"), "the backoff, as for any failure");
  // BFD still down: the next attempt is made all the same (a router may run BFD only for a live session), and the
  // peer's connection taken
  const retry = decide(CONFIG, down.state, { type: "timer", timer: "retry" }, 0.5);
  assert.equal(retry.rule, "connect");
  assert.deepEqual(decide(CONFIG, down.state, { type: "incoming" }, 0.5).rule, "accepted");
  // BFD coming up, or down again while idle, changes nothing
  assert.deepEqual(decide(CONFIG, up.state, { type: "bfd", up: true }, 0.5).actions, []);
  assert.deepEqual(decide(CONFIG, down.state, { type: "bfd", up: false }, 0.5).actions, []);
  // The peer's connection waiting for the collision's outcome runs over the same path: closed too, not carried on
  // (found by the property test below).
  const waiting = run([{ type: "start" }, { type: "incoming" }]);
  const both = decide(CONFIG, waiting.state, { type: "bfd", up: false }, 0.5);
  assert.deepEqual([both.state.phase, both.state.incoming], ["idle", false]);
  assert.deepEqual(both.actions.filter((a) => a.type === "close"), [{ type: "close", on: "incoming" }, { type: "close" }]);
});

test("graceful restart: the R bit only before the first session, forwarding kept for every family", () => {
  const config = { ...CONFIG, gracefulRestart: { restartTime: 120, restarting: true } };
  const first = sent(run(UP.slice(0, 2), config).actions)[0];
  assert.ok(first?.type === "open");
  assert.deepEqual(first.open.capabilities.gracefulRestart, {
    restarting: true,
    restartTime: 120,
    families: [
      { family: 4, forwarding: true },
      { family: 6, forwarding: true },
    ],
  });
  const dropped = run(
    [...UP, { type: "closed", reason: "test" }, { type: "timer", timer: "retry" }, { type: "connected" }],
    config,
  );
  const second = sent(dropped.actions)[0];
  assert.ok(second?.type === "open" && second.open.capabilities.gracefulRestart?.restarting === false);
});

test("backoff doubles from 1 s to 60 s with ±25 % jitter (at most 75 s)", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 40 }),
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      (failures, jitter) => {
        const base = Math.min(BACKOFF_MAX, 2 ** (failures - 1));
        const seconds = backoffSeconds(failures, jitter);
        assert.ok(seconds >= base * 0.75 && seconds <= base * 1.25);
      },
    ),
  );
});

test("any event sequence: no throw, every failure closes and arms the retry, established only after the handshake", () => {
  const event = fc.oneof(
    fc.constantFrom<SessionEvent>(
      { type: "start" },
      { type: "stop" },
      { type: "connected" },
      { type: "incoming" },
      { type: "closed", reason: "x" },
      { type: "timer", timer: "retry" },
      { type: "timer", timer: "hold" },
      { type: "timer", timer: "keepalive" },
      { type: "bfd", up: false },
      { type: "bfd", up: true },
    ),
    fc
      .constantFrom<Message>(
        { type: "open", open: PEER_OPEN },
        { type: "keepalive" },
        { type: "notification", notification: { code: 6, subcode: 2, data: Buffer.alloc(0) } },
        { type: "route-refresh", routeRefresh: { afi: 1, safi: 1 } },
      )
      .map(received),
    fc.subarray(ROUTES).map((routes): SessionEvent => ({ type: "routes", routes })),
  );
  fc.assert(
    fc.property(fc.array(event, { maxLength: 40 }), (events) => {
      let state = initialState();
      for (const e of events) {
        const before = state.phase;
        const decision = decide(CONFIG, state, e, 0.3);
        // BFD down drops a session that is not idle, without a NOTIFICATION
        if (e.type === "bfd" && !e.up && before !== "idle" && before !== "stopped")
          assert.ok(decision.state.phase === "idle" && sent(decision.actions).length === 0, before);
        if (decision.state.phase === "established" && before !== "established") assert.equal(before, "open-confirm");
        if (decision.state.phase === "idle" && before !== "idle")
          assert.ok(
            decision.actions.some((a) => a.type === "close") &&
              decision.actions.some((a) => a.type === "arm" && a.timer === "retry"),
          );
        for (const message of sent(decision.actions)) assert.ok(encodeMessage(message).length <= 4096);
        state = decision.state;
      }
    }),
    { numRuns: 500 },
  );
});

test("the RIB-out: the differences only, packed into UPDATEs of at most 4096 bytes, and applying them gives the desired set", () => {
  const route = fc
    .tuple(fc.nat(4095), fc.boolean(), fc.nat(3))
    .map(([n, v6, attrs]): Route =>
      v6
        ? { prefix: `2001:db8::${n.toString(16)}/128`, nextHop: "fd00::1", communities: [`65001:${attrs}`] }
        : { prefix: `198.51.${n >> 8}.${n & 255}/32`, nextHop: "198.18.0.1", localPref: 100 + attrs },
    );
  const routes = fc.uniqueArray(route, { maxLength: 1500, selector: (r) => r.prefix });
  fc.assert(
    fc.property(routes, routes, fc.boolean(), (before, after, ibgp) => {
      const peer = { myAsn: 65001, ibgp, families: [4, 6] as (4 | 6)[] };
      const first = planUpdates(new Map(), before, peer);
      const second = planUpdates(first.advertised, after, peer);
      const known = new Map(first.advertised);
      for (const update of second.updates) {
        assert.ok(encodeMessage({ type: "update", update }).length <= 4096);
        for (const prefix of [...update.withdrawn, ...(update.attributes.mpUnreach?.withdrawn ?? [])])
          known.delete(prefix);
        for (const prefix of [...update.nlri, ...(update.attributes.mpReach?.nlri ?? [])]) known.set(prefix, "sent");
      }
      assert.deepEqual([...known.keys()].sort(), after.map((r) => r.prefix).sort());
      assert.equal(
        planUpdates(second.advertised, after, peer).updates.length,
        0,
        "nothing to send when nothing changed",
      );
    }),
    { numRuns: 30 },
  );
});

/** What a decision does, in short: "send OPEN", "send(incoming) cease/connection-collision-resolution", "accept". */
function effects(actions: SessionAction[]): string[] {
  return actions.flatMap((a) => {
    const on = "on" in a && a.on ? `(${a.on})` : "";
    if (a.type === "send")
      return [
        `send${on} ${a.message.type === "notification" ? notificationName(a.message.notification) : a.message.type.toUpperCase()}`,
      ];
    return a.type === "close" || a.type === "accept" ? [`${a.type}${on}`] : [];
  });
}

const onIncoming = (message: Message): SessionEvent => ({ type: "received", message, on: "incoming" });
const HIGHER_PEER: Open = { ...PEER_OPEN, identifier: "198.18.0.9" };
const LOWER_PEER: Open = { ...PEER_OPEN, identifier: "10.0.0.1" };
const COLLISION = "cease/connection-collision-resolution";

test("collisions (RFC 4271 §6.8): the connection opened by the higher BGP identifier survives, the other gets Cease 7", () => {
  const opened: SessionEvent[] = [{ type: "start" }, { type: "connected" }];
  const cases: [string, SessionEvent[], string, string, string[]][] = [
    [
      "idle (backing off): the peer's connection is taken",
      [{ type: "start" }, { type: "closed", reason: "refused" }, { type: "incoming" }],
      "accepted",
      "open-sent",
      ["accept", "send OPEN"],
    ],
    [
      "connecting: our OPEN goes on the peer's connection, ours goes on connecting",
      [{ type: "start" }, { type: "incoming" }],
      "collision-pending",
      "connecting",
      ["send(incoming) OPEN"],
    ],
    [
      "connecting, the peer's OPEN on its connection, ours higher: its connection closed, ours goes on connecting",
      [{ type: "start" }, { type: "incoming" }, onIncoming({ type: "open", open: LOWER_PEER })],
      "collision-kept-ours",
      "connecting",
      [`send(incoming) ${COLLISION}`, "close(incoming)"],
    ],
    [
      "connecting, the peer's OPEN on its connection, the peer's higher: taken, ours dropped",
      [{ type: "start" }, { type: "incoming" }, onIncoming({ type: "open", open: HIGHER_PEER })],
      "collision-took-peers",
      "open-confirm",
      [`send ${COLLISION}`, "accept", "send KEEPALIVE"],
    ],
    [
      "connecting, ours refused: the peer's connection carries on",
      [{ type: "start" }, { type: "incoming" }, { type: "closed", reason: "refused" }],
      "connection-lost",
      "open-sent",
      ["accept"],
    ],
    [
      "open-sent: our OPEN goes on the peer's connection too, until an identifier is known",
      [...opened, { type: "incoming" }],
      "collision-pending",
      "open-sent",
      ["send(incoming) OPEN"],
    ],
    [
      "open-sent, the peer's OPEN on its connection, ours higher: its connection closed",
      [...opened, { type: "incoming" }, onIncoming({ type: "open", open: LOWER_PEER })],
      "collision-kept-ours",
      "open-sent",
      [`send(incoming) ${COLLISION}`, "close(incoming)"],
    ],
    [
      "open-sent, the peer's OPEN on its connection, the peer's higher: ours closed, its connection confirmed",
      [...opened, { type: "incoming" }, onIncoming({ type: "open", open: HIGHER_PEER })],
      "collision-took-peers",
      "open-confirm",
      [`send ${COLLISION}`, "accept", "send KEEPALIVE"],
    ],
    [
      "open-sent, the peer's OPEN on ours, ours higher: confirmed, its connection closed",
      [...opened, { type: "incoming" }, received({ type: "open", open: LOWER_PEER })],
      "collision-kept-ours",
      "open-confirm",
      ["send KEEPALIVE", `send(incoming) ${COLLISION}`, "close(incoming)"],
    ],
    [
      "open-sent, the peer's OPEN on ours, the peer's higher: ours closed, its connection (OPEN sent) waits",
      [...opened, { type: "incoming" }, received({ type: "open", open: HIGHER_PEER })],
      "collision-took-peers",
      "open-sent",
      [`send ${COLLISION}`, "accept"],
    ],
    [
      "open-confirm, ours higher: the peer's new connection closed at once",
      [...opened, received({ type: "open", open: LOWER_PEER }), { type: "incoming" }],
      "collision-kept-ours",
      "open-confirm",
      [`send(incoming) ${COLLISION}`, "close(incoming)"],
    ],
    [
      "open-confirm, the peer's higher: ours closed, OPEN on its connection",
      [...opened, received({ type: "open", open: HIGHER_PEER }), { type: "incoming" }],
      "collision-took-peers",
      "open-sent",
      [`send ${COLLISION}`, "accept", "send OPEN"],
    ],
    [
      "established: the new connection closed, whatever the identifiers",
      [...opened, received({ type: "open", open: HIGHER_PEER }), received({ type: "keepalive" }), { type: "incoming" }],
      "collision-established",
      "established",
      [`send(incoming) ${COLLISION}`, "close(incoming)"],
    ],
    [
      "stopped: closed unread",
      [{ type: "stop" }, { type: "incoming" }],
      "incoming-refused",
      "stopped",
      ["close(incoming)"],
    ],
    [
      "the peer's connection taken, then another from it: it gave the first up",
      [{ type: "start" }, { type: "closed", reason: "refused" }, { type: "incoming" }, { type: "incoming" }],
      "incoming-replaced",
      "open-sent",
      ["accept", "send OPEN"],
    ],
    [
      "ours fails while the peer's waits: the peer's carries on",
      [...opened, { type: "incoming" }, { type: "closed", reason: "reset" }],
      "connection-lost",
      "open-sent",
      ["accept"],
    ],
    [
      "the waiting connection sends no OPEN first: closed, ours untouched",
      [...opened, { type: "incoming" }, onIncoming({ type: "keepalive" })],
      "incoming-refused",
      "open-sent",
      ["send(incoming) fsm/unexpected-message-in-open-sent", "close(incoming)"],
    ],
    [
      "the waiting connection's OPEN has another ASN: refused, ours untouched",
      [...opened, { type: "incoming" }, onIncoming({ type: "open", open: { ...HIGHER_PEER, asn: 65011 } })],
      "incoming-refused",
      "open-sent",
      ["send(incoming) open/bad-peer-as", "close(incoming)"],
    ],
    [
      "the waiting connection closes: nothing else changes",
      [...opened, { type: "incoming" }, { type: "closed", reason: "x", on: "incoming" }],
      "incoming-closed",
      "open-sent",
      [],
    ],
  ];
  for (const [name, events, rule, phase, expected] of cases) {
    const decision = run(events);
    assert.deepEqual([decision.rule, decision.state.phase, effects(decision.actions)], [rule, phase, expected], name);
    assert.equal(decision.state.incoming, rule === "collision-pending", `${name}: a connection waits`);
  }
  assert.equal(
    run([...opened, { type: "incoming" }, { type: "stop" }]).actions.filter((a) => a.type === "close").length,
    2,
    "stop closes both connections",
  );
});

/**
 * Two speakers (two FSMs) and the TCP connections between them, delivered in any order the network allows (each
 * connection's bytes in order in each direction): the scheduler is fast-check's. Returns what happened.
 */
function collide(identifiers: [string, string], schedule: number[]) {
  type Side = 0 | 1;
  interface Connection {
    opener: Side;
    closedBy: Set<Side>;
  }
  interface Delivery {
    to: Side;
    connection: Connection;
    event: SessionEvent["type"];
    message?: Message;
  }
  const configs = identifiers.map((routerId, side) => ({
    ...CONFIG,
    myAsn: 65000 + side,
    peerAsn: 65001 - side,
    routerId,
  }));
  const states = [initialState(), initialState()];
  const current: (Connection | undefined)[] = [undefined, undefined];
  const waiting: (Connection | undefined)[] = [undefined, undefined];
  let flight: Delivery[] = [];
  const retries = [false, false];
  const survivors: { rule: string; opener: Side; side: Side }[] = [];
  const problems: string[] = [];
  const log: string[] = [];

  const closeBy = (side: Side, connection: Connection | undefined) => {
    if (!connection || connection.closedBy.has(side)) return;
    connection.closedBy.add(side);
    const other = (1 - side) as Side;
    if (!connection.closedBy.has(other)) flight.push({ to: other, connection, event: "closed" });
  };
  const apply = (side: Side, event: SessionEvent) => {
    const before = states[side]!.phase;
    const decision = decide(configs[side]!, states[side]!, event, 0.5);
    states[side] = decision.state;
    log.push(`${side} ${decision.rule}`);
    for (const action of decision.actions) {
      if (action.type === "connect") {
        const connection: Connection = { opener: side, closedBy: new Set() };
        current[side] = connection;
        const other = (1 - side) as Side;
        flight.push({ to: side, connection, event: "connected" }, { to: other, connection, event: "incoming" });
      } else if (action.type === "accept") {
        closeBy(side, current[side]);
        current[side] = waiting[side];
        waiting[side] = undefined;
      } else if (action.type === "send") {
        const connection = action.on === "incoming" ? waiting[side] : current[side];
        if (!connection) problems.push(`side ${side} sends on no connection (${decision.rule})`);
        else if (!connection.closedBy.has(side))
          flight.push({ to: (1 - side) as Side, connection, event: "received", message: action.message });
      } else if (action.type === "close") {
        closeBy(side, action.on === "incoming" ? waiting[side] : current[side]);
        if (action.on === "incoming") waiting[side] = undefined;
        else current[side] = undefined;
      } else if (action.type === "arm" && action.timer === "retry") retries[side] = true;
    }
    if (event.type !== "stop" && before === "established" && decision.state.phase !== "established")
      problems.push(`side ${side} left established: ${decision.rule} ${decision.reason}`);
    if (decision.rule === "collision-kept-ours" || decision.rule === "collision-took-peers")
      survivors.push({ rule: decision.rule, opener: current[side]!.opener, side });
    if ((waiting[side] !== undefined) !== states[side]!.incoming)
      problems.push(`side ${side}: a waiting connection ${waiting[side] ? "not " : ""}in the state (${decision.rule})`);
    if (states[side]!.phase === "established" && (!current[side] || waiting[side]))
      problems.push(`side ${side} established without exactly one connection`);
  };
  const deliver = ({ to, connection, event, message }: Delivery) => {
    if (connection.closedBy.has(to)) return;
    const on = connection === waiting[to] ? ({ on: "incoming" } as const) : connection === current[to] ? {} : undefined;
    if (event === "incoming") {
      if (waiting[to]) {
        const old = waiting[to];
        waiting[to] = undefined;
        closeBy(to, old);
        apply(to, { type: "closed", reason: "replaced", on: "incoming" });
      }
      waiting[to] = connection;
      apply(to, { type: "incoming" });
      if (connection !== waiting[to] && connection !== current[to]) closeBy(to, connection);
    } else if (on && event === "connected") apply(to, { type: "connected" });
    else if (on && event === "received") apply(to, { type: "received", message: message!, ...on });
    else if (on && event === "closed") {
      if (on.on) waiting[to] = undefined;
      connection.closedBy.add(to);
      apply(to, { type: "closed", reason: "closed by the peer", ...on });
    }
  };

  apply(0, { type: "start" });
  apply(1, { type: "start" });
  for (let step = 0; step < 400; step++) {
    if (flight.length === 0) {
      const idle = ([0, 1] as Side[]).find((side) => retries[side] && states[side]!.phase === "idle");
      if (idle === undefined) break;
      retries[idle] = false;
      apply(idle, { type: "timer", timer: "retry" });
      continue;
    }
    // any delivery that is first on its connection in its direction
    const ready = flight.filter(
      (d, i) => !flight.slice(0, i).some((e) => e.connection === d.connection && e.to === d.to),
    );
    const next = ready[(schedule[step % schedule.length] ?? 0) % ready.length]!;
    flight = flight.filter((d) => d !== next);
    deliver(next);
  }
  return { states, current, survivors, problems, log };
}

test("two speakers connect at once, any delivery order: one session, never reset, each collision resolved per §6.8", () => {
  fc.assert(
    fc.property(
      fc.constantFrom<[string, string]>(
        ["198.18.0.1", "198.18.0.2"],
        ["198.18.0.9", "198.18.0.2"],
        ["10.0.0.1", "192.0.2.1"],
      ),
      fc.array(fc.nat(1000), { minLength: 1, maxLength: 60 }),
      (identifiers, schedule) => {
        const { states, current, survivors, problems, log } = collide(identifiers, schedule);
        assert.deepEqual(problems, [], log.join(", "));
        const higher = oursSurvives(identifiers[0], identifiers[1]) ? 0 : 1;
        for (const survivor of survivors)
          assert.equal(survivor.opener, higher, `${survivor.rule} on side ${survivor.side}`);
        assert.deepEqual(
          states.map((s) => s.phase),
          ["established", "established"],
          `both sides end established: ${log.join(", ")}`,
        );
        assert.equal(current[0], current[1], "on one connection");
      },
    ),
    { numRuns: 1000 },
  );
});
