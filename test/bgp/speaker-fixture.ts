// The speaker as a process of its own, for graceful-restart.test.ts to kill: argv[2] is JSON with the session's
// options and routes; each decision's rule is printed as a line.
import { type SessionOptions, startSession } from "../../src/agent/announcer/bgp/session.ts";
import { type Route } from "../../src/agent/announcer/bgp/ribout.ts";

const { options, routes } = JSON.parse(process.argv[2] ?? "{}") as { options: SessionOptions; routes: Route[] };
const session = startSession({ ...options, onDecision: (decision) => console.log(decision.rule) });
session.setRoutes(routes);
setInterval(() => {}, 60_000); // until killed
