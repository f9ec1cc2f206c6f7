// Jittered exponential backoff and an abortable sleep, shared by every retry loop. The lowest layer: net/, kube/,
// the programs and localcluster/ all wait with it, so it imports nothing of ours.

export interface BackoffOptions {
  baseMs: number;
  capMs: number;
}

/** Delay before retry number `attempt` (0-based): exponential up to the cap, then jittered to 50–100%. */
export function backoffDelay(attempt: number, { baseMs, capMs }: BackoffOptions): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling * (0.5 + Math.random() * 0.5));
}

/** Resolves after `ms`, or early (without throwing) when the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
