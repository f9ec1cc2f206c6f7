// The shell the session adapters (bfd/session.ts, bgp/session.ts) keep around their pure state machines (bfd/fsm.ts,
// bgp/fsm.ts): an event goes to decide(), its state is kept and its actions performed in order; the timer actions are
// the runner's own (named timers: an arm replaces that name's running timer, a fired timer comes back as an event),
// every other action is the adapter's. Events are applied one at a time: one raised while a decision is being acted
// on (an onDecision hook that stops the session, an action whose callback feeds an event back) waits until all its
// actions are performed, so none is performed against a state that has already moved on.

/** Arms a named timer (replacing the running one of that name) or cancels it. */
export type TimerAction<T extends string> = { type: "arm"; timer: T; ms: number } | { type: "disarm"; timer: T };

/** What a named timer feeds back when it fires. */
export interface TimerEvent<T extends string> {
  type: "timer";
  timer: T;
}

/** What decide() returns: the next state and the actions to perform (the rest, rule and reason, is onDecision's). */
interface Decided {
  state: unknown;
  actions: readonly { type: string }[];
}

type ActionOf<D extends Decided> = D["actions"][number];

export interface MachineOptions<E, T extends string, D extends Decided> {
  initial: D["state"];
  /** The state machine, pure: the state and an event in, the next state and the actions to perform out. */
  decide: (state: D["state"], event: E | TimerEvent<T>) => D;
  /** Performs an action that is not a timer's (sends, connects, tells a client). */
  perform: (action: Exclude<ActionOf<D>, TimerAction<T>>) => void;
  /** Every decision, before its actions are performed: for the log (rule, reason) and for tests. */
  onDecision?: ((decision: D, event: E | TimerEvent<T>) => void) | undefined;
}

export interface Machine<S, E> {
  /** Applies the event now, or, while another is being applied, right after it (and after those before it). */
  apply(event: E): void;
  state(): S;
}

export function runMachine<E, T extends string, D extends Decided>(
  options: MachineOptions<E, T, D>,
): Machine<D["state"], E | TimerEvent<T>> {
  const { decide, perform, onDecision } = options;
  let state = options.initial;
  const timers = new Map<T, NodeJS.Timeout>();
  const queue: (E | TimerEvent<T>)[] = [];
  let applying = false;

  const isTimerAction = (action: ActionOf<D> | TimerAction<T>): action is TimerAction<T> =>
    action.type === "arm" || action.type === "disarm";

  function step(event: E | TimerEvent<T>) {
    const decision = decide(state, event);
    state = decision.state;
    onDecision?.(decision, event);
    for (const action of decision.actions) {
      if (!isTimerAction(action)) {
        perform(action as Exclude<ActionOf<D>, TimerAction<T>>);
        continue;
      }
      clearTimeout(timers.get(action.timer));
      timers.delete(action.timer);
      if (action.type === "arm") {
        const timer = setTimeout(() => apply({ type: "timer", timer: action.timer }), action.ms);
        timers.set(action.timer, timer.unref()); // a session's timers never keep the process alive on their own
      }
    }
  }

  function apply(event: E | TimerEvent<T>) {
    queue.push(event);
    if (applying) return;
    applying = true;
    try {
      for (let next = queue.shift(); next !== undefined; next = queue.shift()) step(next);
    } finally {
      // an action that threw (a socket that could not be had) ends this turn; what it raised is not applied later
      applying = false;
      queue.length = 0;
    }
  }

  return { apply, state: () => state };
}
