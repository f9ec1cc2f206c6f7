// The speaker alone, for bench/bgp-memory.ts: two sessions to the ports given, 1,000 routes each (500 IPv4, 500
// IPv6); prints {baseline, rss, heapUsed} in bytes once both sessions are up and the tables sent, then idles.
import { startSession } from "../src/agent/announcer/bgp/session.ts";
import { type Route } from "../src/agent/announcer/bgp/ribout.ts";

const ports = process.argv.slice(2).map(Number);
const settle = () => new Promise((resolve) => setTimeout(resolve, 3000));
globalThis.gc?.();
await settle();
const baseline = process.memoryUsage().rss;
const routes: Route[] = [];
for (let i = 0; i < 500; i++) {
  routes.push({ prefix: `198.51.${100 + (i >> 8)}.${i & 255}/32`, nextHop: "127.0.0.1", communities: ["65001:100"] });
  routes.push({ prefix: `2001:db8::${i.toString(16)}/128`, nextHop: "fd00::1", communities: ["65001:100"] });
}
const sessions = ports.map((port, i) =>
  startSession({
    config: { myAsn: 65001, peerAsn: 65010, routerId: `198.18.0.${i + 1}`, holdTime: 90, families: [4, 6] },
    peerAddress: "127.0.0.1",
    peerPort: port,
  }),
);
for (const session of sessions) session.setRoutes(routes);
while (!sessions.every((s) => s.state().phase === "established"))
  await new Promise((resolve) => setTimeout(resolve, 100));
globalThis.gc?.();
await settle();
console.log(JSON.stringify({ baseline, rss: process.memoryUsage().rss, heapUsed: process.memoryUsage().heapUsed }));
for (const session of sessions) session.stop();
