// Runs node address detection inside a network namespace (started there by
// detect-client.ts) and prints JSON, so tests can check it against a kernel state they built.
//   detect '<DetectionConfig JSON>'  → one Detection
//   addresses                        → the HostAddress list
//   routes <target>…                 → the route source per target (null: none)
//   gateways                         → the next hops of the default routes
//   lookups <target>…                → { addresses, links, routes: { source } (null: none) or { error: errno } per
//                                      target }
//   watch <debounceMs> <target>      → one snapshot line now and one after each reported change, until stdin closes
import { detectAddresses } from "../../src/agent/detect.ts";
import { NetlinkError, openNetlink } from "../../src/net/netlink.ts";

const [command, ...args] = process.argv.slice(2);
const netlink = openNetlink();
const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value ?? null)}\n`);

switch (command) {
  case "detect":
    print(await detectAddresses(netlink, JSON.parse(args[0] ?? "{}")));
    break;
  case "addresses":
    print(await netlink.listAddresses());
    break;
  case "gateways":
    print(await netlink.listDefaultGateways());
    break;
  case "routes":
    print(await Promise.all(args.map((target) => netlink.routeSource(target))));
    break;
  case "lookups":
    print({
      addresses: await netlink.listAddresses(),
      links: await netlink.listLinks(),
      routes: await Promise.all(
        args.map((target) =>
          netlink.routeSource(target).then(
            (source) => ({ source: source ?? null }),
            (err: unknown) => ({ error: err instanceof NetlinkError ? err.code : String(err) }),
          ),
        ),
      ),
    });
    break;
  case "watch": {
    const [debounceMs = "0", target = ""] = args;
    let changes = 0;
    const snapshot = async (change: number) => {
      const addresses = (await netlink.listAddresses()).map((entry) => entry.address);
      print({ change, addresses, source: (await netlink.routeSource(target)) ?? null });
    };
    netlink.watchChanges(() => void snapshot(++changes), Number(debounceMs));
    await snapshot(0);
    process.stdin.resume();
    process.stdin.on("end", () => netlink.close());
    break;
  }
  default:
    throw new Error(`unknown command ${command}`);
}
if (command !== "watch") netlink.close();
