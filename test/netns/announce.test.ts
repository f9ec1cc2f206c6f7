// The announcer on a real link, in network namespaces this file creates (nothing leaves the machine): two nodes
// and a client on one bridge, an address configured nowhere. The announcer runs in a node's namespace as uid 65532
// with CAP_NET_RAW only. The client resolves the address to the announcing node's MAC; after a takeover its entry
// moves to the new node's MAC without the client asking (gratuitous ARP, unsolicited NA), and a fresh resolution
// gives the new node. A capture on the client (our own packet socket) shows one answer per request, from the
// announcer only, and every takeover announcement the schedule promises. The client also plays another host on the
// segment: one that holds an address (the announcer probes, finds it, never announces it, and does once the client
// lets it go), and one that claims an announced address (reported; the announcer sends nothing back).
import assert from "node:assert/strict";
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { TAKEOVER_SCHEDULE_MS } from "../../src/agent/announcer/arp-ndp/decide.ts";
import type { ArpPacket } from "../../src/net/arp.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { quietHost } from "./detect-client.ts";
import { type Host, networkPool, RAW_ONLY } from "./netns.ts";

const FIXTURE = path.join(import.meta.dirname, "announce-fixture.ts");
const NONE = ["--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"];
const WAIT_MS = 30_000;

interface Event {
  ready?: boolean;
  link?: { index: number; name: string; mac: string };
  done?: string;
  error?: string;
  decision?: { family: 4 | 6; rule: string; reason: string };
  conflict?: { family: 4 | 6; address: string; mac: string; rule: string; action: "refuse" | "report" };
  // capture
  from?: string;
  to?: string;
  outgoing?: boolean;
  arp?: ArpPacket;
  source?: string;
  solicitation?: { target: string } | null;
  advertisement?: { target: string; solicited: boolean; override: boolean; mac?: string };
}

interface Fixture {
  events: Event[];
  mac: string;
  /** Sends a command to the announcer and waits until it is done; rejects with the announcer's error. */
  command(line: string): Promise<void>;
  stop(): Promise<void>;
}

/** The announcer as the agent, with CAP_NET_RAW or with no capability; capture and claimer as root (test tools). */
async function startFixture(
  host: Host,
  mode: "announcer" | "capture" | "claimer",
  link: string,
  capabilities: "raw" | "none" = "raw",
): Promise<Fixture> {
  const node = [process.execPath, FIXTURE, mode, link];
  const privileges = mode !== "announcer" ? [] : capabilities === "raw" ? RAW_ONLY : NONE;
  // Each dies with this process, even a SIGKILLed one.
  const argv = ["setpriv", "--pdeathsig", "KILL", ...privileges, "--", ...node];
  const child: ChildProcessWithoutNullStreams = spawn("nsenter", [`--net=/run/netns/${host.name}`, ...argv]);
  const forget = onExit(() => child.kill("SIGKILL"));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk;
  });
  const events: Event[] = [];
  createInterface({ input: child.stdout }).on("line", (line) => events.push(JSON.parse(line)));
  const ready = await waitFor(`${mode} in ${host.name} ready (stderr: ${stderr})`, () => events.find((e) => e.ready));
  return {
    events,
    mac: ready.link?.mac ?? "",
    async command(line) {
      const before = events.filter((e) => e.done === line).length;
      child.stdin.write(`${line}\n`);
      const done = await waitFor(
        `${mode} done with ${line}`,
        () => events.filter((e) => e.done === line)[before],
        WAIT_MS,
      );
      if (done.error) throw new Error(done.error);
    },
    async stop() {
      child.stdin.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
      forget();
    },
  };
}

