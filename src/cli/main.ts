// The shell around each program's entry point: exit codes, one-line errors, --help, and an orderly stop
// on SIGTERM/SIGINT (Kubernetes sends SIGTERM, then SIGKILL after the grace period).
import { ConfigError } from "../kube/config.ts";
import { HelpRequested, UsageError, usage } from "./flags.ts";

export interface MainContext {
  /** Command-line arguments after node and the script. */
  argv: string[];
  env: NodeJS.ProcessEnv;
  /** Called on SIGTERM/SIGINT, and when the program ends or fails, before the process exits. */
  onShutdown(hook: () => void | Promise<void>): void;
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
export function exitFor(program: string, err: unknown, verbosity: number): Exit {
  if (err instanceof HelpRequested) return { code: 0, stream: "stdout", text: usage(program, err.table) };
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

/**
 * Runs `fn` as the program: resolving means done (exit 0), throwing exits per exitFor. The shutdown
 * hook runs before any exit; a second signal during shutdown exits 1 at once.
 */
export function runMain(program: string, fn: (ctx: MainContext) => void | Promise<void>): void {
  let shutdown: (() => void | Promise<void>) | undefined;
  let verbosity = 0;
  let exiting = false;

  const finish = async (exit: Exit | undefined) => {
    if (exiting) return;
    exiting = true;
    try {
      await shutdown?.();
    } catch (err) {
      exit ??= exitFor(program, err, verbosity);
    }
    if (exit) (exit.stream === "stdout" ? process.stdout : process.stderr).write(exit.text);
    process.exit(exit?.code ?? 0);
  };

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, () => {
      if (exiting) process.exit(1);
      void finish(undefined);
    });
  }
  // State is unknown after an uncaught error: report it on one line and leave without the hook.
  process.on("uncaughtException", (err) => {
    const exit = exitFor(program, err, verbosity);
    process.stderr.write(exit.text);
    process.exit(exit.code);
  });

  const ctx: MainContext = {
    argv: process.argv.slice(2),
    env: process.env,
    onShutdown: (hook) => {
      shutdown = hook;
    },
    setVerbosity: (v) => {
      verbosity = v;
    },
  };
  Promise.resolve()
    .then(() => fn(ctx))
    .then(
      () => finish(undefined),
      (err: unknown) => finish(exitFor(program, err, verbosity)),
    );
}
