// The local cluster's router (`npm run cluster -- up --bgp`): FRR (Debian's frr: zebra, bgpd, bfdd) in a network
// namespace of the cluster's slot, on the nodes' public network, peering with every node over eBGP, as a data
// centre's top-of-rack router does. The client host's default route goes through it: the client reaches the
// Services' BGP addresses (outside the public /24) only through the routes the router learned, ECMP over every node
// that announces one, so a `curl` from the client proves the announcements, not layer 2. Replies come back directly
// (the client is on the nodes' network), and client addresses are kept (externalTrafficPolicy: Local sees them).
//
//   client 198.19.(136+slot).2 ──┐
//   router 198.19.(136+slot).3 ──┼── bridge ── nodes 198.19.(136+slot).(10+i)
//
// The router accepts any node of the public /24 as a dynamic neighbor (`bgp listen range`), in ROUTER_ASN, the nodes
// in any other; it sends the nodes nothing. A second router (index 1, at .4) can join as a second peer, as a rack's
// second top-of-rack router; the client routes through the first only.
//
// On a dual-stack cluster (ClusterOptions.dualStack) it carries IPv6 too: its address fd00:19:(136+slot)::(3+index)
// on the same link, the nodes' IPv6 routes over the same IPv4 sessions (multiprotocol BGP, RFC 4760, each node's IPv6
// address as next hop), and the client's IPv6 default route through router 0.
//
// Its daemons run from <cluster dir>/router (config, pid files, vty and zserv sockets): removeCluster() kills every
// process whose command line names the cluster's folder and deletes the slot's namespaces, so a killed test or a
// detached cluster's `down` removes the router with the rest.
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { clusterLayout } from "./layout.ts";
import { run } from "./exec.ts";
import { waitFor } from "./wait.ts";

export const ROUTER_ASN = 64512;
/** The ASN the chart's examples and the tests give the nodes (any other than ROUTER_ASN is accepted). */
export const NODE_ASN = 64513;
const FRR = "/usr/lib/frr";

/**
 * The BGPPeer for router `index` of slot `slot` ("router", then "router-1"): every node peers with it. Graceful
 * restart from the start: withdrawals go by UPDATE all the same, and an agent's restart keeps the routes.
 */
export const routerPeer = (slot: number, index = 0) => ({
  apiVersion: "local-ccm.io/v1alpha1",
  kind: "BGPPeer",
  metadata: { name: index ? `router-${index}` : "router" },
  spec: {
    peerAddress: routerLayout(slot, index).ip,
    peerASN: ROUTER_ASN,
    myASN: NODE_ASN,
    holdTime: "9s",
    gracefulRestart: {},
  },
});

/** A LoadBalancerIPPool named `routed` in no network of the slot: the client reaches it only through the router. */
export const routedPool = (slot: number) => ({
  apiVersion: "local-ccm.io/v1alpha1",
  kind: "LoadBalancerIPPool",
  metadata: { name: "routed" },
  spec: { addresses: [`198.19.${200 + slot}.240/28`] },
});

/**
 * Names and addresses of router `index` of slot `slot` (0: the one the client routes through; 1: a second peer, as
 * a rack's second top-of-rack router): pure, as clusterLayout() is.
 */
export function routerLayout(slot: number, index = 0) {
  if (index !== 0 && index !== 1) throw new Error(`router index 0 or 1, not ${index}`);
  const { prefix } = clusterLayout(slot);
  const suffix = index ? String(index) : "";
  return {
    netns: `${prefix}router${suffix}`,
    /** Root-side veth of its link to the bridge. */
    rootVeth: `lccm${slot}vr${suffix}`,
    /** Its folder under the cluster's. */
    folder: `router${suffix}`,
    /** Its address on the nodes' public network: the nodes' BGP peer. */
    ip: `198.19.${136 + slot}.${3 + index}`,
    /** Its IPv6 address there (dual-stack clusters). */
    ip6: `fd00:19:${136 + slot}::${3 + index}`,
    publicNetwork: `198.19.${136 + slot}.0/24`,
  };
}

/** A route as the router's kernel holds it (what zebra installed): where packets for `prefix` go. */
export interface KernelRoute {
  prefix: string;
  /** Next hops (node addresses), sorted: more than one is ECMP. */
  via: string[];
}

