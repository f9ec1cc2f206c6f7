// The speaker as a process of its own, for graceful-restart.test.ts and bfd.test.ts to kill or stop: argv[2] is JSON
// with the session's options and routes, and optionally BFD to the peer; each decision's rule is printed as a line.
import { type BfdConfig } from "../../src/agent/announcer/bfd/fsm.ts";
import { openBfdEndpoint } from "../../src/agent/announcer/bfd/session.ts";
import { type SessionOptions, startSession } from "../../src/agent/announcer/bgp/session.ts";
import { type Route } from "../../src/agent/announcer/bgp/ribout.ts";

const { options, routes, bfd } = JSON.parse(process.argv[2] ?? "{}") as {
  options: SessionOptions;
  routes: Route[];
  bfd?: BfdConfig;
};
const session = startSession({ ...options, onDecision: (decision) => console.log(decision.rule) });
session.setRoutes(routes);
if (bfd)
  openBfdEndpoint(options.localAddress!).session({
    peerAddress: options.peerAddress,
    config: bfd,
    client: session,
    onDecision: (decision) => console.log(`bfd ${decision.rule}`),
  });
setInterval(() => {}, 60_000); // until killed
