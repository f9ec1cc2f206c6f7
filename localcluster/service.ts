// A long-running process of the local cluster (etcd, an apiserver, containerd, a kubelet…) with its
// log in its state folder. It dies with the process that started it (`setpriv --pdeathsig KILL`,
// which survives nsenter's exec), unless detached (the CLIs' `up`, which outlives its caller).
import { type ChildProcess, spawn } from "node:child_process";
import { openSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { sleep } from "../src/time/backoff.ts";

export interface Service {
  name: string;
  child: ChildProcess;
  exited: Promise<void>;
  logPath: string;
}

export interface ServiceOptions {
  /** Folder for `<name>.log`, and the working directory. */
  dir: string;
  detached?: boolean;
  /** Run inside this network namespace (a path such as /run/netns/x), entered with nsenter --net: unlike
   * `ip netns exec`, it leaves /sys mounted as it is, so the cgroup hierarchies stay visible. */
  netns?: string;
  /** Run in a mount namespace of its own in which `target`, a machine path the program hard-codes, is the
   * folder `source` instead. Mounts the program makes still reach the machine's namespace where they land
   * in a shared mount (the cluster's folder is one): only the mount holding `target` is made private. */
  bind?: { source: string; target: string };
}

const READY_TIMEOUT_MS = 120_000;

export function startService(name: string, binary: string, args: string[], options: ServiceOptions): Service {
  const logPath = path.join(options.dir, `${name}.log`);
  const log = openSync(logPath, "a");
  let argv = [binary, ...args];
  if (options.bind) argv = [...ownMountNamespace(options.bind.source, options.bind.target), ...argv];
  if (options.netns) argv = ["nsenter", `--net=${options.netns}`, "--", ...argv];
  if (!options.detached) argv = ["setpriv", "--pdeathsig", "KILL", "--", ...argv];
  const child = spawn(argv[0] as string, argv.slice(1), {
    cwd: options.dir,
    stdio: ["ignore", log, log],
    detached: options.detached,
  });
  if (options.detached) child.unref();
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return { name, child, exited, logPath };
}

/** A command prefix: a new mount namespace (mounts copied, peers kept), the mount holding `target` made
 * private in it, `source` bound on `target`, then exec of the rest (the pid and pdeathsig stay). */
function ownMountNamespace(source: string, target: string): string[] {
  const script = 'mount --make-private "$(findmnt --noheadings --output TARGET --target "$2")" && ' +
    'mount --bind "$1" "$2" && shift 2 && exec "$@"';
  return ["unshare", "--mount", "--propagation", "unchanged", "--", "sh", "-c", script, "sh", source, target];
}

export function running(service: Service): boolean {
  return service.child.exitCode === null && service.child.signalCode === null;
}

export async function stopService(service: Service, graceMs = 20_000): Promise<void> {
  if (!running(service)) return;
  service.child.kill("SIGTERM");
  const stopped = await Promise.race([service.exited.then(() => true), sleep(graceMs).then(() => false)]);
  if (!stopped) {
    service.child.kill("SIGKILL");
    await service.exited;
  }
}

export async function logTail(service: Service): Promise<string> {
  const text = await readFile(service.logPath, "utf8").catch(() => "");
  return text.trim().split("\n").slice(-8).join("\n");
}

/** Polls `check` until it returns true; fails early if the service exits meanwhile. */
export async function waitUntil(
  service: Service,
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = READY_TIMEOUT_MS,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!running(service)) throw new Error(`${service.name} exited before ${what}:\n${await logTail(service)}`);
    if (await check().catch(() => false)) return;
    await sleep(250);
  }
  throw new Error(`${service.name} not ${what} after ${timeoutMs / 1000}s:\n${await logTail(service)}`);
}
