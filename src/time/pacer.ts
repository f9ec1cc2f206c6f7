// The pace of a pass that reads every object and runs again after any change (the pool controller's allocation, an
// agent's view of what it announces): the first change after a quiet spell runs it at once, and while changes keep
// coming it runs at most every `minIntervalMs`, and spends at most a quarter of the time in it however long it takes.
// 1,000 Services created at once otherwise made every agent run one pass per watch event, each over every Service:
// most of a core on a loaded node, kubelet's liveness probe timed out, and the agents were restarted. kube-proxy
// paces its syncs alike (--iptables-min-sync-period).

/** A pass may take at most 1 / (1 + IDLE_RATIO) of the time. */
const IDLE_RATIO = 3;

export class Pacer {
  private nextMs = -Infinity;
  private readonly minIntervalMs: number;
  private readonly now: () => number;

  constructor(minIntervalMs: number, now: () => number = () => performance.now()) {
    this.minIntervalMs = minIntervalMs;
    this.now = now;
  }

  /** Milliseconds until the pass may run again; 0: now. */
  wait(): number {
    return Math.max(0, this.nextMs - this.now());
  }

  /** Runs the pass, and sets when the next one may run from how long this one took. */
  run<T>(pass: () => T): T {
    const startedMs = this.now();
    try {
      return pass();
    } finally {
      const endedMs = this.now();
      this.nextMs = endedMs + Math.max(this.minIntervalMs, IDLE_RATIO * (endedMs - startedMs));
    }
  }
}
