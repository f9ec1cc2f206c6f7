// A world for the agent's L2 announcing: a real kube-apiserver, and one bridge joining a client and node network
// namespaces. Each node runs the agent (src/bin/local-ccm.ts, --lb-l2-announce) as uid 65532 with CAP_NET_RAW only,
// and reaches the API through a proxy of its own that the test can cut while the node's links stay up.
//   root 198.19.<n>.<4s+1>/30 ── .<4s+2>/30 node s ── bridge 198.18.77.0/24, fd00:198:77::/64 ── client (.9)
// (<n>: one per test file, as the root namespace is shared; the bridge is in namespaces of the file's own.)
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Service } from "kubernetes-types/core/v1.js";
import { isApiError } from "../../src/kube/errors.ts";
import { leaseResource, Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LABEL,
  announcerLabelValue,
  announcerLeaseName,
} from "../../src/pools/announcement.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { quietHost } from "../netns/detect-client.ts";
import { createNetwork, type Host, RAW_ONLY } from "../netns/netns.ts";
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.ts";

const AGENT = path.resolve(import.meta.dirname, "../../src/bin/local-ccm.ts");
const CAPTURE = path.resolve(import.meta.dirname, "../netns/announce-fixture.ts");
export const NAMESPACE = "kube-system";
export const SUBNET = { v4: "198.18.77", v6: "fd00:198:77:" };
/** The failover budget (a node cut off to another node answering): 5 s on an idle machine; bounds take 3x on CI. */
export const BUDGET_MS = 5000;
const MAX_NODES = 4;

export interface AgentNode {
  name: string;
  host: Host;
  /** Its link on the bridge, and that link's MAC. */
  link: string;
  mac: string;
  /** Its address on its root link: its /metrics (plain HTTP) is at http://<reachableAt>:10265/metrics. */
  reachableAt: string;
  proxy: TcpProxy;
  /**
   * Its port on the bridge taken out (cut) and put back: no frame reaches its peers or them, its link stays up; or
   * set down and up (carrier): its link loses its carrier, as when a cable is pulled.
   */
  segment: { cut(): Promise<void>; restore(): Promise<void>; carrier(up: boolean): Promise<void> };
  logs(): string;
  readLease(): Promise<Lease | undefined>;
  signal(signal: NodeJS.Signals): void;
  exited: Promise<number | null>;
}

/** A frame a capture saw on the client's link, as test/netns/announce-fixture.ts prints it. */
export interface Frame {
  /** When the test read it (performance.now()). */
  at: number;
  ready?: boolean;
  from?: string;
  outgoing?: boolean;
  arp?: { operation: string; senderIp: string; targetIp: string };
  solicitation?: { target: string };
  advertisement?: { target: string };
}

/** Whether a frame claims `address` for its sender: an ARP reply or gratuitous ARP, or a Neighbor Advertisement. */
export const claims = (frame: Frame, address: string): boolean =>
  !frame.outgoing &&
  ((frame.arp !== undefined && frame.arp.senderIp === address) || frame.advertisement?.target === address);

export interface AnnounceWorld {
  plane: ControlPlane;
  leases: Resource<Lease>;
  services: Resource<Service>;
  client: Host;
  clientLink: string;
  /** A node in `slot` (0-3) on the bridge (its address there .<slot+1>), its agent started with `flags` added. */
  addNode(name: string, slot: number, flags?: string[]): Promise<AgentNode>;
  /** Asks afresh from the client: the MAC that answered for `address`, or undefined when nobody did. */
  resolve(address: string): Promise<string | undefined>;
  /** Assigns Service `name` to `node` as the pool controller does: annotation, label, ingress `addresses`. */
  assign(name: string, node: string, addresses: string[]): Promise<void>;
  /**
   * Drops (true) or passes again (false) every ARP frame the bridge forwards: the segment is then IPv6-only, and a
   * node proves its link by NDP alone. The bridge's namespace goes with the world.
   */
  blockArp(blocked: boolean): Promise<void>;
  /** Records every ARP and NDP frame on the client's link (our own packet socket), until stopped. */
  capture(): Promise<{ frames: Frame[]; stop(): Promise<void> }>;
  /** Takes Service `name` from its node as the pool controller does (annotation and label removed): the version. */
  release(name: string): Promise<string>;
  stop(): Promise<void>;
}

