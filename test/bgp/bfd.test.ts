// BFD single hop (RFC 5880/5881) against FRR's bfdd, and with FRR's bgpd (`neighbor … bfd`): our sessions come Up
// with FRR's over IPv4 and IPv6; a timer change goes through a Poll Sequence without a flap; FRR's bfdd stopped
// (SIGSTOP) is detected within the detection time and takes our BGP session down, which comes back with BFD; our
// speaker stopped makes FRR withdraw our routes within its BFD detection time, long before the hold time; and
// hostile packets from a host on the link (garbage, TTL 64, other discriminators, authentication) change nothing.
// The endpoint needs no privilege (the agent runs without capabilities). Each router has a namespace of its own
// linked to the root namespace, where our side runs.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { waitFor } from "../../localcluster/wait.ts";
import { type BfdConfig, type BfdDecision } from "../../src/agent/announcer/bfd/fsm.ts";
import { type BfdEndpoint, type BfdSession, BFD_PORT, openBfdEndpoint } from "../../src/agent/announcer/bfd/session.ts";
import { type Decision } from "../../src/agent/announcer/bgp/fsm.ts";
import { type BgpSession, startSession } from "../../src/agent/announcer/bgp/session.ts";
import { type ControlPacket, Diag, encodeControl } from "../../src/net/bfd/control.ts";
import { type Family } from "../../src/net/ip.ts";
import { createNetwork, type Network } from "../netns/netns.ts";
import {
  type FrrBfdPeer,
  MY_ASN,
  ROUTER_ASN,
  type Router,
  type RouterOptions,
  sessionTo,
  startFrr,
} from "./routers.ts";
import { startSpeaker } from "./speaker.ts";

const SUBNET = 245;
/** The "≤ 1 s failover" timers: 300 ms × 3. */
const BFD: BfdConfig = { minTx: 300, minRx: 300, multiplier: 3 };
const DETECTION_MS = BFD.minRx * BFD.multiplier;
/** Generous for a loaded 2-core machine, and still far below the BGP hold time (90 s). */
const DETECTED_WITHIN_MS = 5_000;
const WAIT_MS = 60_000;

let net: Network;
let router: Router;
const endpoints: Partial<Record<Family, BfdEndpoint>> = {};
const bfd: Partial<Record<Family, BfdSession>> = {};
const bfdDecisions: Record<Family, BfdDecision[]> = { 4: [], 6: [] };
const bgpDecisions: Decision[] = [];
/** When our sessions last heard the peer, and when a session's detection time last expired (performance.now()). */
const heardAt: Record<Family, number> = { 4: 0, 6: 0 };
const expiredAt: Record<Family, number> = { 4: 0, 6: 0 };
let bgp: BgpSession;

const frrPeer = async (family: Family): Promise<FrrBfdPeer | undefined> =>
  (await router.bfd!.peers()).find((p) => p.peer === router.ours[family]);
/** FRR over IPv4 with BFD; the hold time long enough that only BFD can explain a fast withdrawal. */
const frrOptions = (index: number): RouterOptions => ({
  index,
  subnet: SUBNET,
  asn: ROUTER_ASN,
  peerAsn: MY_ASN,
  transport: 4,
  holdTime: 90,
  bfd: BFD,
});
const rules = (decisions: { rule: string }[]) => decisions.map((d) => d.rule);

before(async () => {
  net = await createNetwork();
  router = await startFrr(net, frrOptions(0));
  bgp = startSession({
    ...sessionTo(router, 4, { holdTime: 90 }),
    onDecision: (decision) => bgpDecisions.push(decision),
  });
  bgp.setRoutes([{ prefix: "198.51.100.7/32", nextHop: router.ours[4] }]);
  for (const family of [4, 6] as const) {
    endpoints[family] = openBfdEndpoint(router.ours[family]);
    bfd[family] = endpoints[family].session({
      peerAddress: router.address[family],
      config: BFD,
      // the BGP session runs over IPv4: its BFD is the IPv4 one
      ...(family === 4 ? { client: bgp } : {}),
      onDecision: (decision, event) => {
        bfdDecisions[family].push(decision);
        if (event.type === "received") heardAt[family] = performance.now();
        if (decision.rule === "detection-time-expired") expiredAt[family] = performance.now();
      },
    });
  }
});

