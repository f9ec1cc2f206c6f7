// Two agents on one bridge (world.ts), the test in the pool controller's place: the Service is node A's; A loses the
// API (its link stays up); the test, watching A's Lease as the controller does, moves the Service to B only once
// the Lease has expired by leaseExpiry() on its own clock. Meanwhile the client keeps asking for the addresses, and
// a capture on its link (test/netns/announce-fixture.ts, our own packet socket) records who answers: A's last frame
// comes before B's first, so the two never answer at once, over ARP and NDP. B probes each address before it first
// announces it (conflicts.ts): the time from its assignment to its first answer shows what that adds.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { PROBE_DECIDED_MS } from "../../src/agent/announcer/conflicts.ts";
import { LEASE_DURATION_SECONDS, leaseExpiry } from "../../src/pools/announcement.ts";
import { sleep } from "../../src/time/backoff.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { type AgentNode, type AnnounceWorld, startAnnounceWorld, SUBNET } from "./world.ts";

const CAPTURE = path.resolve(import.meta.dirname, "../netns/announce-fixture.ts");
const ADDRESSES = [`${SUBNET.v4}.56`, `${SUBNET.v6}:56`];
const WAIT_MS = 60_000;
/** How often the test, as the controller, reads the Lease: its observation is at most this late. */
const POLL_MS = 100;

/** A frame the capture saw on the client's link, as announce-fixture.ts prints it. */
interface Frame {
  /** When the test read it (performance.now()). */
  at: number;
  ready?: boolean;
  from?: string;
  outgoing?: boolean;
  arp?: { operation: string; senderIp: string; targetIp: string };
  advertisement?: { target: string };
}

/** Whether a frame claims `address` for its sender: an ARP reply or gratuitous ARP, or a Neighbor Advertisement. */
const claims = (frame: Frame, address: string) =>
  !frame.outgoing &&
  ((frame.arp !== undefined && frame.arp.senderIp === address) || frame.advertisement?.target === address);

describe("failover between two agents: the old announcer is silent before the new one speaks", () => {
  let world: AnnounceWorld;
  let a: AgentNode;
  let b: AgentNode;
  const frames: Frame[] = [];
  let stopCapture: () => Promise<void> = async () => undefined;

  before(async () => {
    world = await startAnnounceWorld(78);
    a = await world.addNode("node-a", 0);
    b = await world.addNode("node-b", 1);
    const capture = spawn("nsenter", [
      `--net=/run/netns/${world.client.name}`,
      ...[process.execPath, CAPTURE, "capture", world.clientLink],
    ]);
    const forget = onExit(() => capture.kill("SIGKILL"));
    const exited = new Promise((resolve) => capture.once("exit", resolve));
    createInterface({ input: capture.stdout }).on("line", (line) =>
      frames.push({ ...(JSON.parse(line) as Frame), at: performance.now() }),
    );
    stopCapture = async () => {
      capture.stdin.end();
      await exited;
      forget();
    };
    await waitFor("the capture ready", () => frames.some((frame) => frame.ready));
  });

  after(async () => {
    await stopCapture();
    await world?.stop();
  });

  const everyAddress = (node: AgentNode) => async () => {
    for (const address of ADDRESSES) if ((await world.resolve(address)) !== node.mac) return false;
    return true;
  };

  const title = "A cut from the API, the Service moved to B once A's Lease expired: A's last answer precedes B's first";
  test(title, async (t) => {
    await world.assign("web", a.name, ADDRESSES);
    await waitFor("A answering for both addresses", everyAddress(a), WAIT_MS);

    a.proxy.cut();
    const cutAt = performance.now();
    let assignedAt: number | undefined;
    // The client keeps asking while the Service moves (a fresh question each round).
    let asking = true;
    const questions = (async () => {
      while (asking) for (const address of ADDRESSES) await world.resolve(address);
    })();
    try {
      // As the controller: A's Lease counts as live until leaseExpiry() of when its last change was seen.
      let [seen, observedAt] = [(await a.readLease())?.spec?.renewTime, performance.now()];
      while (performance.now() < leaseExpiry(observedAt, LEASE_DURATION_SECONDS)) {
        await sleep(POLL_MS);
        const renewTime = (await a.readLease())?.spec?.renewTime;
        if (renewTime !== seen) [seen, observedAt] = [renewTime, performance.now()];
      }
      assignedAt = performance.now();
      await world.assign("web", b.name, ADDRESSES);
      await waitFor("B answering for both addresses", everyAddress(b), WAIT_MS);
    } finally {
      asking = false;
      await questions;
    }

    for (const address of ADDRESSES) {
      const from = (node: AgentNode) =>
        frames.flatMap((frame, index) => (claims(frame, address) && frame.from === node.mac ? [index] : []));
      const [fromA, fromB] = [from(a), from(b)];
      assert.ok(fromA.length > 0 && fromB.length > 0, `${address}: both nodes were heard`);
      assert.ok(Math.max(...fromA) < Math.min(...fromB), `${address}: A's last frame before B's first`);
      // B's first frame for it: after its probes found nobody, within a bound generous for a loaded machine.
      const firstAt = frames[Math.min(...fromB)]?.at ?? Infinity;
      const [sinceAssigned, sinceCut] = [Math.round(firstAt - (assignedAt ?? NaN)), Math.round(firstAt - cutAt)];
      t.diagnostic(`${address}: B's first frame ${sinceAssigned} ms after its assignment, ${sinceCut} ms after A's cut`);
      assert.ok(sinceAssigned >= PROBE_DECIDED_MS, `${address}: probed first (${sinceAssigned} ms)`);
      assert.ok(sinceAssigned < PROBE_DECIDED_MS + 2000, `${address}: ${sinceAssigned} ms after its assignment`);
    }
  });
});
