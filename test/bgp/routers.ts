// Real BGP routers as peers of our speaker, each in a network namespace of its own joined to the root namespace
// (where the test's speaker runs) by a veth pair: GoBGP (Debian's gobgpd) and FRR (Debian's frr: bgpd alone, with
// no zebra and no kernel routes, its own config file, pid file and vty socket). Both are asked what they learned in
// their own JSON and the answer is read into one shape, so a test compares it with what it meant to announce.
// With BFD, FRR also runs bfdd (peers for both our addresses) and zebra, through which bgpd registers its
// neighbor's BFD session with bfdd; zebra installs nothing of ours (bgpd runs with -n).
// Nothing leaves the machine: the namespaces have no routes but their links, and the routers install no routes.
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { chown, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { onExit } from "../../localcluster/cleanup.ts";
import { alive } from "../../localcluster/exec.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { type BfdConfig } from "../../src/agent/announcer/bfd/fsm.ts";
import { type SessionConfig } from "../../src/agent/announcer/bgp/fsm.ts";
import { type SessionOptions } from "../../src/agent/announcer/bgp/session.ts";
import { type Family, ipFromBytes, ipToBytes } from "../../src/net/ip.ts";
import { type Host, type Network } from "../netns/netns.ts";

/** Our speaker's AS in these tests (4-octet: the OPEN carries AS_TRANS), and the routers' AS on eBGP sessions. */
export const MY_ASN = 4200000001;
export const ROUTER_ASN = 65010;
/** Seconds a router with graceful restart keeps the routes of a peer that went away, and what our speaker asks. */
export const RESTART_TIME = 120;

/** A route as a router reports it. */
export interface LearnedRoute {
  prefix: string;
  nextHop: string;
  communities: string[];
  /** Present on iBGP sessions. */
  localPref?: number;
  asPath: number[];
}

export interface Router {
  kind: "gobgp" | "frr";
  host: Host;
  /** The router's addresses on its link to the root namespace. */
  address: { 4: string; 6: string };
  /** Ours (the root namespace's end of that link): the speaker's source and next hops. */
  ours: { 4: string; 6: string };
  /** With `speakers`: the addresses of each speaker in the root namespace, ours first; the router peers with each. */
  speakers: { 4: string; 6: string }[];
  /** FRR: every path it has, prefix → the next hops of its paths (one `show bgp` call: cheap to poll). */
  paths?(family: Family): Promise<Map<string, string[]>>;
  /** What the router learned from us, by prefix (its best paths; exactly one each). */
  routes(family: Family): Promise<Map<string, LearnedRoute>>;
  /** The neighbor's session state as the router names it ("established"/"Established"), "" when unknown. */
  sessionState(): Promise<string>;
  /** How often the session with us went down (from the router's counters). */
  drops(): Promise<number>;
  /** FRR with BFD: its sessions with us, and its bfdd stopped and continued (SIGSTOP, SIGCONT). */
  bfd?: {
    peers(): Promise<FrrBfdPeer[]>;
    /** BFD's status as bgpd's neighbor shows it ("Up", "Down"), "" when it has none. */
    bgpStatus(): Promise<string>;
    pause(): void;
    resume(): void;
  };
  stop(): Promise<void>;
}

export interface RouterOptions {
  /** 0-63: which /30 of the test file's 198.19.<subnet>.0/24 the link uses, and which /64 of fd00:198:<subnet>::/48. */
  index: number;
  /** 240-248 and 253: one per test file, as the root namespace is shared with other test files. */
  subnet: number;
  /**
   * FRR: speakers in the root namespace that peer with the router (1 unless told): each past ours gets an address of
   * its own on our end of the link, 198.19.<subnet>.(128 + i) and fd00:198:<subnet>:<index>::(100 + i) (one router
   * per test file then), and the router a neighbor for it, as for ours.
   */
  speakers?: number;
  asn: number;
  peerAsn: number;
  /** Which of our addresses the router expects the session from. */
  transport: Family;
  /** Seconds; the router's proposal (the session negotiates the lesser). */
  holdTime?: number;
  gracefulRestart?: boolean;
  /** TCP MD5 (RFC 2385) key for the session with us. */
  password?: string;
  /** The router connects too (it is passive unless told), to our listener's port; retrying every second. */
  active?: { port: number };
  /** FRR only: BFD with both our addresses, and for the BGP neighbor (`neighbor … bfd`), with these timers. */
  bfd?: BfdConfig;
}

/** A peer as `show bfd peers json` prints it (intervals in ms). */
export interface FrrBfdPeer {
  peer: string;
  local: string;
  status: string;
  id: number;
  "remote-id": number;
  uptime?: number;
  "receive-interval": number;
  "transmit-interval": number;
  "remote-receive-interval": number;
  "remote-transmit-interval": number;
  "remote-detect-multiplier": number;
}

async function linkToRoot(net: Network, options: RouterOptions) {
  const host = await net.host();
  const base = 4 * options.index;
  const v6 = (host: number) => ipFromBytes(ipToBytes(`fd00:198:${options.subnet}:${options.index}::${host}`));
  const ours = { 4: `198.19.${options.subnet}.${base + 1}`, 6: v6(1) };
  const address = { 4: `198.19.${options.subnet}.${base + 2}`, 6: v6(2) };
  const more = Array.from({ length: (options.speakers ?? 1) - 1 }, (_, i) => ({
    4: `198.19.${options.subnet}.${128 + i}`,
    6: v6(0x100 + i),
  }));
  const link = await net.link("root", host, {
    addressesA: [`${ours[4]}/30`, `${ours[6]}/64`, ...more.flatMap((each) => [`${each[4]}/32`, `${each[6]}/128`])],
    addressesB: [`${address[4]}/30`, `${address[6]}/64`],
  });
  // the other speakers' IPv4 addresses are on that link too, as the router sees it
  if (more.length > 0) await host.ip("route", "add", `198.19.${options.subnet}.128/25`, "dev", link.nameB);
  return { host, ours, address, speakers: [ours, ...more] };
}

function daemon(host: Host, command: string, args: string[], log: string[]): ChildProcess {
  // dies with the test process, even a SIGKILLed one
  const child = spawn(
    "nsenter",
    [`--net=/run/netns/${host.name}`, "setpriv", "--pdeathsig", "KILL", "--", command, ...args],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const keep = (chunk: Buffer) => {
    log.push(chunk.toString());
    if (log.length > 200) log.shift();
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const forget = onExit(() => child.kill("SIGKILL"));
  child.once("exit", forget);
  return child;
}

async function stopDaemon(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
}

const communityText = (value: number) => `${Math.floor(value / 0x10000)}:${value % 0x10000}`;

/** apipb.PeerState's numbers, as `gobgp -j neighbor` prints them. */
const GOBGP_STATES: Record<number, string> = {
  1: "idle",
  2: "connect",
  3: "active",
  4: "opensent",
  5: "openconfirm",
  6: "established",
};

export async function startGobgp(net: Network, options: RouterOptions): Promise<Router> {
  if ((options.speakers ?? 1) > 1) throw new Error("GoBGP here peers with one speaker");
  const { host, ours, address, speakers } = await linkToRoot(net, options);
  const dir = await mkdtemp(path.join(os.tmpdir(), "gobgp-"));
  const neighbor = ours[options.transport];
  const remotePort = options.active ? `    remote-port = ${options.active.port}\n` : "";
  const config = `
[global.config]
  as = ${options.asn}
  router-id = "${address[4]}"
  port = 179
  local-address-list = ["${address[options.transport]}"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "${neighbor}"
    peer-as = ${options.peerAsn}
${options.password ? `    auth-password = "${options.password}"\n` : ""}  [neighbors.timers.config]
    hold-time = ${options.holdTime ?? 90}
    connect-retry = 1
  [neighbors.transport.config]
    passive-mode = ${!options.active}
${remotePort}${options.gracefulRestart ? `  [neighbors.graceful-restart.config]\n    enabled = true\n    restart-time = ${RESTART_TIME}\n` : ""}${(
    ["ipv4-unicast", "ipv6-unicast"] as const
  )
    .map(
      (name) => `  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "${name}"
${options.gracefulRestart ? "    [neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true\n" : ""}`,
    )
    .join("")}`;
  await writeFile(path.join(dir, "gobgpd.toml"), config);
  const log: string[] = [];
  const child = daemon(
    host,
    "gobgpd",
    ["-f", path.join(dir, "gobgpd.toml"), "--api-hosts=127.0.0.1:50051", "--pprof-disable", "-p"],
    log,
  );
  const gobgp = async (...args: string[]) =>
    JSON.parse(await host.exec("gobgp", ["-u", "127.0.0.1", "-p", "50051", "-j", ...args]));
  await waitFor(
    `gobgpd in ${host.name} answers (log: ${log.join("")})`,
    () => gobgp("global").then(() => true),
    20_000,
  );

  interface GobgpPath {
    best?: boolean;
    attrs: {
      type: number;
      value?: number;
      nexthop?: string;
      communities?: number[];
      as_paths?: { asns: number[] }[];
    }[];
  }
  const router: Router = {
    kind: "gobgp",
    host,
    address,
    ours,
    speakers,
    async routes(family) {
      const rib: Record<string, GobgpPath[]> = await gobgp("global", "rib", "-a", family === 4 ? "ipv4" : "ipv6");
      const routes = new Map<string, LearnedRoute>();
      for (const [prefix, paths] of Object.entries(rib)) {
        if (paths.length !== 1) throw new Error(`gobgp has ${paths.length} paths for ${prefix}`);
        const attrs = paths[0]!.attrs;
        const byType = (type: number) => attrs.find((attr) => attr.type === type);
        routes.set(prefix, {
          prefix,
          nextHop: (byType(3) ?? byType(14))?.nexthop ?? "",
          communities: (byType(8)?.communities ?? []).map(communityText),
          ...(byType(5) ? { localPref: byType(5)!.value } : {}),
          asPath: (byType(2)?.as_paths ?? []).flatMap((segment) => segment.asns),
        });
      }
      return routes;
    },
    async sessionState() {
      const peer = await gobgp("neighbor", neighbor);
      return GOBGP_STATES[peer?.state?.session_state] ?? "";
    },
    async drops() {
      const peer = await gobgp("neighbor", neighbor);
      return Number(peer?.state?.flops ?? 0);
    },
    async stop() {
      await stopDaemon(child);
      await rm(dir, { recursive: true, force: true });
    },
  };
  return router;
}

/**
 * The options of our session to `router` over `transport`: from our end of its link, with our IPv4 address there as
 * BGP identifier; eBGP with IPv4 and IPv6 unicast and a 30 s hold time unless `config` says otherwise.
 */
export function sessionTo(router: Router, transport: Family, config: Partial<SessionConfig> = {}): SessionOptions {
  return {
    config: { myAsn: MY_ASN, peerAsn: ROUTER_ASN, routerId: router.ours[4], holdTime: 30, families: [4, 6], ...config },
    peerAddress: router.address[transport],
    localAddress: router.ours[transport],
  };
}

/**
 * GoBGP as the graceful-restart helper of one eBGP session over IPv4 (on link `index` of `subnet`), and the options of
 * our session to it; `restarting` sets the R bit (RFC 4724: a speaker back within the restart time).
 */
export async function startGracefulGobgp(
  net: Network,
  subnet: number,
  index = 0,
): Promise<{ router: Router; session: (restarting: boolean) => SessionOptions }> {
  const router = await startGobgp(net, {
    index,
    subnet,
    asn: ROUTER_ASN,
    peerAsn: MY_ASN,
    transport: 4,
    gracefulRestart: true,
  });
  const session = (restarting: boolean) =>
    sessionTo(router, 4, { gracefulRestart: { restartTime: RESTART_TIME, restarting } });
  return { router, session };
}

/**
 * FRR's zebra and bfdd switch to FRR's user, which clears the parent-death signal: a killed test leaves them running
 * (and its namespace alive with them). Each fixture's folder names the test process that made it, so a later start
 * kills the daemons of folders whose test process is gone, and only those.
 */
function killLeftoverFrr(): void {
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    const owner = Number(/\/frr-(\d+)-/.exec(cmdline)?.[1]);
    if (!cmdline.startsWith("/usr/lib/frr/") || !owner || alive(owner)) continue;
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // exited meanwhile
    }
  }
}

export async function startFrr(net: Network, options: RouterOptions): Promise<Router> {
  const { host, ours, address, speakers } = await linkToRoot(net, options);
  killLeftoverFrr();
  const dir = await mkdtemp(path.join(os.tmpdir(), `frr-${process.pid}-`));
  const neighbor = ours[options.transport];
  const neighbors = speakers.map((speaker) => speaker[options.transport]);
  const each = (line: (neighbor: string) => string) => neighbors.map((neighbor) => `${line(neighbor)}\n`).join("");
  const connecting = (neighbor: string) =>
    options.active
      ? ` neighbor ${neighbor} port ${options.active.port}\n neighbor ${neighbor} timers connect 1`
      : ` neighbor ${neighbor} passive`;
  const config = `frr defaults traditional
hostname lccm-frr
log stdout informational
router bgp ${options.asn}
 bgp router-id ${address[4]}
 no bgp ebgp-requires-policy
 no bgp network import-check
${options.gracefulRestart ? ` bgp graceful-restart\n bgp graceful-restart restart-time ${RESTART_TIME}\n` : ""}${each(
    (neighbor) =>
      ` neighbor ${neighbor} remote-as ${options.peerAsn}\n${connecting(neighbor)}\n` +
      (options.password ? ` neighbor ${neighbor} password ${options.password}\n` : "") +
      ` neighbor ${neighbor} timers ${Math.floor((options.holdTime ?? 90) / 3)} ${options.holdTime ?? 90}\n` +
      ` neighbor ${neighbor} update-source ${address[options.transport]}`,
  )} address-family ipv4 unicast
${each((neighbor) => `  neighbor ${neighbor} activate`)} exit-address-family
 address-family ipv6 unicast
${each((neighbor) => `  neighbor ${neighbor} activate`)} exit-address-family
${options.bfd ? ` neighbor ${neighbor} bfd\n neighbor ${neighbor} bfd profile lccm\n` : ""}`;
  const configFile = path.join(dir, "bgpd.conf");
  await writeFile(configFile, config);
  const log: string[] = [];
  const children: ChildProcess[] = [];
  const zserv = path.join(dir, "zserv.api");
  const vtysh = async (command: string) => JSON.parse(await host.exec("vtysh", ["--vty_socket", dir, "-c", command]));
  let bfdd: ChildProcess | undefined;
  if (options.bfd) {
    const { minRx, minTx, multiplier } = options.bfd;
    const peer = (family: Family) => ` peer ${ours[family]} local-address ${address[family]}\n  profile lccm\n !\n`;
    await writeFile(
      path.join(dir, "bfdd.conf"),
      `bfd\n profile lccm\n  receive-interval ${minRx}\n  transmit-interval ${minTx}\n` +
        `  detect-multiplier ${multiplier}\n !\n${peer(4)}${peer(6)}!\n`,
    );
    await writeFile(path.join(dir, "zebra.conf"), "hostname lccm-frr\n");
    // zebra and bfdd run as FRR's user (they have no -S): the directory is theirs
    const [uid, gid] = await Promise.all(["-u", "-g"].map(async (flag) => Number(await host.exec("id", [flag, "frr"]))));
    await chown(dir, uid!, gid!);
    const common = (name: string) => [
      ...["-f", path.join(dir, `${name}.conf`), "-i", path.join(dir, `${name}.pid`)],
      ...["--vty_socket", dir, "-P", "0", "-z", zserv],
    ];
    children.push(daemon(host, "/usr/lib/frr/zebra", common("zebra"), log));
    bfdd = daemon(host, "/usr/lib/frr/bfdd", [...common("bfdd"), "--bfdctl", path.join(dir, "bfdd.sock")], log);
    children.push(bfdd);
    // bgpd registers its neighbor's BFD session through zebra, which passes it on only to a bfdd connected to it
    // already: an early registration is lost now and then (CI: bgpd never saw BFD up), so bgpd starts after that.
    await waitFor(
      `bfdd in ${host.name} answers, connected to zebra (log: ${log.join("")})`,
      async () => {
        await vtysh("show bfd peers json");
        return /\bbfd\b/.test(await host.exec("vtysh", ["--vty_socket", dir, "-c", "show zebra client summary"]));
      },
      20_000,
    );
  }
  const child = daemon(
    host,
    "/usr/lib/frr/bgpd",
    [
      ...(options.bfd ? ["-z", zserv] : ["-Z"]),
      "-n",
      "-S",
      "-f",
      configFile,
      "-i",
      path.join(dir, "bgpd.pid"),
      "--vty_socket",
      dir,
      "-P",
      "0",
      "-l",
      address[4],
      "-l",
      address[6],
    ],
    log,
  );
  children.push(child);
  await waitFor(
    `bgpd in ${host.name} answers (log: ${log.join("")})`,
    () => vtysh("show bgp summary json").then(() => true),
    20_000,
  );

  interface FrrPath {
    bestpath?: { overall?: boolean };
    nexthops?: { ip: string; scope?: string }[];
    community?: { list?: string[] };
    locPrf?: number;
    aspath?: { segments?: { list: number[] }[] };
  }
  const router: Router = {
    kind: "frr",
    host,
    address,
    ours,
    speakers,
    async routes(family) {
      const afi = family === 4 ? "ipv4" : "ipv6";
      const table: { routes?: Record<string, unknown[]> } = await vtysh(`show bgp ${afi} unicast json`);
      const routes = new Map<string, LearnedRoute>();
      for (const prefix of Object.keys(table.routes ?? {})) {
        // the table's summary leaves communities out: each prefix's detail has them
        const detail: { paths?: FrrPath[] } = await vtysh(`show bgp ${afi} unicast ${prefix} json`);
        const paths = detail.paths ?? [];
        if (paths.length !== 1) throw new Error(`FRR has ${paths.length} paths for ${prefix}`);
        const p = paths[0]!;
        routes.set(prefix, {
          prefix,
          nextHop: p.nexthops?.find((hop) => hop.scope !== "link-local")?.ip ?? "",
          communities: p.community?.list ?? [],
          ...(p.locPrf !== undefined && options.asn === options.peerAsn ? { localPref: p.locPrf } : {}),
          asPath: (p.aspath?.segments ?? []).flatMap((segment) => segment.list),
        });
      }
      return routes;
    },
    async paths(family) {
      const table: { routes?: Record<string, FrrPath[]> } = await vtysh(`show bgp ${family === 4 ? "ipv4" : "ipv6"} json`);
      const hop = (path: FrrPath) => path.nexthops?.find((each) => each.scope !== "link-local")?.ip ?? "";
      return new Map(Object.entries(table.routes ?? {}).map(([prefix, paths]) => [prefix, paths.map(hop)]));
    },
    async sessionState() {
      const peer = (await vtysh(`show bgp neighbors ${neighbor} json`))[neighbor];
      return String(peer?.bgpState ?? "");
    },
    async drops() {
      const peer = (await vtysh(`show bgp neighbors ${neighbor} json`))[neighbor];
      return Number(peer?.connectionsDropped ?? 0);
    },
    ...(bfdd && {
      bfd: {
        peers: () => vtysh("show bfd peers json"),
        async bgpStatus() {
          const peer = (await vtysh(`show bgp neighbors ${neighbor} json`))[neighbor];
          return String(peer?.peerBfdInfo?.status ?? "");
        },
        pause: () => bfdd.kill("SIGSTOP"),
        resume: () => bfdd.kill("SIGCONT"),
      },
    }),
    async stop() {
      for (const daemon of children.reverse()) await stopDaemon(daemon);
      await rm(dir, { recursive: true, force: true });
    },
  };
  return router;
}
