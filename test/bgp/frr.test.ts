// Our BGP speaker against FRR (Debian's frr, bgpd): see interop.ts.
import { describe } from "node:test";
import { interopSuite } from "./interop.ts";
import { startFrr } from "./routers.ts";

describe("BGP speaker against FRR", () => interopSuite(startFrr, 241));