export interface ClusterRouter {
  ip: string;
  /** Its IPv6 address on a dual-stack cluster. */
  ip6: string | undefined;
  asn: number;
  /** `vtysh -c <command>` on the router, its JSON answer parsed. */
  vtysh<T>(command: string): Promise<T>;
  /**
   * BFD on every node session from now on (`neighbor NODES bfd`), or off again; with `intervalMs`, the router's
   * transmit and receive intervals (FRR's default is 300 ms) through a BFD profile.
   */
  setBfd(on: boolean, intervalMs?: number): Promise<void>;
  /** The BGP neighbors the router has, by address, with their state ("Established", …). */
  neighbors(): Promise<Map<string, string>>;
  /** The router's kernel routes learned over BGP: IPv4, and IPv6 on a dual-stack cluster. */
  routes(): Promise<KernelRoute[]>;
  stop(): Promise<void>;
}

function frrConfig(slot: number, index: number, bfd: boolean, dualStack: boolean): string {
  const layout = routerLayout(slot, index);
  // IPv6 comes over the same (IPv4) sessions: every family takes the nodes' routes, sends them nothing and does ECMP.
  const addressFamily = (family: string) => ` address-family ${family} unicast
  neighbor NODES activate
  neighbor NODES route-map NOTHING out
  maximum-paths 64
 exit-address-family
`;
  const families = dualStack ? ["ipv4", "ipv6"] : ["ipv4"];
  return `frr defaults datacenter
hostname lccm-router-${slot}${index ? `-${index}` : ""}
log stdout informational
route-map NOTHING deny 10
router bgp ${ROUTER_ASN}
 bgp router-id ${layout.ip}
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor NODES peer-group
 neighbor NODES remote-as external
${bfd ? " neighbor NODES bfd\n" : ""} bgp listen range ${layout.publicNetwork} peer-group NODES
${families.map(addressFamily).join("")}`;
}

/**
 * Starts router `index` (routerLayout) of a running cluster in slot `slot` kept in `dir`, carrying IPv6 too when it is
 * `dualStack`; with `bfd`, every node session asks for BFD (bfdd runs either way). The client's default route (both
 * families) goes through router 0.
 */
