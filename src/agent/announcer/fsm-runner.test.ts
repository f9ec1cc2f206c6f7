// The runner (fsm-runner.ts) with a toy machine whose events carry the actions it decides, on node:test's fake
// clock: actions in order after the state is stored, named timers (arm, re-arm, disarm, fire back as events), events
// one at a time when an action or onDecision raises another, and a throwing action that ends only its own turn.
import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import fc from "fast-check";
import { runMachine, type TimerAction, type TimerEvent } from "./fsm-runner.ts";

type Name = "a" | "b";
type Action = TimerAction<Name> | { type: "note"; text: string } | { type: "raise"; event: Event } | { type: "throw" };
type Event = { type: "do"; name: string; actions: Action[] } | TimerEvent<Name>;

const eventName = (event: Event) => (event.type === "do" ? event.name : `timer ${event.timer}`);

/** A machine whose state is the names of the events it decided on; what it performs and decides is logged. */
function toy() {
  const log: string[] = [];
  const machine = runMachine({
    initial: [] as string[],
    decide: (state: string[], event: Event) => ({
      state: [...state, eventName(event)],
      actions: event.type === "do" ? event.actions : [],
    }),
    onDecision: (decision, event) => log.push(`decided ${eventName(event)} (state ${decision.state.length})`),
    perform(action) {
      if (action.type === "throw") throw new Error("no socket");
      if (action.type === "raise") machine.apply(action.event);
      log.push(`${action.type} ${action.type === "note" ? action.text : eventName(action.event)}`);
    },
  });
  return { machine, log };
}

const run = (name: string, ...actions: Action[]): Event => ({ type: "do", name, actions });
const note = (text: string): Action => ({ type: "note", text });

function fakeClock(t: TestContext) {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  return (ms: number) => t.mock.timers.tick(ms);
}

test("actions are performed in order, after the state is stored and onDecision has seen the decision", () => {
  const { machine, log } = toy();
  const states: number[] = [];
  machine.apply(run("first", note("1"), note("2")));
  states.push(machine.state().length);
  assert.deepEqual(log, ["decided first (state 1)", "note 1", "note 2"]);
  assert.deepEqual(states, [1]);
});

test("a named timer fires back as an event; a re-arm replaces it, a disarm cancels it, names are independent", (t) => {
  const tick = fakeClock(t);
  const { machine, log } = toy();
  machine.apply(run("arm", { type: "arm", timer: "a", ms: 100 }, { type: "arm", timer: "b", ms: 300 }));
  tick(99);
  assert.deepEqual(machine.state(), ["arm"]);
  tick(1);
  assert.deepEqual(machine.state(), ["arm", "timer a"]);
  machine.apply(run("re-arm", { type: "arm", timer: "b", ms: 500 })); // at 100: b now due at 600, not 300
  tick(400);
  assert.deepEqual(machine.state(), ["arm", "timer a", "re-arm"]);
  tick(100);
  assert.deepEqual(machine.state(), ["arm", "timer a", "re-arm", "timer b"]);
  machine.apply(run("cancel", { type: "arm", timer: "a", ms: 50 }, { type: "disarm", timer: "a" }));
  machine.apply(run("cancel unarmed", { type: "disarm", timer: "b" }));
  tick(10_000);
  assert.deepEqual(machine.state(), ["arm", "timer a", "re-arm", "timer b", "cancel", "cancel unarmed"]);
  assert.ok(!log.some((line) => line.startsWith("arm") || line.startsWith("disarm")), "timer actions are the runner's");
});

test("an event raised while a decision's actions run is applied after them, in the order raised", () => {
  const { machine, log } = toy();
  machine.apply(
    run(
      "outer",
      { type: "raise", event: run("inner 1", { type: "raise", event: run("innermost") }, note("i1")) },
      { type: "raise", event: run("inner 2") },
      note("outer done"),
    ),
  );
  assert.deepEqual(log, [
    "decided outer (state 1)",
    "raise inner 1",
    "raise inner 2",
    "note outer done",
    "decided inner 1 (state 2)",
    "raise innermost",
    "note i1",
    "decided inner 2 (state 3)",
    "decided innermost (state 4)",
  ]);
});

test("an event applied from onDecision waits for that decision's actions", () => {
  const order: string[] = [];
  const machine = runMachine({
    initial: 0,
    decide: (state: number, event: { type: "go" } | { type: "stop" } | TimerEvent<"t">) => ({
      state: state + 1,
      actions: [{ type: "note", text: event.type }],
    }),
    onDecision(_decision, event) {
      order.push(`decided ${event.type}`);
      if (event.type === "go") machine.apply({ type: "stop" }); // as a caller's log hook stopping the session
    },
    perform: (action) => order.push(`performed ${action.text}`),
  });
  machine.apply({ type: "go" });
  assert.deepEqual(order, ["decided go", "performed go", "decided stop", "performed stop"]);
  assert.equal(machine.state(), 2);
});

test("an action that throws reaches the caller; what its turn raised is dropped, and the next event is applied", () => {
  const { machine, log } = toy();
  assert.throws(
    () => machine.apply(run("connect", { type: "raise", event: run("raised") }, { type: "throw" }, note("never"))),
    /no socket/,
  );
  machine.apply(run("later", note("later")));
  assert.deepEqual(machine.state(), ["connect", "later"]);
  assert.deepEqual(log, ["decided connect (state 1)", "raise raised", "decided later (state 2)", "note later"]);
});

test("any sequence of arms, disarms and clock steps: the timers fire as a model of named deadlines says", (t) => {
  const tick = fakeClock(t);
  const name = fc.constantFrom<Name>("a", "b");
  const step = fc.oneof(
    fc.record({ op: fc.constant("arm" as const), timer: name, ms: fc.integer({ min: 1, max: 1000 }) }),
    fc.record({ op: fc.constant("disarm" as const), timer: name }),
    fc.record({ op: fc.constant("tick" as const), ms: fc.integer({ min: 0, max: 1500 }) }),
  );
  fc.assert(
    fc.property(fc.array(step, { maxLength: 40 }), (steps) => {
      const fired: string[] = []; // timer@step: the fake clock fires within a step, Date.now() already at its end
      let current = 0;
      const machine = runMachine({
        initial: undefined,
        decide: (_state: undefined, event: Event) => {
          if (event.type === "timer") fired.push(`${event.timer}@${current}`);
          return { state: undefined, actions: event.type === "do" ? event.actions : [] };
        },
        perform: () => {},
      });
      const deadlines = new Map<Name, number>(); // the model: when each armed timer is due
      const expected: string[] = [];
      for (const [index, s] of steps.entries()) {
        current = index;
        if (s.op === "tick") {
          const until = Date.now() + s.ms;
          const due = [...deadlines].filter(([, at]) => at <= until).sort((x, y) => x[1] - y[1]);
          for (const [timer] of due) {
            expected.push(`${timer}@${index}`);
            deadlines.delete(timer);
          }
          tick(s.ms);
        } else {
          deadlines.delete(s.timer); // a re-armed timer is due after those armed before it at the same time
          if (s.op === "arm") deadlines.set(s.timer, Date.now() + s.ms);
          const action: Action =
            s.op === "arm" ? { type: "arm", timer: s.timer, ms: s.ms } : { type: "disarm", timer: s.timer };
          machine.apply(run(s.op, action));
        }
      }
      machine.apply(run("end", { type: "disarm", timer: "a" }, { type: "disarm", timer: "b" }));
      assert.deepEqual(fired, expected);
    }),
  );
});
