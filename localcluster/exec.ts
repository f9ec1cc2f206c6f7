// Runs a command for tests and tooling: resolves with stdout, rejects with a one-line error
// naming the command and the tail of its stderr.
import { execFileSync, spawn } from "node:child_process";

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  input?: string;
  /** Stream the command's output to ours (long builds) instead of capturing it. */
  inherit?: boolean;
}

export function run(command: string, args: string[], options: RunOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: [
        options.input === undefined ? "ignore" : "pipe",
        options.inherit ? "inherit" : "pipe",
        options.inherit ? "inherit" : "pipe",
      ],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk;
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk;
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (code === 0) return resolve(stdout);
      const tail = stderr.trim().split("\n").slice(-5).join(" | ");
      reject(new Error(`${command} ${args.join(" ")} failed (${signal ?? `exit ${code}`}): ${tail}`));
    });
  });
}

/** Whether a process with this pid exists (signal 0 checks without signalling). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `run`, synchronously, for what also runs from the exit hook (teardown). */
export const sh = (command: string, args: string[]) => execFileSync(command, args, { stdio: "pipe", encoding: "utf8" });

/** `sh` for a removal whose failure means it is already gone. */
export const quietly = (command: string, args: string[]) => {
  try {
    sh(command, args);
  } catch {
    // already gone
  }
};
