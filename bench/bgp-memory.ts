// `node bench/bgp-memory.ts`: the BGP speaker's memory with 2 peers × 1,000 prefixes (the agent's budget is 32 MiB
// RSS in all). The speaker runs in a child process (bgp-memory-fixture.ts); the peers are minimal ones on loopback
// in this process: they answer OPEN and KEEPALIVE and read every UPDATE. Prints the child's RSS before the
// sessions start, after the tables are sent, and the difference.
import { spawn } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { decodeMessage, encodeMessage, splitMessages } from "../src/net/bgp/message.ts";

const MiB = 1024 * 1024;
let updates = 0;
const servers = await Promise.all(
  [65010, 65010].map(async (asn, i) => {
    const server = net.createServer((socket) => {
      socket.on("error", () => {});
      const open = {
        asn,
        holdTime: 90,
        identifier: `198.18.1.${i + 1}`,
        capabilities: { fourOctetAs: true, families: [4, 6] as (4 | 6)[], routeRefresh: true },
      };
      socket.write(Buffer.concat([encodeMessage({ type: "open", open }), encodeMessage({ type: "keepalive" })]));
      let pending = Buffer.alloc(0);
      socket.on("data", (chunk) => {
        const { messages, rest } = splitMessages(Buffer.concat([pending, chunk]));
        pending = Buffer.from(rest);
        for (const message of messages) if ((decodeMessage(message) as { type?: string }).type === "update") updates++;
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return server;
  }),
);
const ports = servers.map((server) => String((server.address() as net.AddressInfo).port));
const child = spawn(
  process.execPath,
  ["--expose-gc", path.join(import.meta.dirname, "bgp-memory-fixture.ts"), ...ports],
  { stdio: ["ignore", "pipe", "inherit"] },
);
let output = "";
child.stdout.on("data", (chunk) => (output += chunk));
await new Promise((resolve) => child.once("exit", resolve));
for (const server of servers) server.close();
const { baseline, rss, heapUsed } = JSON.parse(output);
console.log(
  `speaker, 2 peers × 1,000 prefixes (${updates} UPDATEs received): RSS ${(rss / MiB).toFixed(1)} MiB ` +
    `(${(baseline / MiB).toFixed(1)} MiB before the sessions, +${((rss - baseline) / MiB).toFixed(1)} MiB), heap used ${(heapUsed / MiB).toFixed(1)} MiB`,
);
