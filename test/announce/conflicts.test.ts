// Another host on the nodes' segment, as itself (world.ts's client namespace, root in it): one that holds addresses
// assigned to a node, and one that claims addresses a node announces. The agent (as in production: uid 65532,
// CAP_NET_RAW only) probes before announcing: it never announces what the host holds (a Warning Event
// AddressConflict about its Node naming the address, the Service and the host's MAC; the conflicts metric), and
// announces it once the host lets go. A claim of an address it announces is reported (AddressClaimed, the metric)
// and answered by nothing: a capture on the client's link counts the node's gratuitous ARP and unsolicited NAs.
// Both are listed on the node's announcer Lease (CONFLICTS_ANNOTATION, for the pool controller: inuse.test.ts) while
// they last.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Event } from "kubernetes-types/core/v1.js";
import { TAKEOVER_SCHEDULE_MS } from "../../src/agent/announcer/arp-ndp/decide.ts";
import { CONFLICTS_ANNOTATION } from "../../src/pools/announcement.ts";
import { Resource } from "../../src/kube/resource.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { type FixtureLine, fixtureTool } from "../netns/fixture-tool.ts";
import { type AgentNode, type AnnounceWorld, startAnnounceWorld, SUBNET } from "./world.ts";

const NODE = "node-a";
const WAIT_MS = 60_000;

/** A frame on the client's link as announce-fixture.ts's capture prints it. */
interface Frame extends FixtureLine {
  from?: string;
  outgoing?: boolean;
  arp?: { operation: string; senderIp: string; targetIp: string };
  advertisement?: { target: string; solicited: boolean };
}

/** The fixture in the client's namespace as root (a test tool). */
const clientTool = (world: AnnounceWorld, mode: "capture" | "claimer") =>
  fixtureTool<Frame>(world.client.name, mode, world.clientLink);

/** Takeover announcements (gratuitous ARP, unsolicited NA) of `address` from `mac`. */
const announcements = (frames: Frame[], address: string, mac: string) =>
  frames.filter(
    (f) =>
      f.from === mac &&
      ((f.arp?.operation === "request" && f.arp.senderIp === address && f.arp.targetIp === address) ||
        (f.advertisement?.target === address && !f.advertisement.solicited)),
  );