export async function startRouter(
  { slot, dir, dualStack = false }: { slot: number; dir: string; dualStack?: boolean },
  { bfd = false, index = 0 }: { bfd?: boolean; index?: number } = {},
): Promise<ClusterRouter> {
  const layout = routerLayout(slot, index);
  const { bridge, clientNetns, publicGateway } = clusterLayout(slot);
  const folder = path.join(dir, layout.folder);
  await mkdir(folder, { recursive: true });
  const inRouter = (...args: string[]) => run("ip", ["-n", layout.netns, ...args]);
  const peerVeth = `${layout.rootVeth}p`;

  await run("ip", ["netns", "add", layout.netns]);
  await run("ip", ["link", "add", layout.rootVeth, "type", "veth", "peer", "name", peerVeth]);
  await run("ip", ["link", "set", peerVeth, "netns", layout.netns]);
  await run("ip", ["link", "set", layout.rootVeth, "master", bridge, "up"]);
  await inRouter("link", "set", peerVeth, "name", "eth0");
  await inRouter("address", "add", `${layout.ip}/24`, "dev", "eth0");
  for (const link of ["lo", "eth0"]) await inRouter("link", "set", link, "up");
  // The /64 the nodes' IPv6 next hops lie in (FRR takes an eBGP next hop only on a connected network); nodad: usable
  // at once, not tentative for a second of duplicate address detection.
  if (dualStack) await inRouter("address", "add", `${layout.ip6}/64`, "dev", "eth0", "nodad");
  // Its own way out, as a top-of-rack router has: the client, whose default route comes here, reaches the control
  // plane (upstream's e2e.test runs from it) through the slot's gateway.
  await inRouter("route", "add", "default", "via", publicGateway);
  // Forwarding, and ECMP that spreads flows by ports (hash policy 1), not only by addresses, as routers do. No ICMP
  // redirects, as data-centre routers are set: the client shares the segment with the default route's next hop, so
  // a packet for an address not yet (or no longer) announced made the router redirect the client there, and the
  // client kept sending there for the redirect's 5 minutes after the route came (upstream's e2e.test failed so).
  // IPv6 has no send_redirects, and needs none here: Linux redirects only to a link-local next hop (or to the
  // destination itself), and the nodes' IPv6 next hops are their global addresses.
  const settings = [
    "net.ipv4.ip_forward=1",
    "net.ipv4.fib_multipath_hash_policy=1",
    ...["all", "eth0"].map((conf) => `net.ipv4.conf.${conf}.send_redirects=0`),
    ...(dualStack ? ["net.ipv6.conf.all.forwarding=1", "net.ipv6.fib_multipath_hash_policy=1"] : []),
  ];
  for (const setting of settings) await run("nsenter", [`--net=/run/netns/${layout.netns}`, "sysctl", "-qw", setting]);

  const config = path.join(folder, "frr.conf");
  await writeFile(config, frrConfig(slot, index, bfd, dualStack));
  const zserv = path.join(folder, "zserv.api");
  // Each daemon: its own pid file and the shared vty folder and zserv socket under the cluster's folder; as root
  // (in FRR's vty group, which it requires; its folder is root's); no vty TCP port (-P 0); daemonised (-d), so a
  // detached cluster keeps it.
  const daemon = (name: string, ...args: string[]) =>
    run("nsenter", [
      `--net=/run/netns/${layout.netns}`,
      `${FRR}/${name}`,
      "-d", "-u", "root", "-g", "frrvty", "-P", "0",
      "-f", config,
      "-i", path.join(folder, `${name}.pid`),
      "--vty_socket", folder,
      "-z", zserv,
      "--log", `file:${path.join(folder, `${name}.log`)}`,
      ...args,
    ]);
  await daemon("zebra");
  await daemon("bfdd", "--bfdctl", path.join(folder, "bfdd.sock"));
  await daemon("bgpd", "-l", layout.ip);

  const vtysh = async <T>(command: string): Promise<T> =>
    JSON.parse(await run("vtysh", ["--vty_socket", folder, "-c", command])) as T;
  await waitFor("the router's bgpd answering", () => vtysh("show bgp summary json").then(() => true), 30_000);
  if (index === 0) {
    await run("ip", ["-n", clientNetns, "route", "replace", "default", "via", layout.ip]);
    if (dualStack) await run("ip", ["-6", "-n", clientNetns, "route", "replace", "default", "via", layout.ip6]);
  }

  return {
    ip: layout.ip,
    ip6: dualStack ? layout.ip6 : undefined,
    asn: ROUTER_ASN,
    vtysh,
    async setBfd(on, intervalMs) {
      const profile = on && intervalMs !== undefined;
      const intervals = profile
        ? ["bfd", "profile nodes", `receive-interval ${intervalMs}`, `transmit-interval ${intervalMs}`, "exit", "exit"]
        : [];
      const line = `${on ? "" : "no "}neighbor NODES bfd${profile ? " profile nodes" : ""}`;
      const commands = ["configure terminal", ...intervals, `router bgp ${ROUTER_ASN}`, line];
      await run("vtysh", ["--vty_socket", folder, ...commands.flatMap((command) => ["-c", command])]);
    },
    async neighbors() {
      const summary = await vtysh<{ ipv4Unicast?: { peers?: Record<string, { state?: string }> } }>(
        "show bgp summary json",
      );
      // A dynamic neighbor's key is its address behind a "*".
      const peers = Object.entries(summary.ipv4Unicast?.peers ?? {});
      return new Map(peers.map(([ip, peer]) => [ip.replace(/^\*/, ""), peer.state ?? ""]));
    },
    async routes() {
      const familyRoutes = async (family: 4 | 6) => {
        const table = JSON.parse(
          await run("ip", [`-${family}`, "-n", layout.netns, "-j", "route", "show", "proto", "bgp"]),
        ) as { dst: string; gateway?: string; nexthops?: { gateway: string }[] }[];
        return table.map((route) => ({
          prefix: route.dst.includes("/") ? route.dst : `${route.dst}/${family === 4 ? 32 : 128}`,
          via: (route.nexthops?.map((hop) => hop.gateway) ?? [route.gateway ?? ""]).sort(),
        }));
      };
      return (await Promise.all((dualStack ? [4, 6] as const : [4] as const).map(familyRoutes))).flat();
    },
    async stop() {
      for (const name of ["bgpd", "bfdd", "zebra"]) {
        const pid = Number(await readFile(path.join(folder, `${name}.pid`), "utf8").catch(() => ""));
        try {
          if (pid > 0) process.kill(pid, "SIGKILL");
        } catch {
          // exited meanwhile
        }
      }
      if (index === 0) {
        await run("ip", ["-n", clientNetns, "route", "replace", "default", "via", publicGateway]).catch(() => "");
        // The client had no IPv6 default route before (node-network.ts).
        if (dualStack) await run("ip", ["-6", "-n", clientNetns, "route", "del", "default"]).catch(() => "");
      }
      await run("ip", ["netns", "delete", layout.netns]).catch(() => "");
    },
  };
}