/** `subnet`: 198.19.<subnet>.0/24 for the nodes' links to the root namespace (test/announce/: 77 and 78). */
export async function startAnnounceWorld(subnet: number): Promise<AnnounceWorld> {
  const rootIP = (slot: number) => `198.19.${subnet}.${4 * slot + 1}`;
  const net = await createNetwork();
  const stops: (() => Promise<void>)[] = [() => net.remove()];
  const stop = async () => {
    for (const step of stops.splice(0).reverse()) await step();
  };
  try {
    const bridge = await net.host();
    await bridge.ip("link", "add", "br0", "type", "bridge");
    await bridge.ip("link", "set", "br0", "up");
    const join = async (host: Host, suffix: number) => {
      const addressesB = [`${SUBNET.v4}.${suffix}/24`, `${SUBNET.v6}:${suffix}/64`];
      const link = await net.link(bridge, host, { addressesB });
      await bridge.ip("link", "set", link.nameA, "master", "br0");
      return link;
    };
    const client = await quietHost(net);
    const clientLink = (await join(client, 9)).nameB;
    // Dual-stack Services: the pool hands out an address of each family on the bridge.
    const plane = await startControlPlane({
      extraIPs: Array.from({ length: MAX_NODES }, (_, slot) => rootIP(slot)),
      serviceCIDR: "10.96.0.0/24,fd00:10:96::/112",
    });
    stops.push(() => plane.stop());
    // RBAC is not what these tests prove (least privilege and the node-scope policy have their own).
    await plane.kubectl(["create", "serviceaccount", "l2-agent", "-n", NAMESPACE]);
    const binding = ["create", "clusterrolebinding", "l2-agent", "--clusterrole=cluster-admin"];
    await plane.kubectl([...binding, `--serviceaccount=${NAMESPACE}:l2-agent`]);
    // The agents' user must read their kubeconfigs: a folder of their own.
    const dir = await mkdtemp(path.join(os.tmpdir(), "l2-agent-"));
    stops.push(() => rm(dir, { recursive: true, force: true }));
    await chmod(dir, 0o755);
    const leases = new Resource<Lease>(plane.admin, leaseResource(NAMESPACE));
    const services = new Resource<Service>(plane.admin, { ...SERVICE_RESOURCE, namespace: "default" });

    const addNode = async (name: string, slot: number, flags: string[] = []): Promise<AgentNode> => {
      const host = await quietHost(net);
      const port = await join(host, slot + 1);
      const link = port.nameB;
      const mac = JSON.parse(await host.ip("-j", "link", "show", link))[0].address as string;
      const [root, reachableAt] = [rootIP(slot), `198.19.${subnet}.${4 * slot + 2}`];
      // Its link to the API has a MAC too: --lb-l2-interfaces leaves it out.
      await net.link("root", host, { addressesA: [`${root}/30`], addressesB: [`${reachableAt}/30`] });
      const proxy = await startTcpProxy(root, { host: root, port: Number(new URL(plane.serverAt(root)).port) });
      stops.push(() => proxy.close());
      const server = `https://${root}:${proxy.port}`;
      const minted = await plane.serviceAccountKubeconfig({ namespace: NAMESPACE, name: "l2-agent", server });
      const kubeconfig = path.join(dir, `${name}.kubeconfig`);
      await writeFile(kubeconfig, await readFile(minted), { mode: 0o644 });
      const args = [
        ...[AGENT, `--node-name=${name}`, `--kubeconfig=${kubeconfig}`],
        ...["--lb-l2-announce", `--lb-l2-lease-namespace=${NAMESPACE}`, `--lb-l2-interfaces=${link}`],
        ...["--external-ip-target=", "--require-local-node=false", "--secure-metrics=false", "--v=2"],
        ...flags,
      ];
      const argv = ["setpriv", "--pdeathsig", "KILL", ...RAW_ONLY, "--", process.execPath, ...args];
      const agent: ChildProcess = spawn("nsenter", [`--net=/run/netns/${host.name}`, ...argv], {
        stdio: ["ignore", "pipe", "pipe"],
      });
      const forget = onExit(() => agent.kill("SIGKILL"));
      const exited = new Promise<number | null>((resolve) => agent.once("exit", (code) => resolve(code)));
      stops.push(async () => {
        if (agent.exitCode === null && agent.signalCode === null) agent.kill("SIGKILL");
        await exited;
        forget();
      });
      const logs: string[] = [];
      for (const stream of [agent.stdout, agent.stderr]) stream?.on("data", (chunk: Buffer) => logs.push(String(chunk)));
      const leaseName = announcerLeaseName(name) as string;
      return {
        name,
        host,
        link,
        mac,
        reachableAt,
        proxy,
        segment: {
          cut: async () => void (await bridge.ip("link", "set", port.nameA, "nomaster")),
          restore: async () => void (await bridge.ip("link", "set", port.nameA, "master", "br0")),
          carrier: async (up) => void (await bridge.ip("link", "set", port.nameA, up ? "up" : "down")),
        },
        logs: () => logs.join(""),
        readLease: () =>
          leases.get(leaseName).catch((err: unknown) => {
            if (isApiError(err, "NotFound")) return undefined;
            throw err;
          }),
        signal: (signal) => agent.kill(signal),
        exited,
      };
    };

    const neighbour = async (address: string): Promise<{ lladdr?: string; state: string[] } | undefined> =>
      JSON.parse(await client.ip("-j", "neigh", "show", "to", address, "dev", clientLink))[0];
    // A datagram to the discard port: the client resolves the address first.
    const sendFromClient = (address: string) =>
      client.exec(process.execPath, [
        "-e",
        `const s = require("node:dgram").createSocket("udp${address.includes(":") ? 6 : 4}");
         s.send("x", 9, ${JSON.stringify(address)}, () => s.close());`,
      ]);

    return {
      plane,
      leases,
      services,
      client,
      clientLink,
      addNode,
      async blockArp(blocked) {
        if (!blocked) return void (await bridge.exec("nft", ["delete", "table", "bridge", "no-arp"]));
        const chain = "add chain bridge no-arp forward { type filter hook forward priority 0; }";
        await bridge.exec("nft", [`add table bridge no-arp; ${chain}; add rule bridge no-arp forward ether type arp drop`]);
      },
      async resolve(address) {
        await client.ip("neigh", "flush", "to", address, "dev", clientLink);
        await sendFromClient(address);
        const settled = await waitFor(`the client's question about ${address} settled`, async () => {
          const entry = await neighbour(address);
          return entry && !entry.state.includes("INCOMPLETE") && entry;
        });
        return settled.state.includes("FAILED") ? undefined : settled.lladdr;
      },
      async capture() {
        const frames: Frame[] = [];
        const argv = [`--net=/run/netns/${client.name}`, process.execPath, CAPTURE, "capture", clientLink];
        const child = spawn("nsenter", argv);
        const forget = onExit(() => child.kill("SIGKILL"));
        const exited = new Promise((resolve) => child.once("exit", resolve));
        createInterface({ input: child.stdout }).on("line", (line) =>
          frames.push({ ...(JSON.parse(line) as Frame), at: performance.now() }),
        );
        const stop = async () => {
          child.stdin.end();
          await exited;
          forget();
        };
        stops.push(stop);
        await waitFor("the capture ready", () => frames.some((frame) => frame.ready));
        return { frames, stop };
      },
      async release(name) {
        const metadata = { annotations: { [ANNOUNCER_ANNOTATION]: null }, labels: { [ANNOUNCER_LABEL]: null } };
        return (await services.patch(name, "merge", { metadata })).metadata?.resourceVersion ?? "";
      },
      async assign(name, node, addresses) {
        const metadata = {
          name,
          namespace: "default",
          annotations: { [ANNOUNCER_ANNOTATION]: node },
          labels: { [ANNOUNCER_LABEL]: announcerLabelValue(node) },
        };
        const exists = await services.get(name).then(
          () => true,
          () => false,
        );
        if (exists) await services.patch(name, "merge", { metadata });
        else await services.create({ metadata, spec: { type: "LoadBalancer", ports: [{ port: 80 }] } });
        const ingress = addresses.map((ip) => ({ ip, ipMode: "VIP" }));
        await services.patch(name, "merge", { status: { loadBalancer: { ingress } } }, { subresource: "status" });
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
