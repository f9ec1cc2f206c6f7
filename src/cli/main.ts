// The shell around each program's entry point: exit codes, one-line errors, --help, and an orderly stop
// on SIGTERM/SIGINT (Kubernetes sends SIGTERM, then SIGKILL after the grace period).
//
// A program registers how to stop each thing right after it starts it (`ctx.onShutdown`), and the
// hooks run in reverse order, like Go's defer: what started last (the loop) stops first, what every
// other part uses (the API client) closes last. So a program's shutdown order is its start order.
import { ConfigError } from "../kube/config.ts";
import { type Command, HelpRequested, UsageError, usage, VersionRequested } from "./flags.ts";
import { versionText } from "./version.ts";

export type ShutdownHook = () => void | Promise<void>;

export interface MainContext {
  /** Command-line arguments after node and the script. */
  argv: string[];
  env: NodeJS.ProcessEnv;
  /** Aborted on SIGTERM/SIGINT and when the program returns or fails, before any hook runs. */
  signal: AbortSignal;
  /** Resolves when `signal` aborts: a long-running program ends with `await ctx.untilStopped()`. */
  untilStopped(): Promise<void>;
  /**
   * Resolves true once `work` resolves, false if the program is stopped first: a start-up wait (caches
   * syncing) that a signal ends, written once for every program.
   */
  unlessStopped(work: Promise<unknown>): Promise<boolean>;
  /**
   * Adds a hook run before the process exits (on a signal, or when the program returns or fails):
   * hooks run one at a time, the last added first. A failing hook does not stop the others; the
   * first failure is the program's one-line error (exit 1) unless it already failed otherwise.
   */
  onShutdown(hook: ShutdownHook): void;
  /** From this verbosity on, unexpected errors print their stack (set it once flags are parsed). */
  setVerbosity(verbosity: number): void;
}

export interface Exit {
  code: number;
  stream: "stdout" | "stderr";
  text: string;
}

const STACK_VERBOSITY = 4;

/** What the process prints and returns when `fn` throws `err`. */
export function exitFor(program: string, err: unknown, verbosity: number, commands: readonly Command[] = []): Exit {
  if (err instanceof HelpRequested) return { code: 0, stream: "stdout", text: usage(program, err.table, commands) };
  if (err instanceof VersionRequested) return { code: 0, stream: "stdout", text: versionText(program) };
  const message = oneLine(err instanceof Error ? err.message : String(err));
  if (err instanceof UsageError || err instanceof ConfigError) {
    return { code: 2, stream: "stderr", text: `${program}: ${message}\n` };
  }
  const stack = verbosity >= STACK_VERBOSITY && err instanceof Error && err.stack ? `${err.stack}\n` : "";
  return { code: 1, stream: "stderr", text: `${program}: ${message}\n${stack}` };
}

function oneLine(text: string): string {
  return text.trim().replace(/\s*\n\s*/g, " | ") || "unknown error";
}

/** Runs the hooks last-added first, each once, also those added meanwhile; resolves with the first failure. */
export async function runHooks(hooks: ShutdownHook[]): Promise<{ failed: unknown } | undefined> {
  let failure: { failed: unknown } | undefined;
  for (let hook = hooks.pop(); hook; hook = hooks.pop()) {
    try {
      await hook();
    } catch (err) {
      failure ??= { failed: err };
    }
  }
  return failure;
}

/**
 * Runs `fn` as the program: resolving means done (exit 0), throwing exits per exitFor. The shutdown
 * hooks run before any exit; a second signal during shutdown exits 1 at once.
 */
export function runMain(
  program: string,
  fn: (ctx: MainContext) => void | Promise<void>,
  commands: readonly Command[] = [],
): void {
  const hooks: ShutdownHook[] = [];
  const stop = new AbortController();
  const stopped = new Promise<void>((resolve) => stop.signal.addEventListener("abort", () => resolve()));
  let verbosity = 0;

  const finish = async (exit: Exit | undefined) => {
    if (stop.signal.aborted) return;
    stop.abort();
    const failure = await runHooks(hooks);
    if (failure) exit ??= exitFor(program, failure.failed, verbosity, commands);
    if (exit) (exit.stream === "stdout" ? process.stdout : process.stderr).write(exit.text);
    process.exit(exit?.code ?? 0);
  };

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, () => {
      if (stop.signal.aborted) {
        process.stderr.write(`${program}: ${signal} during shutdown, exiting at once\n`);
        process.exit(1);
      }
      void finish(undefined);
    });
  }
  // State is unknown after an uncaught error: report it on one line and leave without the hooks.
  process.on("uncaughtException", (err) => {
    const exit = exitFor(program, err, verbosity, commands);
    process.stderr.write(exit.text);
    process.exit(exit.code);
  });

  const ctx: MainContext = {
    argv: process.argv.slice(2),
    env: process.env,
    signal: stop.signal,
    untilStopped: () => stopped,
    unlessStopped: (work) => Promise.race([work.then(() => true), stopped.then(() => false)]),
    onShutdown: (hook) => {
      hooks.push(hook);
    },
    setVerbosity: (v) => {
      verbosity = v;
    },
  };
  Promise.resolve()
    .then(() => fn(ctx))
    .then(
      () => finish(undefined),
      (err: unknown) => finish(exitFor(program, err, verbosity, commands)),
    );
}
