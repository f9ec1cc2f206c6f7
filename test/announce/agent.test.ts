// The agent announcing for real: a kube-apiserver, the agent (src/bin/local-ccm.ts, --lb-l2-announce) in a node's
// network namespace as uid 65532 with CAP_NET_RAW only, reaching the API through a proxy the test can cut, and a
// client on the node's bridge. Its announcer Lease is created with label, segments and holder, renewed, recreated
// when deleted; a Service assigned to the node (annotation and label, an ingress IP in the link's subnet) makes the
// client resolve that IP to the node's MAC, over ARP and NDP; moved to another node, or with the API cut, the node
// stops answering, and answers again when the API returns; on SIGTERM it withdraws and deletes its Lease.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Service } from "kubernetes-types/core/v1.js";
import { isApiError } from "../../src/kube/errors.ts";
import { leaseResource, Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LABEL,
  ANNOUNCER_LEASE_LABEL,
  announcerLabelValue,
  announcerLeaseName,
  LEASE_DURATION_SECONDS,
  SEGMENTS_ANNOTATION,
} from "../../src/pools/announcement.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { quietHost } from "../netns/detect-client.ts";
import { createNetwork, type Host, type Network } from "../netns/netns.ts";
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.ts";

const AGENT = path.resolve(import.meta.dirname, "../../src/bin/local-ccm.ts");
const NODE = "node-a";
const NAMESPACE = "kube-system";
const LEASE = announcerLeaseName(NODE) as string;
const [ROOT_IP, NODE_ROOT_IP] = ["198.19.77.1", "198.19.77.2"];
const SUBNET = { v4: "198.18.77", v6: "fd00:198:77:" };
const ADDRESSES = [`${SUBNET.v4}.55`, `${SUBNET.v6}:55`];
const WAIT_MS = 60_000;
/** As the chart's DaemonSet when announcing is on: CAP_NET_RAW only (here as uid 65532, given it as ambient). */
const RAW_ONLY = [
  "--reuid=65532",
  "--regid=65532",
  "--clear-groups",
  "--inh-caps=-all,+net_raw",
  "--ambient-caps=-all,+net_raw",
  "--bounding-set=-all,+net_raw",
];

