// How sessions start, against each real router (gobgp-peering.test.ts, frr-peering.test.ts): TCP MD5 (RFC 2385) on
// our connection and on the router's connection to our listener, IPv4 and IPv6; a wrong password on either side
// (no session, the SYNs dropped by the kernels, our retries backing off); and a host that is no peer connecting to
// our listener (closed unread). Collisions are fsm.test.ts's (two speakers, every delivery order): a real router
// cannot be made to race us on cue (each stops its own attempts once it has taken our connection).
// Our speaker and listener run in the root namespace, each router in a namespace of its own (routers.ts).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import net from "node:net";
import { after, before, test } from "node:test";
import { waitFor } from "../../localcluster/wait.ts";
import { type Decision } from "../../src/agent/announcer/bgp/fsm.ts";
import { type BgpListener, listenBgp } from "../../src/agent/announcer/bgp/listener.ts";
import { type BgpSession, startSession } from "../../src/agent/announcer/bgp/session.ts";
import { type Family } from "../../src/net/ip.ts";
import { createNetwork, md5Drops, type Network } from "../netns/netns.ts";
import { MY_ASN, ROUTER_ASN, type Router, type RouterOptions, sessionTo } from "./routers.ts";

const PASSWORD = "lccm-peering-test"; // FRR reads one word
const WAIT_MS = 60_000;
/** Rules of a session that took, or considered, a connection the peer opened. */
const INCOMING_RULES = /^(accepted|incoming-|collision-)/;

interface Peer {
  router: Router;
  session: BgpSession;
  decisions: Decision[];
}

interface PeerOptions {
  index: number;
  transport: Family;
  ibgp?: boolean;
  /** The router's key; ours is `ours` (both PASSWORD unless told). */
  password?: string;
  ours?: string;
  /** The router connects to our listener too. */
  active?: boolean;
  /** Where our session connects: the router's port 179 unless told. */
  peerPort?: number;
}

const rootDrops = () => md5Drops(readFileSync("/proc/net/netstat", "utf8"));
const rules = (peer: Peer) => peer.decisions.map((d) => `${d.rule}${d.reason ? ` (${d.reason})` : ""}`).join("; ");

export function peeringSuite(start: (net: Network, options: RouterOptions) => Promise<Router>, subnet: number): void {
  let network: Network;
  let listener: BgpListener;
  const refused: string[] = [];
  const peers: Peer[] = [];

  before(async () => {
    network = await createNetwork();
    listener = await listenBgp({ port: 0, onRefused: (_rule, address) => refused.push(address) });
  });

  after(async () => {
    for (const peer of peers.splice(0)) {
      peer.session.stop();
      await peer.router.stop();
    }
    await listener?.close();
    await network?.remove();
  });

  async function peer(options: PeerOptions): Promise<Peer> {
    const { index, transport, password = PASSWORD, ours = PASSWORD } = options;
    const asn = options.ibgp ? MY_ASN : ROUTER_ASN;
    const router = await start(network, {
      index,
      subnet,
      asn,
      peerAsn: MY_ASN,
      transport,
      password,
      ...(options.active ? { active: { port: listener.port() } } : {}),
    });
    const decisions: Decision[] = [];
    const session = startSession({
      ...sessionTo(router, transport, { peerAsn: asn }),
      ...(options.peerPort ? { peerPort: options.peerPort } : {}),
      password: ours,
      onDecision: (decision) => decisions.push(decision),
    });
    listener.add(router.address[transport], session, ours);
    const added = { router, session, decisions };
    peers.push(added);
    return added;
  }

  async function established(peer: Peer, name: string): Promise<void> {
    const up = () => peer.session.state().phase === "established";
    await waitFor(`${name}: established (${rules(peer)})`, up, WAIT_MS);
    await waitFor(
      `${name}: the router sees the session established`,
      async () => /^established$/i.test(await peer.router.sessionState()),
      WAIT_MS,
    );
  }

  test("MD5: eBGP over IPv4 and iBGP over IPv6 come up signed, and the routers learn our routes", async () => {
    const sessions = [
      { name: "eBGP over IPv4", peer: await peer({ index: 0, transport: 4 }) },
      { name: "iBGP over IPv6", peer: await peer({ index: 1, transport: 6, ibgp: true }) },
    ];
    for (const { name, peer } of sessions) {
      await established(peer, name);
      const route = { prefix: "198.51.100.7/32", nextHop: peer.router.ours[4] };
      peer.session.setRoutes([route]);
      await waitFor(`${name}: the router learns ${route.prefix}`, async () =>
        (await peer.router.routes(4)).has(route.prefix),
      );
    }
  });

  test("MD5: the router's signed connection to our listener carries the session when ours cannot connect", async () => {
    // port 1 of the router refuses ours at once: the session lives on the router's connection alone
    const passive = await peer({ index: 2, transport: 4, active: true, peerPort: 1 });
    await established(passive, "the router's connection");
    assert.equal(passive.session.state().accepted, true, rules(passive));
  });

  test("a wrong password: no session either way, the kernels drop the SYNs, our retries back off", async () => {
    const before = rootDrops();
    const wrong = await peer({ index: 3, transport: 4, active: true, password: "not the password" });
    const routerDrops = async () => md5Drops(await wrong.router.host.exec("cat", ["/proc/net/netstat"]));
    const routerBefore = await routerDrops();
    await waitFor("the router's kernel drops our SYNs", async () => (await routerDrops()) > routerBefore, WAIT_MS);
    await waitFor("our kernel drops the router's SYNs", () => rootDrops() > before, WAIT_MS);
    // unanswered, our connection times out, and the next attempt waits for the backoff
    const timedOut = () => wrong.decisions.some((d) => d.rule === "connect-timeout");
    await waitFor(`a connect timeout (${rules(wrong)})`, timedOut, WAIT_MS);
    const timeout = wrong.decisions.find((d) => d.rule === "connect-timeout")!;
    assert.ok(timeout.actions.some((a) => a.type === "arm" && a.timer === "retry" && a.ms >= 750), rules(wrong));
    assert.ok(!wrong.decisions.some((d) => INCOMING_RULES.test(d.rule)), `no connection reached us: ${rules(wrong)}`);
    assert.ok(!wrong.decisions.some((d) => d.rule === "established"), rules(wrong));
    assert.doesNotMatch(await wrong.router.sessionState(), /^established$/i);
  });

  test("a host that is no peer connecting to our listener is closed unread; no session changes", async () => {
    const counts = peers.map((p) => p.decisions.length);
    const seen = refused.length;
    const received: Buffer[] = [];
    await new Promise<void>((resolve) => {
      const socket = net.connect({ host: "127.0.0.1", port: listener.port() });
      socket.on("connect", () => socket.write(Buffer.alloc(19, 0xff)));
      socket.on("data", (data) => received.push(data));
      socket.on("error", () => {});
      socket.on("close", () => resolve());
    });
    assert.deepEqual(refused.slice(seen), ["127.0.0.1"]);
    assert.equal(Buffer.concat(received).length, 0, "nothing sent to it");
    // the sessions' own keepalives go on; nothing else
    peers.forEach((p, i) =>
      assert.ok(
        p.decisions.slice(counts[i]).every((d) => /^(keepalive|keepalive-sent|connect|connect-timeout)$/.test(d.rule)),
        rules(p),
      ),
    );
  });
}
