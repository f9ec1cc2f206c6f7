// Uses the native sockets addon through the same modules the programs use (netlink, ICMP), from wherever
// its bundle is run, and prints what they did on loopback (nothing leaves the host): {"icmp": …, "routeSource": …}.
import { echo } from "../../src/net/icmp.ts";
import { openNetlink } from "../../src/net/netlink.ts";

async function main(): Promise<void> {
  const netlink = openNetlink();
  try {
    const routeSource = await netlink.routeSource("127.0.0.1");
    const icmp = await echo("127.0.0.1", { count: 3, timeoutMs: 1000 });
    console.log(JSON.stringify({ icmp, routeSource }));
  } finally {
    netlink.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