describe("the agent announcing LoadBalancer addresses, with its Lease, against a real kube-apiserver", () => {
  let net: Network;
  let plane: ControlPlane;
  let proxy: TcpProxy;
  let node: Host;
  let nodeLink: string;
  let client: Host;
  let clientLink: string;
  let nodeMac: string;
  let agent: ChildProcess;
  let agentExit: Promise<number | null>;
  let forgetAgent: () => void;
  let dir: string;
  const logs: string[] = [];
  let leases: Resource<Lease>;
  let services: Resource<Service>;

  before(async () => {
    net = await createNetwork();
    const bridge = await net.host();
    await bridge.ip("link", "add", "br0", "type", "bridge");
    await bridge.ip("link", "set", "br0", "up");
    const join = async (host: Host, suffix: number) => {
      const addressesB = [`${SUBNET.v4}.${suffix}/24`, `${SUBNET.v6}:${suffix}/64`];
      const link = await net.link(bridge, host, { addressesB });
      await bridge.ip("link", "set", link.nameA, "master", "br0");
      return link.nameB;
    };
    node = await quietHost(net);
    client = await quietHost(net);
    nodeLink = await join(node, 1);
    clientLink = await join(client, 9);
    nodeMac = JSON.parse(await node.ip("-j", "link", "show", nodeLink))[0].address;
    // The node's link to the API: it has a MAC too, and is left out by --lb-l2-interfaces.
    await net.link("root", node, { addressesA: [`${ROOT_IP}/30`], addressesB: [`${NODE_ROOT_IP}/30`] });

    plane = await startControlPlane({ extraIPs: [ROOT_IP] });
    leases = new Resource<Lease>(plane.admin, leaseResource(NAMESPACE));
    services = new Resource<Service>(plane.admin, { ...SERVICE_RESOURCE, namespace: "default" });
    const apiserver = new URL(plane.serverAt(ROOT_IP));
    proxy = await startTcpProxy(ROOT_IP, { host: ROOT_IP, port: Number(apiserver.port) });
    // RBAC is not what this file proves (least privilege and the node-scope policy have their own tests).
    await plane.kubectl(["create", "serviceaccount", "l2-agent", "-n", NAMESPACE]);
    const binding = ["create", "clusterrolebinding", "l2-agent", "--clusterrole=cluster-admin"];
    await plane.kubectl([...binding, `--serviceaccount=${NAMESPACE}:l2-agent`]);
    const server = `https://${ROOT_IP}:${proxy.port}`;
    const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: NAMESPACE, name: "l2-agent", server });
    // The agent's user must read it: a folder of its own.
    dir = await mkdtemp(path.join(os.tmpdir(), "l2-agent-"));
    await chmod(dir, 0o755);
    await writeFile(path.join(dir, "kubeconfig"), await readFile(kubeconfig), { mode: 0o644 });

    const args = [
      AGENT,
      `--node-name=${NODE}`,
      `--kubeconfig=${path.join(dir, "kubeconfig")}`,
      "--lb-l2-announce",
      `--lb-l2-lease-namespace=${NAMESPACE}`,
      `--lb-l2-interfaces=${nodeLink}`,
      "--external-ip-target=",
      "--require-local-node=false",
      "--secure-metrics=false",
      "--v=2",
    ];
    const argv = ["setpriv", "--pdeathsig", "KILL", ...RAW_ONLY, "--", process.execPath, ...args];
    agent = spawn("nsenter", [`--net=/run/netns/${node.name}`, ...argv], { stdio: ["ignore", "pipe", "pipe"] });
    forgetAgent = onExit(() => agent.kill("SIGKILL"));
    agentExit = new Promise((resolve) => agent.once("exit", (code) => resolve(code)));
    for (const stream of [agent.stdout, agent.stderr]) stream?.on("data", (chunk: Buffer) => logs.push(String(chunk)));
  });

  after(async () => {
    if (agent && agent.exitCode === null) {
      agent.kill("SIGKILL");
      await agentExit;
    }
    forgetAgent?.();
    await proxy?.close();
    await plane?.stop();
    await net?.remove();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** What went wrong, with the agent's last words. */
  const diagnose = (err: unknown): never => {
    throw new Error(`${(err as Error).message}\nagent:\n${logs.join("").split("\n").slice(-40).join("\n")}`, {
      cause: err,
    });
  };
  const readLease = () =>
    leases.get(LEASE).catch((err: unknown) => {
      if (isApiError(err, "NotFound")) return undefined;
      throw err;
    });

  const neighbour = async (address: string): Promise<{ lladdr?: string; state: string[] } | undefined> =>
    JSON.parse(await client.ip("-j", "neigh", "show", "to", address, "dev", clientLink))[0];
  /** A datagram to the discard port: the client resolves the address first. */
  const sendFromClient = (address: string) =>
    client.exec(process.execPath, [
      "-e",
      `const s = require("node:dgram").createSocket("udp${address.includes(":") ? 6 : 4}");
       s.send("x", 9, ${JSON.stringify(address)}, () => s.close());`,
    ]);
  /** Asks afresh, and gives the MAC that answered, or undefined when nobody did. */
  const resolve = async (address: string): Promise<string | undefined> => {
    await client.ip("neigh", "flush", "to", address, "dev", clientLink);
    await sendFromClient(address);
    const settled = await waitFor(`the client's question about ${address} settled`, async () => {
      const entry = await neighbour(address);
      return entry && !entry.state.includes("INCOMPLETE") && entry;
    });
    return settled.state.includes("FAILED") ? undefined : settled.lladdr;
  };
  const everyAddress = (mac: string | undefined) => async () => {
    for (const address of ADDRESSES) if ((await resolve(address)) !== mac) return false;
    return true;
  };
  const answered = (what: string) => waitFor(what, everyAddress(nodeMac), WAIT_MS).catch(diagnose);
  const unanswered = (what: string) => waitFor(what, everyAddress(undefined), WAIT_MS).catch(diagnose);

  /** Assigns the Service to `node` as the pool controller does: the annotation, the label, the ingress. */
  const assign = async (node: string) => {
    const metadata = {
      name: "web",
      namespace: "default",
      annotations: { [ANNOUNCER_ANNOTATION]: node },
      labels: { [ANNOUNCER_LABEL]: announcerLabelValue(node) },
    };
    const current = await services.get("web").catch(() => undefined);
    const service = current
      ? await services.patch("web", "merge", { metadata })
      : await services.create({ metadata, spec: { type: "LoadBalancer", ports: [{ port: 80 }] } });
    // And one in none of the node's segments: skipped by rule.
    const ingress = [...ADDRESSES, "203.0.113.5"].map((ip) => ({ ip, ipMode: "VIP" }));
    const name = service.metadata?.name as string;
    await services.patch(name, "merge", { status: { loadBalancer: { ingress } } }, { subresource: "status" });
  };

  test("the Lease: created with label, segments and holder; renewed; created again when deleted", async () => {
    const first = await waitFor("the announcer Lease", readLease, WAIT_MS).catch(diagnose);
    assert.equal(first.metadata?.labels?.[ANNOUNCER_LEASE_LABEL], "true");
    assert.equal(first.metadata?.annotations?.[SEGMENTS_ANNOTATION], `${SUBNET.v4}.0/24,${SUBNET.v6}:/64`);
    assert.equal(first.spec?.holderIdentity, NODE);
    assert.equal(first.spec?.leaseDurationSeconds, LEASE_DURATION_SECONDS);
    const renewed = async () => (await readLease())?.spec?.renewTime !== first.spec?.renewTime;
    await waitFor("a renewal (renewTime moves)", renewed, WAIT_MS).catch(diagnose);
    await leases.delete(LEASE);
    const again = async () => {
      const lease = await readLease();
      return lease && lease.metadata?.uid !== first.metadata?.uid && lease;
    };
    const recreated = await waitFor("the Lease created again", again, WAIT_MS).catch(diagnose);
    assert.equal(recreated.spec?.holderIdentity, NODE);
  });

  test("the Lease: another writer's change is re-read and kept (holder taken back); segments follow the links", async () => {
    const lease = (await readLease()) as Lease;
    const labels = { ...lease.metadata?.labels, team: "net" };
    // Its next update, pinned to the resourceVersion it read, conflicts: it re-reads and renews on top.
    await leases.update({ ...lease, metadata: { ...lease.metadata, labels }, spec: { ...lease.spec, holderIdentity: "x" } });
    const renewedOnTop = async () => {
      const current = await readLease();
      return current?.spec?.holderIdentity === NODE && current.metadata?.labels?.team === "net";
    };
    await waitFor("the Lease renewed on top of the other writer's change", renewedOnTop, WAIT_MS).catch(diagnose);
    await node.ip("address", "add", "198.18.78.1/24", "dev", nodeLink);
    const segments = `${SUBNET.v4}.0/24,198.18.78.0/24,${SUBNET.v6}:/64`;
    const followed = async () => (await readLease())?.metadata?.annotations?.[SEGMENTS_ANNOTATION] === segments;
    await waitFor(`segments ${segments}`, followed, WAIT_MS).catch(diagnose);
  });

  test("a Service assigned to the node is announced (ARP, NDP); assigned to another node, it is not", async () => {
    await assign(NODE);
    await answered("the client resolving both addresses to the node's MAC");
    const metrics = await (await fetch(`http://${NODE_ROOT_IP}:10265/metrics`)).text();
    assert.match(metrics, /^local_ccm_l2_announced_addresses 2$/m);
    assert.match(metrics, /^local_ccm_l2_skipped_addresses\{rule="no-segment"\} 1$/m, "the address outside its segments");
    await assign("node-b");
    await unanswered("nobody answering once the Service is another node's");
    await assign(NODE);
    await answered("the node answering again once it is assigned back");
  });

  test("with the API cut, the node stops answering; when the API returns, it answers again", async (t) => {
    await answered("the node answering before the cut");
    proxy.cut();
    await unanswered("nobody answering while the node cannot renew its Lease");
    assert.match(logs.join(""), /renewing the announcer Lease failed/);
    // A figure, not a check (timers run late on a loaded machine): how long after its deadline it withdrew.
    t.diagnostic(/not surely valid.*afterDeadlineMs=\S+/.exec(logs.join(""))?.[0] ?? "no withdrawal logged");
    proxy.restore();
    await answered("the node answering again once its Lease is renewed");
  });

  test("SIGTERM: everything withdrawn, the Lease deleted, exit 0", async () => {
    await answered("the node answering before it stops");
    agent.kill("SIGTERM");
    assert.equal(await agentExit, 0);
    assert.equal(await readLease(), undefined, "the Lease is deleted");
    await unanswered("nobody answering once the agent has stopped");
    const lines = logs.join("");
    const [withdrawn, deleted] = [lines.indexOf("withdrawn everything"), lines.indexOf("announcer Lease deleted")];
    assert.ok(withdrawn >= 0 && deleted > withdrawn, "withdrawn, then the Lease deleted");
  });
});
