// A pool address another host holds, told where its owners look: a real kube-apiserver, the address pool controller
// (in this process, with its own RBAC: election-world.ts), two agents on one bridge (world.ts), and the
// client host holding the pool's address on the bridge (an address added to its link: its kernel answers ARP). The
// announcer's probes are answered, so it never announces the address and lists it on its Lease; the controller
// writes a Warning about the Service (AddressInUseOnNetwork, naming the node, the address and the host's MAC) and a
// line in the pool's status, and moves the address nowhere. Once the host lets the address go, the announcer's next
// probe finds nobody: it announces, the Lease no longer lists it, and the pool's line goes.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Event } from "kubernetes-types/core/v1.js";
import { Resource } from "../../src/kube/resource.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION, CONFLICTS_ANNOTATION } from "../../src/pools/announcement.ts";
import type { LoadBalancerIPPool } from "../../src/pools/pool.ts";
import { waitFor } from "../../localcluster/wait.ts";
import type { RunningController } from "../pools/world.ts";
import { startElection } from "./election-world.ts";
import { type AgentNode, type AnnounceWorld, startAnnounceWorld, SUBNET } from "./world.ts";

/** Refused addresses are probed again after 1 s, doubling to 30 s: the host's leaving is seen within that. */
const WAIT_MS = 90_000;
const ADDRESS = `${SUBNET.v4}.71`;

describe("a pool address another host holds: a Warning on the Service and a pool line, until the host lets go", () => {
  let world: AnnounceWorld;
  let nodes: AgentNode[];
  let running: RunningController;
  let pools: Resource<LoadBalancerIPPool>;
  let events: Resource<Event>;
  let clientMac = "";

  before(async () => {
    world = await startAnnounceWorld(80);
    ({ nodes, pools, running } = await startElection(world, [ADDRESS]));
    clientMac = JSON.parse(await world.client.ip("-j", "link", "show", world.clientLink))[0].address;
    const eventsIn = { group: "", version: "v1", plural: "events", namespace: "default" };
    events = new Resource<Event>(world.plane.admin, eventsIn);
  });

  after(async () => {
    await running?.stop();
    await world?.stop();
  });

  const announcer = async () => (await world.services.get("web")).metadata?.annotations?.[ANNOUNCER_ANNOTATION];
  const poolLines = async () => (await pools.get("bridge")).status?.conflicts ?? [];
  const ready = async () =>
    (await pools.get("bridge")).status?.conditions?.find(({ type }) => type === "Ready")?.reason;
  const diagnose = (err: unknown): never => {
    const logs = nodes.map((node) => `${node.name}:\n${node.logs().split("\n").slice(-30).join("\n")}`).join("\n");
    throw new Error(`${(err as Error).message}\n${logs}`, { cause: err });
  };

  test("refused by the probes: told on the Service and the pool, not moved; gone when the host goes", async () => {
    const prefix = `${ADDRESS}/24`;
    const device = ["dev", world.clientLink];
    await world.client.ip("address", "add", prefix, ...device);
    let held = true;
    try {
      await world.services.create({
        metadata: { name: "web" },
        spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port: 80, protocol: "TCP" }] },
      });
      const first = await waitFor("web given an announcer", announcer, WAIT_MS);
      const node = nodes.find(({ name }) => name === first) as AgentNode;
      const listed = async () => (await node.readLease())?.metadata?.annotations?.[CONFLICTS_ANNOTATION];
      const listing = async () => (await listed()) === `${ADDRESS}=${clientMac}`;
      await waitFor("the announcer's Lease lists the address", listing, WAIT_MS);
      const [event, ...more] = await waitFor(
        "the Warning on web",
        async () => {
          const selector = `involvedObject.name=web,reason=AddressInUseOnNetwork`;
          const { items } = await events.list({ fieldSelector: selector });
          return items.length > 0 && items;
        },
        WAIT_MS,
      );
      assert.deepEqual(more, []);
      assert.equal(event?.type, "Warning");
      const named = `another host (${clientMac}) answers for ${ADDRESS} on the segment of node ${first}`;
      assert.ok(event?.message?.includes(named), event?.message);
      const line =
        `${ADDRESS} (Service default/web) is answered by another host, ${clientMac}, on the segment of node ${first}`;
      await waitFor("the pool's line", async () => (await poolLines()).includes(line), WAIT_MS);
      assert.equal(await ready(), "AddressesInUse");
      const metrics = await (await fetch(`http://${node.reachableAt}:10265/metrics`)).text();
      assert.match(metrics, /^local_ccm_l2_announced_addresses 0$/m, "the node announces nothing beside the host");
      assert.equal(await announcer(), first, "not moved to the other node, which would meet the same host");

      await world.client.ip("address", "del", prefix, ...device);
      held = false;
      await waitFor("announced once the host let go", async () => (await world.resolve(ADDRESS)) === node.mac, WAIT_MS);
      await waitFor("the Lease lists nothing", async () => (await listed()) === undefined, WAIT_MS);
      await waitFor("the pool's line gone", async () => (await poolLines()).length === 0, WAIT_MS);
      assert.equal(await ready(), "Serving");
      assert.equal(await announcer(), first);
    } catch (err) {
      diagnose(err);
    } finally {
      if (held) await world.client.ip("address", "del", prefix, ...device);
    }
  });
});
