// How sessions start (MD5, strangers) against GoBGP (Debian's gobgpd): see peering.ts.
import { describe } from "node:test";
import { peeringSuite } from "./peering.ts";
import { startGobgp } from "./routers.ts";

describe("BGP sessions against GoBGP: MD5, strangers", () => peeringSuite(startGobgp, 243));
