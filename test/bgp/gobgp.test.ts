// Our BGP speaker against GoBGP (Debian's gobgpd): see interop.ts.
import { describe } from "node:test";
import { interopSuite } from "./interop.ts";
import { startGobgp } from "./routers.ts";

describe("BGP speaker against GoBGP", () => interopSuite(startGobgp, 240));
