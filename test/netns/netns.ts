// Test hosts in network namespaces, joined by veth links. A namespace starts with only loopback
// up and no default route, so nothing sent from it can leave this machine; tests add routes only
// towards other test namespaces. Everything is removed by remove(), at process exit, and (for
// namespaces of a test process that was killed) by the next createNetwork().
//
// Addresses: use 198.18.0.0/15 (RFC 2544 benchmarking) and fd00:198:18::/48 so that no test
// address can clash with a real network of the machine.
import { execFileSync } from "node:child_process";
import { onExit } from "../../localcluster/cleanup.ts";
import { alive, type RunOptions, run } from "../../localcluster/exec.ts";

const PREFIX = "lccm";

/**
 * setpriv arguments for the agent's user, with CAP_NET_RAW as its only capability: what announcing needs (the
 * chart grants it as uid 0, as runtimes give added capabilities; here it is given to uid 65532 as an ambient one).
 */
export const RAW_ONLY = [
  "--reuid=65532",
  "--regid=65532",
  "--clear-groups",
  "--inh-caps=-all,+net_raw",
  "--ambient-caps=-all,+net_raw",
  "--bounding-set=-all,+net_raw",
];

export interface Host {
  /** Namespace name, for `ip netns exec <name> …`. */
  name: string;
  exec(command: string, args: string[], options?: RunOptions): Promise<string>;
  ip(...args: string[]): Promise<string>;
  /** argv that runs a command inside this namespace (for spawn). */
  wrap(command: string, args: string[]): [string, string[]];
}

export interface LinkOptions {
  /** Addresses with prefix length for each end, e.g. ["198.18.0.1/24", "fd00:198:18::1/64"]. */
  addressesA?: string[];
  addressesB?: string[];
}

export interface Link {
  /** Interface names at each end. */
  nameA: string;
  nameB: string;
}

export interface Network {
  /** A new host: its own namespace, loopback up, no routes beyond its links. */
  host(): Promise<Host>;
  /** A veth pair between two hosts, or between the root namespace ("root") and a host. */
  link(a: Host | "root", b: Host, options?: LinkOptions): Promise<Link>;
  remove(): Promise<void>;
}

let networks = 0;

/** Namespaces this module made in processes that no longer exist (killed before cleanup). */
function removeStaleNamespaces(): void {
  const list = execFileSync("ip", ["netns", "list"], { encoding: "utf8" });
  for (const name of list.split("\n").map((line) => line.split(" ")[0] ?? "")) {
    const owner = new RegExp(`^${PREFIX}(\\d+)-`).exec(name);
    if (owner && !alive(Number(owner[1]))) execFileSync("ip", ["netns", "delete", name]);
  }
}

function makeHost(name: string): Host {
  return {
    name,
    exec: (command, args, options) => run("ip", ["netns", "exec", name, command, ...args], options),
    ip: (...args) => run("ip", ["-n", name, ...args]),
    wrap: (command, args) => ["ip", ["netns", "exec", name, command, ...args]],
  };
}

export async function createNetwork(): Promise<Network> {
  removeStaleNamespaces();
  const id = `${PREFIX}${process.pid}-${networks++}`;
  const namespaces: string[] = [];
  const rootLinks: string[] = [];
  let counter = 0;

  const removeSync = () => {
    // Deleting a namespace destroys its veth ends and with them their peers; root-side links to
    // a namespace that failed half-way are deleted by name.
    for (const name of namespaces.splice(0))
      execFileSync("ip", ["netns", "delete", name], { stdio: "ignore" });
    for (const link of rootLinks.splice(0)) {
      try {
        execFileSync("ip", ["link", "delete", link], { stdio: "ignore" });
      } catch {
        // already gone with its peer
      }
    }
  };
  const forget = onExit(removeSync);

  return {
    async host() {
      const name = `${id}-${counter++}`;
      await run("ip", ["netns", "add", name]);
      namespaces.push(name);
      const host = makeHost(name);
      await host.ip("link", "set", "lo", "up");
      return host;
    },

    async link(a, b, options = {}) {
      // Interface names are limited to 15 characters and must be unique per namespace; the
      // temporary names are unique in the root namespace too, where both ends are created.
      const n = counter++;
      const tag = `${process.pid % 100000}x${networks}x${n}`;
      const [tmpA, tmpB] = [`va${tag}`, `vb${tag}`];
      await run("ip", ["link", "add", tmpA, "type", "veth", "peer", "name", tmpB]);
      if (a === "root") rootLinks.push(tmpA);
      await run("ip", ["link", "set", tmpB, "netns", b.name]);
      if (a !== "root") await run("ip", ["link", "set", tmpA, "netns", a.name]);
      const ipA = (...args: string[]) => (a === "root" ? run("ip", args) : a.ip(...args));
      for (const [ip, dev, addresses] of [
        [ipA, tmpA, options.addressesA ?? []],
        [b.ip, tmpB, options.addressesB ?? []],
      ] as const) {
        for (const address of addresses)
          await ip("address", "add", address, "dev", dev, ...(address.includes(":") ? ["nodad"] : []));
        await ip("link", "set", dev, "up");
      }
      return { nameA: tmpA, nameB: tmpB };
    },

    async remove() {
      removeSync();
      forget();
    },
  };
}

/** Networks a test suite makes as it goes, removed together by `removeAll` (its after() hook). */
export function networkPool(): { create(): Promise<Network>; removeAll(): Promise<void> } {
  const networks: Network[] = [];
  return {
    async create() {
      const net = await createNetwork();
      networks.push(net);
      return net;
    },
    async removeAll() {
      for (const net of networks.splice(0)) await net.remove();
    },
  };
}

/**
 * Segments the kernel dropped for a missing, unexpected or wrong TCP MD5 signature (RFC 2385), from the
 * /proc/net/netstat text of a namespace: what a test of signed sessions waits for, as no refusal is ever sent.
 */
export function md5Drops(netstat: string): number {
  const [names, values] = netstat
    .split("\n")
    .filter((line) => line.startsWith("TcpExt:"))
    .map((line) => line.split(" "));
  if (!names || !values) throw new Error("no TcpExt counters in /proc/net/netstat");
  return ["TCPMD5NotFound", "TCPMD5Unexpected", "TCPMD5Failure"]
    .map((name) => Number(values[names.indexOf(name)]))
    .reduce((a, b) => a + b, 0);
}
