// A TCP server on the kubelet port inside a test host, for reachability probes: it accepts and
// closes every connection. It dies with the test process (pdeathsig and exit cleanup).
import { type ChildProcess, spawn } from "node:child_process";
import { onExit } from "../../localcluster/cleanup.ts";
import type { Host } from "./netns.ts";

/** Starts the listener on [::]:10250 in `host`; resolves once it listens (or fails within 10 s). */
export function startKubeletListener(host: Host): Promise<ChildProcess> {
  const script = `require("node:net").createServer((s) => s.destroy())
    .listen({ port: 10250, host: "::" }, () => console.log("listening"));`;
  const [command, args] = host.wrap("setpriv", ["--pdeathsig", "KILL", "--", process.execPath, "-e", script]);
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "inherit"] });
  const forget = onExit(() => child.kill("SIGKILL"));
  child.once("exit", forget);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("listener did not start within 10 s")), 10_000);
    child.stdout?.once("data", () => {
      clearTimeout(timer);
      resolve(child);
    });
    child.once("exit", (code) => reject(new Error(`listener exited with ${code}`)));
  });
}
