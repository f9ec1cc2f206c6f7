// announce-fixture.ts run as a tool in a network namespace as root, a test's stand-in for another host on a link:
// `capture` (what crosses the link) or `claimer` (gratuitous ARP and unsolicited NAs on command). The lines it
// printed so far, a command on its stdin awaited until it says it is done, and its stop.
import { spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { onExit } from "../../localcluster/cleanup.ts";
import { waitFor } from "../../localcluster/wait.ts";

const FIXTURE = path.resolve(import.meta.dirname, "announce-fixture.ts");

/** What every line of the fixture may say besides its mode's own fields. */
export interface FixtureLine {
  ready?: boolean;
  done?: string;
}

/** The fixture in mode `mode` on `link` inside the namespace `netns` (its name under /run/netns). */
export function fixtureTool<Line extends FixtureLine>(netns: string, mode: "capture" | "claimer", link: string) {
  const child = spawn("nsenter", [`--net=/run/netns/${netns}`, process.execPath, FIXTURE, mode, link]);
  const forget = onExit(() => child.kill("SIGKILL"));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const lines: Line[] = [];
  createInterface({ input: child.stdout }).on("line", (line) => lines.push(JSON.parse(line) as Line));
  return {
    lines,
    ready: () => waitFor(`the ${mode} in ${netns} ready`, () => lines.some((line) => line.ready)),
    async send(command: string) {
      const before = lines.filter((line) => line.done === command).length;
      child.stdin.write(`${command}\n`);
      await waitFor(`${mode}: ${command}`, () => lines.filter((line) => line.done === command).length > before);
    },
    async stop() {
      child.stdin.end();
      await exited;
      forget();
    },
  };
}
