// A hostile BGP peer: it completes the handshake and then writes malformed bytes over TCP. Our speaker answers each
// with the NOTIFICATION that names the fault, closes, and connects again only after its backoff; it never throws
// and its event loop never stalls; a second connection from its address cannot reset the session. The peer is a TCP
// server on loopback in this process (nothing leaves the machine).
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { waitFor } from "../../localcluster/wait.ts";
import { type Decision } from "../../src/agent/announcer/bgp/fsm.ts";
import { listenBgp } from "../../src/agent/announcer/bgp/listener.ts";
import { startSession } from "../../src/agent/announcer/bgp/session.ts";
import { notificationName } from "../../src/net/bgp/errors.ts";
import { decodeMessage, encodeMessage, splitMessages } from "../../src/net/bgp/message.ts";

interface Connection {
  at: number;
  received: Buffer[];
  closed: boolean;
}

let server: net.Server;
let connections: Connection[] = [];
let malformed: Buffer = Buffer.alloc(0);

const OPEN = encodeMessage({
  type: "open",
  open: {
    asn: 65010,
    holdTime: 90,
    identifier: "198.18.0.2",
    capabilities: { fourOctetAs: true, families: [4, 6], routeRefresh: true },
  },
});
const KEEPALIVE = encodeMessage({ type: "keepalive" });

/** Our session to the peer (the server on loopback), its decisions kept in `decisions`. */
const startSessionToPeer = (decisions: Decision[]) =>
  startSession({
    config: { myAsn: 65001, peerAsn: 65010, routerId: "198.18.0.1", holdTime: 90, families: [4, 6] },
    peerAddress: "127.0.0.1",
    peerPort: (server.address() as net.AddressInfo).port,
    onDecision: (decision) => decisions.push(decision),
  });
const header = (length: number, type: number) => {
  const bytes = Buffer.alloc(19, 0xff);
  bytes.writeUInt16BE(length, 16);
  bytes[18] = type;
  return bytes;
};

before(async () => {
  server = net.createServer((socket) => {
    const connection: Connection = { at: Date.now(), received: [], closed: false };
    connections.push(connection);
    socket.on("data", (chunk) => connection.received.push(chunk));
    socket.on("error", () => {});
    socket.on("close", () => (connection.closed = true));
    socket.write(Buffer.concat([OPEN, KEEPALIVE]));
    // after our KEEPALIVE has arrived (we are established), the malformed bytes
    const timer = setInterval(() => {
      const ours = splitMessages(Buffer.concat(connection.received)).messages.map(decodeMessage);
      if (ours.some((m) => "type" in m && m.type === "keepalive")) {
        clearInterval(timer);
        socket.write(malformed);
      }
    }, 10);
    socket.on("close", () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
});

after(() => server.close());

const cases: [string, () => Buffer, string][] = [
  [
    "an oversized message (length 5000)",
    () => Buffer.concat([header(5000, 2), Buffer.alloc(100)]),
    "message-header/bad-message-length",
  ],
  [
    "a broken marker",
    () => Buffer.concat([Buffer.alloc(16), KEEPALIVE.subarray(16)]),
    "message-header/connection-not-synchronized",
  ],
  [
    "an UPDATE whose attribute length overruns it",
    () => Buffer.concat([header(27, 2), Buffer.from("0000 00ff 40010100".replaceAll(" ", ""), "hex")]),
    "update/malformed-attribute-list",
  ],
  ["a message type 9", () => header(19, 9), "message-header/bad-message-type"],
  [
    "64 KiB of noise",
    () => Buffer.from(Array.from({ length: 65536 }, (_, i) => (i * 7919) % 251)),
    "message-header/connection-not-synchronized",
  ],
];

for (const [name, bytes, expected] of cases) {
  test(`${name}: NOTIFICATION ${expected}, close, a backoff, no crash, no stall`, async () => {
    connections = [];
    malformed = bytes();
    const decisions: Decision[] = [];
    let worstLag = 0;
    let last = performance.now();
    const lag = setInterval(() => {
      const now = performance.now();
      worstLag = Math.max(worstLag, now - last - 20);
      last = now;
    }, 20);
    const session = startSessionToPeer(decisions);
    try {
      session.setRoutes([{ prefix: "198.51.100.7/32", nextHop: "198.18.0.1" }]);
      await waitFor("the first connection closed by us", () => connections[0]?.closed, 20_000);
      const ours = splitMessages(Buffer.concat(connections[0]!.received)).messages.map(decodeMessage);
      const notification = ours.find((m) => "type" in m && m.type === "notification");
      assert.ok(
        notification && "type" in notification && notification.type === "notification",
        `a NOTIFICATION among ${JSON.stringify(ours.map((m) => ("type" in m ? m.type : m.reason)))}`,
      );
      assert.equal(notificationName(notification.notification), expected);
      assert.ok(
        decisions.some((d) => d.rule === "message-refused"),
        JSON.stringify(decisions.map((d) => d.rule)),
      );
      await waitFor("a second connection after the backoff", () => connections[1], 20_000);
      assert.ok(
        connections[1]!.at - connections[0]!.at >= 700,
        `backoff: ${connections[1]!.at - connections[0]!.at} ms`,
      );
      assert.ok(worstLag < 500, `the event loop stalled ${worstLag.toFixed(0)} ms`);
    } finally {
      session.stop();
      clearInterval(lag);
    }
  });
}

test("a second connection from the peer's address to our listener cannot reset an established session", async () => {
  connections = [];
  malformed = Buffer.alloc(0); // a well-behaved peer this time
  const decisions: Decision[] = [];
  const listener = await listenBgp({ host: "127.0.0.1", port: 0 });
  const session = startSessionToPeer(decisions);
  listener.add("127.0.0.1", session);
  try {
    await waitFor("established", () => session.state().phase === "established", 20_000);
    const received: Buffer[] = [];
    await new Promise<void>((resolve) => {
      const racer = net.connect({ host: "127.0.0.1", port: listener.port() });
      racer.on("data", (data) => received.push(data));
      racer.on("error", () => {});
      racer.on("close", () => resolve());
    });
    const answer = splitMessages(Buffer.concat(received)).messages.map(decodeMessage);
    assert.deepEqual(
      answer.map((m) => ("type" in m && m.type === "notification" ? notificationName(m.notification) : m)),
      ["cease/connection-collision-resolution"],
    );
    assert.equal(session.state().phase, "established");
    assert.deepEqual(
      decisions.filter((d) => d.rule === "established" || d.rule.startsWith("collision")).map((d) => d.rule),
      ["established", "collision-established"],
    );
    assert.equal(connections.length, 1, "our connection to the peer stayed");
    assert.equal(connections[0]!.closed, false);
  } finally {
    session.stop();
    await listener.close();
  }
});
