// How sessions start (MD5, strangers) against FRR (Debian's frr, bgpd): see peering.ts.
import { describe } from "node:test";
import { peeringSuite } from "./peering.ts";
import { startFrr } from "./routers.ts";

describe("BGP sessions against FRR: MD5, strangers", () => peeringSuite(startFrr, 244));