after(async () => {
  bgp?.stop();
  for (const endpoint of Object.values(endpoints)) endpoint.close();
  await router?.stop();
  await net?.remove();
});

test("our sessions come Up with FRR's bfdd, IPv4 and IPv6, with the configured timers on both sides", async () => {
  for (const family of [4, 6] as const) {
    await waitFor(
      `IPv${family} BFD Up on our side (${JSON.stringify(rules(bfdDecisions[family]))})`,
      () => bfd[family]!.state().state === "up" && !bfd[family]!.state().polling,
      WAIT_MS,
    );
    await waitFor(
      `IPv${family} BFD up with our timers on FRR's side`,
      async () => {
        const peer = await frrPeer(family);
        return peer?.status === "up" && peer["remote-transmit-interval"] === BFD.minTx ? peer : undefined;
      },
      WAIT_MS,
    );
    const peer = (await frrPeer(family))!;
    const ours = bfd[family]!.state();
    assert.equal(peer.local, router.address[family]);
    assert.equal(peer["remote-id"], ours.localDiscriminator);
    assert.equal(peer.id, ours.remoteDiscriminator);
    assert.equal(peer["remote-receive-interval"], BFD.minRx);
    assert.equal(peer["remote-detect-multiplier"], BFD.multiplier);
    assert.equal(ours.remoteMinTx, 300_000);
    assert.equal(ours.remoteMinRx, 300_000);
  }
});

test("FRR's bgpd has our BGP session with BFD up and our route", async () => {
  await waitFor("BGP established", () => bgp.state().phase === "established", WAIT_MS);
  await waitFor(
    "FRR's neighbor shows BFD up",
    async () => {
      return (await router.sessionState()) === "Established" && (await router.bfd!.bgpStatus()) === "Up";
    },
    WAIT_MS,
  );
  await waitFor("FRR has our route", async () => (await router.routes(4)).has("198.51.100.7/32"), WAIT_MS);
});

test("a timer change goes through a Poll Sequence: FRR sees the new interval, neither side goes down", async () => {
  const before = { ours: bfdDecisions[4].length, frrUptime: (await frrPeer(4))!.uptime ?? 0 };
  bfd[4]!.configure({ ...BFD, minTx: 200 });
  await waitFor(
    "FRR sees our 200 ms",
    async () => (await frrPeer(4))?.["remote-transmit-interval"] === 200,
    WAIT_MS,
  );
  await waitFor("our Poll Sequence ended", () => !bfd[4]!.state().polling, WAIT_MS);
  bfd[4]!.configure(BFD);
  await waitFor(
    "FRR sees our 300 ms again",
    async () => (await frrPeer(4))?.["remote-transmit-interval"] === 300,
    WAIT_MS,
  );
  const since = bfdDecisions[4].slice(before.ours);
  assert.ok(since.some((d) => d.rule === "poll"));
  assert.ok(
    since.every((d) => d.state.state === "up"),
    JSON.stringify(rules(since)),
  );
  const peer = (await frrPeer(4))!;
  assert.equal(peer.status, "up");
  assert.ok((peer.uptime ?? 0) >= before.frrUptime, `FRR's session uptime went from ${before.frrUptime} to ${peer.uptime}`);
  assert.equal(bgp.state().phase, "established");
});

