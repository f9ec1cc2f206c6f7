// Starts speaker-fixture.ts, our speaker as a process of its own (to kill or stop), and collects the rule of each
// decision it prints.
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { onExit } from "../../localcluster/cleanup.ts";

const FIXTURE = path.join(import.meta.dirname, "speaker-fixture.ts");

export function startSpeaker(argument: object): { rules: string[]; child: ChildProcessWithoutNullStreams } {
  const child = spawn(process.execPath, [FIXTURE, JSON.stringify(argument)]);
  const forget = onExit(() => child.kill("SIGKILL"));
  child.once("exit", forget);
  const rules: string[] = [];
  createInterface({ input: child.stdout }).on("line", (line) => rules.push(line));
  return { rules, child };
}
