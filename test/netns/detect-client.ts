// Test side of detect-fixture.ts: runs it inside a test namespace and reads its JSON output.
import { spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import type { Detection, DetectionConfig } from "../../src/agent/detect.ts";
import type { HostAddress, HostLink } from "../../src/net/rtnetlink.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { run } from "../../localcluster/exec.ts";
import type { Host, Network } from "./netns.ts";

const FIXTURE = path.join(import.meta.dirname, "detect-fixture.ts");

/**
 * A host whose IPv6 addresses skip duplicate address detection (they are usable at once and no late DAD
 * event disturbs a watch); a test that wants DAD turns it on per interface (net.ipv6.conf.<if>.accept_dad).
 */
export async function quietHost(net: Network): Promise<Host> {
  const host = await net.host();
  await host.exec("sysctl", [
    "-q",
    "-w",
    "net.ipv6.conf.default.accept_dad=0",
    "net.ipv6.conf.all.accept_dad=0",
  ]);
  return host;
}

async function fixture(host: Host, args: string[]): Promise<unknown> {
  const [command, argv] = host.wrap(process.execPath, [FIXTURE, ...args]);
  return JSON.parse(await run(command, argv));
}

export const detectIn = (host: Host, config: DetectionConfig) =>
  fixture(host, ["detect", JSON.stringify(config)]) as Promise<Detection>;

export const addressesIn = (host: Host) => fixture(host, ["addresses"]) as Promise<HostAddress[]>;

/** The next hops of the default routes. */
export const gatewaysIn = (host: Host) => fixture(host, ["gateways"]) as Promise<string[]>;

/** The route source per target (null: no route). */
export const routesIn = (host: Host, ...targets: string[]) =>
  fixture(host, ["routes", ...targets]) as Promise<(string | null)[]>;

// The agent runs as non-root without capabilities: nobody, every capability set cleared.
const UNPRIVILEGED = [
  "--reuid=65534",
  "--regid=65534",
  "--clear-groups",
  "--inh-caps=-all",
  "--bounding-set=-all",
];

export interface Lookups {
  addresses: HostAddress[];
  links: HostLink[];
  /** Per target: the route source (null: none), or the errno name of a kernel answer the adapter threw. */
  routes: ({ source: string | null } | { error: string })[];
}

/**
 * The address list and each target's route source, read by one run of the adapter as the agent runs it (nobody,
 * no capabilities: the kernel applies uid rules to the agent's own uid). Entered with nsenter, which leaves /sys
 * alone.
 */
export const lookupsIn = async (host: Host, targets: string[]): Promise<Lookups> =>
  JSON.parse(
    await run("nsenter", [
      `--net=/run/netns/${host.name}`,
      "setpriv",
      ...UNPRIVILEGED,
      process.execPath,
      FIXTURE,
      "lookups",
      ...targets,
    ]),
  );

export interface Snapshot {
  /** 0 for the state at start, then the count of reported changes. */
  change: number;
  addresses: string[];
  /** Route source towards the watch's target. */
  source: string | null;
}

export interface Watcher {
  /** The first snapshot, already printed or still to come, that satisfies `accept`; rejects after timeoutMs. */
  until(what: string, accept: (snapshot: Snapshot) => boolean, timeoutMs?: number): Promise<Snapshot>;
  close(): Promise<void>;
}

/** Starts `watch` in the namespace; resolves once its subscription is open (first snapshot printed). */
export async function watchIn(
  host: Host,
  debounceMs: number,
  target: string,
  options: { unprivileged?: boolean } = {},
): Promise<Watcher> {
  const fixture = [process.execPath, FIXTURE, "watch", String(debounceMs), target];
  const [command, argv] = options.unprivileged
    ? host.wrap("setpriv", [...UNPRIVILEGED, ...fixture])
    : host.wrap(fixture[0] ?? "", fixture.slice(1));
  const child = spawn(command, argv, { stdio: ["pipe", "pipe", "inherit"] });
  const forget = onExit(() => child.kill("SIGKILL"));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const snapshots: Snapshot[] = [];
  const listeners = new Set<() => void>();
  createInterface({ input: child.stdout }).on("line", (line) => {
    snapshots.push(JSON.parse(line));
    for (const listener of listeners) listener();
  });

  const watcher: Watcher = {
    until(what, accept, timeoutMs = 5000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = snapshots.find(accept);
          if (!found) return;
          done();
          resolve(found);
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(`no snapshot with ${what} within ${timeoutMs} ms; got ${JSON.stringify(snapshots)}`),
          );
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
    async close() {
      child.stdin.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
      forget();
    },
  };
  try {
    await watcher.until("the initial state", (snapshot) => snapshot.change === 0, 10_000);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
  return watcher;
}