describe("L2 announcer in network namespaces", () => {
  const pool = networkPool();
  let client: Host;
  let clientLink: string;
  let hostA: Host;
  let linkA: string;
  let nodeA: Fixture;
  let nodeB: Fixture;
  let capture: Fixture;
  let claimer: Fixture;

  before(async () => {
    const net = await pool.create();
    const bridge = await net.host();
    await bridge.ip("link", "add", "br0", "type", "bridge");
    await bridge.ip("link", "set", "br0", "up");
    const join = async (host: Host, suffix: number) => {
      const link = await net.link(bridge, host, {
        addressesB: [`198.18.0.${suffix}/24`, `fd00:198:18::${suffix}/64`],
      });
      await bridge.ip("link", "set", link.nameA, "master", "br0");
      return link.nameB;
    };
    const [a, b] = [await quietHost(net), await quietHost(net)];
    client = await quietHost(net);
    hostA = a;
    linkA = await join(a, 1);
    const linkB = await join(b, 2);
    clientLink = await join(client, 9);
    // A question the client re-sends before the answer came would pass for a second one: it waits long for an
    // answer. A stale entry in use is re-checked after 1 s, not 5.
    await client.exec("sysctl", [
      "-q",
      "-w",
      ...[4, 6].flatMap((family) => [
        `net.ipv${family}.neigh.${clientLink}.retrans_time_ms=10000`,
        `net.ipv${family}.neigh.${clientLink}.delay_first_probe_time=1`,
      ]),
    ]);
    capture = await startFixture(client, "capture", clientLink);
    nodeA = await startFixture(a, "announcer", linkA);
    nodeB = await startFixture(b, "announcer", linkB);
    claimer = await startFixture(client, "claimer", clientLink);
  });

  after(async () => {
    for (const fixture of [nodeA, nodeB, capture, claimer]) await fixture?.stop();
    await pool.removeAll();
  });

  /** The client's neighbour entry for `address`, if it has one. */
  const neighbour = async (address: string): Promise<{ lladdr?: string; state: string[] } | undefined> =>
    JSON.parse(await client.ip("-j", "neigh", "show", "to", address, "dev", clientLink))[0];
  /** Its MAC, undefined while it has none (or an unresolved one). */
  const clientEntry = async (address: string) => (await neighbour(address))?.lladdr;
  /** A datagram to the discard port: the client resolves the address first. */
  const sendFromClient = (address: string) =>
    client.exec(process.execPath, [
      "-e",
      `const s = require("node:dgram").createSocket("udp${address.includes(":") ? 6 : 4}");
       s.send("x", 9, ${JSON.stringify(address)}, () => s.close());`,
    ]);
  const resolvedTo = (address: string, mac: string) =>
    waitFor(`client resolves ${address} to ${mac}`, async () => (await clientEntry(address)) === mac, WAIT_MS);

  /** Per family: what the capture counts as the client's question, an answer, and a takeover announcement. */
  const captured = {
    4: {
      question: (e: Event, address: string) =>
        e.outgoing && e.arp?.operation === "request" && e.arp.targetIp === address && e.arp.senderIp !== address,
      answer: (e: Event, address: string) => !e.outgoing && e.arp?.operation === "reply" && e.arp.senderIp === address,
      announcement: (e: Event, address: string) =>
        e.arp?.operation === "request" && e.arp.senderIp === address && e.arp.targetIp === address,
    },
    6: {
      question: (e: Event, address: string) => e.outgoing && e.solicitation?.target === address,
      answer: (e: Event, address: string) =>
        !e.outgoing && e.advertisement?.target === address && e.advertisement.solicited,
      announcement: (e: Event, address: string) =>
        e.advertisement?.target === address && !e.advertisement.solicited && e.advertisement.override,
    },
  } as const;

  // Per family, the announced address and one configured nowhere and never announced, which the announcer hears
  // asked for (IPv6: in the same solicited-node group) and must leave unanswered.
  for (const [family, address, other] of [
    [4, "198.18.0.55", "198.18.0.56"],
    [6, "fd00:198:18::55", "fd00:198:18::1:0:55"],
  ] as const) {
    const title = `IPv${family}: the client finds ${address} at the announcer's MAC, and at the new one's after takeover`;
    test(title, async () => {
      const { question, answer, announcement } = captured[family];
      type Matcher = (e: Event, address: string) => boolean | undefined;
      const seen = (what: Matcher, from?: string, about: string = address) =>
        capture.events.filter((e) => what(e, about) && (from === undefined || e.from === from));
      const announcements = TAKEOVER_SCHEDULE_MS.length;
      const allAnnounced = (from?: string) => () => seen(announcement, from).length === announcements;

      await nodeA.command(`announce ${address}`);
      await waitFor(`A's ${announcements} takeover announcements`, allAnnounced(), WAIT_MS);
      // Announcements update entries, they create none (Linux: arp_accept 0; an unsolicited NA never creates one).
      assert.equal(await clientEntry(address), undefined);
      await sendFromClient(address);
      await resolvedTo(address, nodeA.mac);

      // A hears the client ask for another address, and leaves it unanswered.
      await sendFromClient(other);
      const declined = (e: Event) =>
        e.decision?.rule === "not-announced" && e.decision.reason.includes(`about ${other}:`);
      await waitFor(`A declining to answer for ${other}`, () => nodeA.events.some(declined), WAIT_MS);

      // Takeover: the client's existing entry moves to B without the client asking anything.
      const asked = seen(question).length;
      await nodeA.command(`withdraw ${address}`);
      await nodeB.command(`announce ${address}`);
      await resolvedTo(address, nodeB.mac);
      await waitFor(`B's ${announcements} takeover announcements`, allAnnounced(nodeB.mac), WAIT_MS);
      assert.equal(seen(question).length, asked, "the client did not ask: the announcements moved its entry");

      // A fresh resolution finds B.
      await client.ip("neigh", "flush", "to", address, "dev", clientLink);
      assert.equal(await clientEntry(address), undefined);
      await sendFromClient(address);
      await resolvedTo(address, nodeB.mac);

      // Neighbour unreachability detection: a stale entry in use is re-checked by a unicast question to B's MAC
      // for an address B does not hold; answered, the entry is reachable again (unanswered, it would fail).
      await client.ip("neigh", "change", address, "lladdr", nodeB.mac, "nud", "stale", "dev", clientLink);
      await sendFromClient(address);
      await waitFor("the re-checked entry reachable", async () => {
        const entry = await neighbour(address);
        return entry?.lladdr === nodeB.mac && entry.state.includes("REACHABLE");
      });
      assert.equal(seen(question).filter((e) => e.to === nodeB.mac).length, 1, "one unicast question");

      const questions = seen(question);
      const answers = seen(answer);
      assert.equal(questions.length, 3, JSON.stringify(questions));
      assert.deepEqual(
        answers.map((e) => e.from),
        [nodeA.mac, nodeB.mac, nodeB.mac],
        `one answer per question, from the announcer of the time: ${JSON.stringify(answers)}`,
      );
      assert.deepEqual(
        seen(announcement).map((e) => e.from),
        [...Array(announcements).fill(nodeA.mac), ...Array(announcements).fill(nodeB.mac)],
      );
      assert.deepEqual(seen(answer, undefined, other), [], `nobody answers for ${other}`);
      if (family === 6)
        for (const e of [...answers, ...seen(announcement)]) assert.equal(e.advertisement?.mac, e.from, "NA's own MAC");
      else for (const e of answers) assert.equal(e.arp?.senderMac, e.from, "ARP reply's own MAC");
    });
  }

  /** What the capture counts as a node's probe, and an answer from a node (to a probe or a question). */
  const probing = {
    4: {
      probe: (e: Event, address: string) =>
        e.arp?.operation === "request" && e.arp.senderIp === "0.0.0.0" && e.arp.targetIp === address,
      answer: (e: Event, address: string) => e.arp?.operation === "reply" && e.arp.senderIp === address,
    },
    6: {
      probe: (e: Event, address: string) => e.source === "::" && e.solicitation?.target === address,
      answer: (e: Event, address: string) => e.advertisement?.target === address,
    },
  } as const;
  type Matcher = (e: Event, address: string) => boolean | undefined;
  const capturedFrames = (what: Matcher, address: string, from?: string) =>
    capture.events.filter((e) => what(e, address) && (from === undefined || e.from === from));
  const conflicts = (fixture: Fixture, action: "refuse" | "report", address: string) =>
    fixture.events.filter((e) => e.conflict?.action === action && e.conflict.address === address);
  /** Tells `fixture` to announce `address` (again: the agent does each second) until `done` holds. */
  const announceUntil = (fixture: Fixture, address: string, what: string, done: () => boolean) =>
    waitFor(
      what,
      async () => {
        await fixture.command(`announce ${address}`);
        return done();
      },
      WAIT_MS,
    );

  for (const [family, address, prefix] of [
    [4, "198.18.0.60", 24],
    [6, "fd00:198:18::60", 64],
  ] as const) {
    test(`IPv${family}: an address another host answers for is refused and never announced until it goes`, async () => {
      const { probe, answer } = probing[family];
      const { announcement } = captured[family];
      const held = [`${address}/${prefix}`, "dev", clientLink];
      await client.ip("address", "add", ...held, ...(family === 6 ? ["nodad"] : []));
      let clientHolds = true;
      try {
        await nodeA.command(`announce ${address}`);
        await waitFor(`A refusing ${address}`, () => conflicts(nodeA, "refuse", address).length > 0, WAIT_MS);
        // Probed again a second later, when asked again (the agent asks each second): refused again.
        await announceUntil(nodeA, address, `A refusing ${address} again`, () => {
          return conflicts(nodeA, "refuse", address).length > 1;
        });
        for (const { conflict } of conflicts(nodeA, "refuse", address))
          assert.deepEqual(
            { mac: conflict?.mac, rule: conflict?.rule },
            { mac: capture.mac, rule: family === 4 ? "arp-sender" : "advertisement" },
          );
        const probes = capturedFrames(probe, address, nodeA.mac);
        assert.ok(probes.length >= 2 && probes.every((e) => !e.outgoing), `A's probes: ${JSON.stringify(probes)}`);
        assert.ok(capturedFrames(answer, address, capture.mac).length >= 2, "the client's kernel answered them");
        assert.deepEqual(capturedFrames(announcement, address, nodeA.mac), [], "A never announced it");
        assert.deepEqual(capturedFrames(answer, address, nodeA.mac), [], "nor answered for it");

        await client.ip("address", "del", ...held);
        clientHolds = false;
        const announced = () => capturedFrames(announcement, address, nodeA.mac).length === TAKEOVER_SCHEDULE_MS.length;
        await announceUntil(nodeA, address, `A announcing ${address} once the client let go`, announced);
        await client.ip("neigh", "flush", "to", address, "dev", clientLink);
        await sendFromClient(address);
        await resolvedTo(address, nodeA.mac);
      } finally {
        if (clientHolds) await client.ip("address", "del", ...held);
        await nodeA.command(`withdraw ${address}`);
      }
    });
  }

  for (const [family, address, marker] of [
    [4, "198.18.0.61", "198.18.0.62"],
    [6, "fd00:198:18::61", "fd00:198:18::62"],
  ] as const) {
    test(`IPv${family}: another MAC claiming an announced address is reported, never fought over`, async () => {
      const { announcement } = captured[family];
      const all = TAKEOVER_SCHEDULE_MS.length;
      const announcedBy = (fixture: Fixture, about: string) => () =>
        capturedFrames(announcement, about, fixture.mac).length === all;
      await nodeA.command(`announce ${address}`);
      await waitFor(`A's ${all} takeover announcements`, announcedBy(nodeA, address), WAIT_MS);

      const claims = 5;
      for (let i = 0; i < claims; i++) await claimer.command(`claim ${address}`);
      await waitFor(`A reporting ${claims} claims`, () => conflicts(nodeA, "report", address).length === claims);
      for (const { conflict } of conflicts(nodeA, "report", address))
        assert.deepEqual(
          { mac: conflict?.mac, rule: conflict?.rule },
          { mac: capture.mac, rule: family === 4 ? "arp-sender" : "advertisement" },
        );
      // A's frames reach the client in the order A sent them: once its first announcement of `marker` is there,
      // anything it sent back at the claims would be too.
      await nodeA.command(`announce ${marker}`);
      const markerSeen = () => capturedFrames(announcement, marker, nodeA.mac).length > 0;
      await waitFor(`A's first announcement of ${marker}`, markerSeen, WAIT_MS);
      assert.equal(capturedFrames(announcement, address, nodeA.mac).length, all, "no announcement answered a claim");
      // It still answers questions as before.
      await client.ip("neigh", "flush", "to", address, "dev", clientLink);
      await sendFromClient(address);
      await resolvedTo(address, nodeA.mac);

      // Another announcer told to take it (a stale assignment) finds A answering its probes, and never announces it.
      await nodeB.command(`announce ${address}`);
      await waitFor(`B refusing ${address}`, () => conflicts(nodeB, "refuse", address).length > 0, WAIT_MS);
      assert.equal(conflicts(nodeB, "refuse", address)[0]?.conflict?.mac, nodeA.mac);
      await nodeA.command(`withdraw ${address}`);
      await announceUntil(nodeB, address, `B announcing ${address} once A withdrew`, announcedBy(nodeB, address));
      assert.deepEqual(conflicts(nodeA, "report", address).length, claims, "A saw B only after it withdrew");
      await nodeA.command(`withdraw ${marker}`);
      await nodeB.command(`withdraw ${address}`);
    });
  }

  test("refusals: no IP address, a zone, IPv4-mapped IPv6; without CAP_NET_RAW, the kernel's EPERM", async () => {
    const refusal = (fixture: Fixture, address: string) =>
      fixture.command(`announce ${address}`).then(
        () => "announced",
        (err: Error) => err.message,
      );
    assert.equal(await refusal(nodeA, "198.18.0.256"), 'announcer: "198.18.0.256" is not an IP address');
    assert.equal(await refusal(nodeA, "fe80::1%eth0"), 'announcer: "fe80::1%eth0" is not an IP address');
    assert.match(await refusal(nodeA, "::ffff:198.18.0.55"), /IPv4-mapped IPv6 address: write 198\.18\.0\.55$/);
    const unprivileged = await startFixture(hostA, "announcer", linkA, "none");
    try {
      for (const address of ["198.18.0.57", "fd00:198:18::57"])
        assert.match(await refusal(unprivileged, address), /^socket EPERM: Operation not permitted$/);
    } finally {
      await unprivileged.stop();
    }
  });
});
