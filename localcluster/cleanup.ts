// Last-resort cleanup for things a test starts that must not outlive its process (processes,
// network namespaces, temp folders): run on normal exit and on SIGINT/SIGTERM/SIGHUP.
// Cleanups must be synchronous; orderly async teardown belongs in the test's own after() hooks.

const cleanups = new Set<() => void>();
let installed = false;

/** Registers a synchronous cleanup; returns a function that unregisters it (after orderly teardown). */
export function onExit(cleanup: () => void): () => void {
  if (!installed) {
    installed = true;
    process.once("exit", runAll);
    for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
      process.once(signal, () => {
        runAll();
        process.kill(process.pid, signal); // once() removed our listener: the default action now applies
      });
    }
  }
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

function runAll(): void {
  for (const cleanup of cleanups) {
    try {
      cleanup();
    } catch {
      // best effort: one failing cleanup must not stop the others
    }
  }
  cleanups.clear();
}