describe("the agent and another host on its segment: probed before announcing, reported, never fought", () => {
  let world: AnnounceWorld;
  let node: AgentNode;
  let clientMac: string;
  let events: Resource<Event>;
  let capture: ReturnType<typeof clientTool>;
  let claimer: ReturnType<typeof clientTool>;

  before(async () => {
    world = await startAnnounceWorld(79);
    node = await world.addNode(NODE, 0);
    clientMac = JSON.parse(await world.client.ip("-j", "link", "show", world.clientLink))[0].address;
    const eventsIn = { group: "", version: "v1", plural: "events", namespace: "default" };
    events = new Resource<Event>(world.plane.admin, eventsIn);
    capture = clientTool(world, "capture");
    claimer = clientTool(world, "claimer");
    await capture.ready();
    await claimer.ready();
  });

  after(async () => {
    await capture?.stop();
    await claimer?.stop();
    await world?.stop();
  });

  const diagnose = (err: unknown): never => {
    const logs = node.logs().split("\n").slice(-40).join("\n");
    throw new Error(`${(err as Error).message}\nagent:\n${logs}`, { cause: err });
  };
  const metrics = async () => (await fetch(`http://${node.reachableAt}:10265/metrics`)).text();
  const counted = async (phase: string, rule: string) => {
    const line = `local_ccm_l2_address_conflicts_total{phase="${phase}",rule="${rule}"} `;
    const found = (await metrics()).split("\n").find((text) => text.startsWith(line));
    return Number(found?.slice(line.length) ?? 0);
  };
  /** Whether the node's Lease lists `address` as the client's. */
  const listed = async (address: string) => {
    const text = (await node.readLease())?.metadata?.annotations?.[CONFLICTS_ANNOTATION] ?? "";
    return text.split(",").includes(`${address}=${clientMac}`);
  };
  /** The Warning Events about the node's Node with `reason` whose message names `address` and the client's MAC. */
  const warnings = async (reason: string, address: string) => {
    const listed = await events.list({ fieldSelector: `involvedObject.name=${NODE},reason=${reason}` });
    const found = listed.items.filter(
      (e) => e.type === "Warning" && e.message?.includes(`${address} `) && e.message.includes(clientMac),
    );
    return found.length > 0 && found;
  };

  test("addresses the client holds are never announced (an Event, the metric), and are once it lets go", async () => {
    const held = [`${SUBNET.v4}.57`, `${SUBNET.v6}:57`];
    const prefixes = [`${held[0]}/24`, `${held[1]}/64`] as const;
    const device = ["dev", world.clientLink];
    await world.client.ip("address", "add", prefixes[0], ...device);
    await world.client.ip("address", "add", prefixes[1], ...device, "nodad");
    try {
      await world.assign("held", NODE, held);
      for (const address of held) {
        const conflict = () => warnings("AddressConflict", address);
        const [event] = await waitFor(`AddressConflict for ${address}`, conflict, WAIT_MS);
        assert.match(event?.message ?? "", /\(Service default\/held\)/);
      }
      await waitFor("the refusals counted", async () => {
        return (await counted("probing", "arp-sender")) > 0 && (await counted("probing", "advertisement")) > 0;
      });
      // Refused again at each reprobe (1 s, 2 s, …): still never announced in between.
      const refusals = await counted("probing", "arp-sender");
      await waitFor("a reprobe refused", async () => (await counted("probing", "arp-sender")) > refusals, WAIT_MS);
      assert.match(await metrics(), /^local_ccm_l2_announced_addresses 0$/m);
      for (const address of held) assert.deepEqual(announcements(capture.lines, address, node.mac), [], address);
      for (const address of held) await waitFor(`${address} listed on the Lease`, () => listed(address), WAIT_MS);
    } catch (err) {
      diagnose(err);
    } finally {
      for (const prefix of prefixes) await world.client.ip("address", "del", prefix, ...device);
    }
    try {
      for (const address of held) {
        const found = async () => (await world.resolve(address)) === node.mac;
        await waitFor(`${address} announced once the client let go`, found, WAIT_MS);
      }
      await waitFor("both announced", async () => /^local_ccm_l2_announced_addresses 2$/m.test(await metrics()));
      for (const address of held)
        await waitFor(`${address} no longer listed`, async () => !(await listed(address)), WAIT_MS);
    } catch (err) {
      diagnose(err);
    }
  });

  test("a claim of an announced address is reported (an Event, the metric), and answered by nothing", async () => {
    const announced = [`${SUBNET.v4}.58`, `${SUBNET.v6}:58`];
    const all = TAKEOVER_SCHEDULE_MS.length;
    try {
      await world.assign("claimed", NODE, announced);
      for (const address of announced) {
        const allSent = () => announcements(capture.lines, address, node.mac).length === all;
        await waitFor(`${address}'s takeover announcements`, allSent, WAIT_MS);
      }
      const claims = 3;
      for (const address of announced) for (let i = 0; i < claims; i++) await claimer.send(`claim ${address}`);
      await waitFor("the claims counted", async () => {
        const [arp, ndp] = [await counted("announced", "arp-sender"), await counted("announced", "advertisement")];
        return arp >= claims && ndp >= claims;
      });
      for (const address of announced) {
        // Reported once a minute per address and MAC, however many claims: one Event, counted once.
        const claimed = () => warnings("AddressClaimed", address);
        const [event, ...more] = await waitFor(`AddressClaimed for ${address}`, claimed, WAIT_MS);
        assert.deepEqual([event?.count, more], [1, []]);
        assert.match(event?.message ?? "", /\(Service default\/claimed\)/);
        await waitFor(`${address} listed on the Lease as claimed`, () => listed(address), WAIT_MS);
      }
      // The node's frames reach the client in the order sent: once its announcements of a later address are
      // there, anything it sent back at the claims would be too.
      const marker = `${SUBNET.v4}.59`;
      await world.assign("marker", NODE, [marker]);
      await waitFor("the marker announced", () => announcements(capture.lines, marker, node.mac).length > 0, WAIT_MS);
      for (const address of announced)
        assert.equal(announcements(capture.lines, address, node.mac).length, all, `${address}: nothing sent back`);
      // And it answers questions as before.
      for (const address of announced) assert.equal(await world.resolve(address), node.mac);
    } catch (err) {
      diagnose(err);
    }
  });
});