test("FRR's bfdd stopped: we detect it within the detection time, BGP goes down at once, and both come back", async (t) => {
  const from = { bfd: bfdDecisions[4].length, bgp: bgpDecisions.length };
  const stoppedAt = Date.now();
  router.bfd!.pause();
  try {
    await waitFor("our IPv4 BFD Down", () => bfd[4]!.state().state === "down", WAIT_MS);
    const detectedIn = Date.now() - stoppedAt;
    t.diagnostic(`detected ${detectedIn} ms after the stop`);
    const down = bfdDecisions[4].slice(from.bfd).find((d) => d.state.state === "down")!;
    assert.equal(down.rule, "detection-time-expired");
    assert.equal(down.state.diag, Diag.DETECTION_TIME_EXPIRED);
    const silence = expiredAt[4] - heardAt[4];
    assert.ok(silence >= DETECTION_MS - 2, `down after ${silence.toFixed(0)} ms of silence: before the detection time`);
    assert.ok(detectedIn <= DETECTED_WITHIN_MS, `detected in ${detectedIn} ms (detection time ${DETECTION_MS} ms)`);
    await waitFor("BGP torn down", () => bgp.state().phase !== "established", 1_000);
    assert.ok(rules(bgpDecisions.slice(from.bgp)).includes("bfd-down"));
  } finally {
    router.bfd!.resume();
  }
  await waitFor("BFD Up again", () => bfd[4]!.state().state === "up", WAIT_MS);
  await waitFor("BGP established again", () => bgp.state().phase === "established", WAIT_MS);
  await waitFor("FRR has our route again", async () => (await router.routes(4)).has("198.51.100.7/32"), WAIT_MS);
});

/** Sends datagrams to our BFD port from the router's namespace (a host on the link), with a chosen TTL. */
async function sendFromLink(family: Family, packets: Buffer[], ttl: number): Promise<void> {
  const script = `
    const dgram = require("node:dgram");
    const [type, from, to, port, ttl, ...packets] = process.argv.slice(1);
    const socket = dgram.createSocket(type);
    socket.bind(0, from, () => {
      socket.setTTL(Number(ttl));
      let left = packets.length;
      for (const hex of packets) socket.send(Buffer.from(hex, "hex"), Number(port), to, () => --left || socket.close());
    });`;
  await router.host.exec(process.execPath, [
    "-e",
    script,
    family === 4 ? "udp4" : "udp6",
    router.address[family],
    router.ours[family],
    String(BFD_PORT),
    String(ttl),
    ...packets.map((p) => p.toString("hex")),
  ]);
}

