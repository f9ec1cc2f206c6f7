// Bun from its pinned optional dependency (`@oven/bun-linux-x64` / `-aarch64`: npm installs the one of this
// machine): tests keep the agent's native code loadable there, benchmarks measure the bundles under it.
import { existsSync } from "node:fs";
import path from "node:path";

export const BUN = path.resolve(
  import.meta.dirname,
  `../node_modules/@oven/bun-linux-${process.arch === "arm64" ? "aarch64" : process.arch}/bin/bun`,
);

/** Why Bun cannot run here (a test's skip reason), or false. */
export const NO_BUN = !existsSync(BUN) && `no Bun for ${process.arch}`;
