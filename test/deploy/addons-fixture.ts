// Uses the native addons through the same modules the programs use (netlink, ICMP; start-up pages), from wherever
// its bundle is run, and prints what they did on loopback (nothing leaves the host), and whether the preload
// library is loaded: {"icmp": …, "routeSource": …, "pagesReleased": …, "preloaded": …}.
import { readFileSync } from "node:fs";
import { createLogger } from "../../src/cli/log.ts";
import { releaseStartupPages } from "../../src/agent/memoryrelease.ts";
import { echo } from "../../src/net/icmp.ts";
import { openNetlink } from "../../src/net/netlink.ts";

async function main(): Promise<void> {
  const netlink = openNetlink();
  try {
    const routeSource = await netlink.routeSource("127.0.0.1");
    const icmp = await echo("127.0.0.1", { count: 3, timeoutMs: 1000 });
    const log = createLogger({ verbosity: 0, format: "json", write: (line) => console.error(line) });
    const pagesReleased = releaseStartupPages(log) !== undefined;
    const preloaded = readFileSync("/proc/self/maps", "utf8").includes("/random_readahead.so");
    console.log(JSON.stringify({ icmp, routeSource, pagesReleased, preloaded }));
  } finally {
    netlink.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