test("hostile packets from the link are dropped and the sessions stay Up", async () => {
  for (const family of [4, 6] as const) {
    await waitFor(`IPv${family} Up`, () => bfd[family]!.state().state === "up", WAIT_MS);
    const from = bfdDecisions[family].length;
    const dropped = new Map(endpoints[family]!.dropped());
    const ours = bfd[family]!.state();
    // what FRR would send to take the session down: only the TTL keeps it out
    const down: ControlPacket = {
      diag: Diag.ADMINISTRATIVELY_DOWN,
      state: "admin-down",
      poll: false,
      final: false,
      cpi: false,
      demand: false,
      detectMult: 3,
      myDiscriminator: ours.remoteDiscriminator,
      yourDiscriminator: ours.localDiscriminator,
      desiredMinTx: 1_000_000,
      requiredMinRx: 1_000_000,
      requiredMinEchoRx: 0,
    };
    const garbage = Array.from({ length: 200 }, (_, i) =>
      Buffer.from(Array.from({ length: 1 + ((i * 37) % 80) }, (_, j) => (i * 131 + j * 7919) % 256)),
    );
    // with a simple-password section (RFC 5880 §4.2): we have none configured
    const authenticated = Buffer.concat([encodeControl(down), Buffer.from([1, 4, 1, 0x61])]);
    authenticated[1]! |= 0x04;
    authenticated[3] = authenticated.length;
    await sendFromLink(family, [encodeControl(down), encodeControl({ ...down, state: "down" })], 64);
    await sendFromLink(family, [...garbage, authenticated], 255);
    await sendFromLink(family, [encodeControl({ ...down, yourDiscriminator: ours.localDiscriminator ^ 0x5a5a })], 255);
    const count = (rule: string) => (endpoints[family]!.dropped().get(rule) ?? 0) - (dropped.get(rule) ?? 0);
    await waitFor(
      `IPv${family}: the wrong discriminator and the authenticated packet dropped (${JSON.stringify([...endpoints[family]!.dropped()])})`,
      () => count("unknown-session") >= 1 && count("authentication") >= 1,
      WAIT_MS,
    );
    const total = [...endpoints[family]!.dropped().values()].reduce((a, b) => a + b, 0);
    const before = [...dropped.values()].reduce((a, b) => a + b, 0);
    assert.ok(total - before >= 100, `${total - before} of the garbage datagrams counted as dropped`);
    // a few of FRR's packets later, still Up: the TTL-64 AdminDown never reached the session
    const seen = bfdDecisions[family].length;
    await waitFor(`IPv${family}: FRR's packets keep arriving`, () => bfdDecisions[family].length >= seen + 5, WAIT_MS);
    const since = bfdDecisions[family].slice(from);
    assert.ok(
      since.every((d) => d.state.state === "up"),
      `IPv${family} left Up: ${JSON.stringify(rules(since))}`,
    );
    // and the same packet with TTL 255 does take it down: the TTL was what kept it out
    await sendFromLink(family, [encodeControl(down)], 255);
    await waitFor(
      `IPv${family}: the TTL-255 AdminDown takes the session down`,
      () => bfdDecisions[family].slice(from).some((d) => d.rule === "peer-admin-down"),
      WAIT_MS,
    );
    await waitFor(`IPv${family}: Up again with FRR`, () => bfd[family]!.state().state === "up", WAIT_MS);
  }
});

test("our speaker stopped: FRR withdraws our routes within its BFD detection time, far below the hold time", async (t) => {
  const other = await startFrr(net, frrOptions(1));
  const speaker = startSpeaker({
    options: sessionTo(other, 4, { holdTime: 90, families: [4] }),
    routes: [{ prefix: "198.51.100.9/32", nextHop: other.ours[4] }],
    bfd: BFD,
  });
  try {
    await waitFor(
      "FRR has our route, its bgpd has heard BFD is up",
      async () =>
        (await other.routes(4)).has("198.51.100.9/32") &&
        (await other.bfd!.bgpStatus()) === "Up",
      WAIT_MS,
    );
    const stoppedAt = Date.now();
    speaker.child.kill("SIGSTOP");
    await waitFor("FRR withdrew our route", async () => !(await other.routes(4)).has("198.51.100.9/32"), WAIT_MS);
    const withdrawnIn = Date.now() - stoppedAt;
    t.diagnostic(`withdrawn ${withdrawnIn} ms after the stop`);
    assert.ok(withdrawnIn <= DETECTED_WITHIN_MS, `withdrawn ${withdrawnIn} ms after the stop (hold time 90 s)`);
  } finally {
    speaker.child.kill("SIGKILL");
    await other.stop();
  }
});

test("BFD needs no privilege: the endpoint opens as the chart's agent runs with bgp.enabled alone (uid 65532, no capabilities)", async () => {
  const session = new URL("../../src/agent/announcer/bfd/session.ts", import.meta.url).href;
  const script =
    `const { openBfdEndpoint } = await import(${JSON.stringify(session)});` +
    `openBfdEndpoint("127.0.0.1").close(); console.log("opened as", process.getuid());`;
  const unprivileged = ["--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"];
  const { stdout } = await promisify(execFile)("setpriv", [
    ...unprivileged,
    "--",
    process.execPath,
    "--input-type=module",
    "-e",
    script,
  ]);
  assert.equal(stdout.trim(), "opened as 65532");
});
