// `npm run build`: one bundled file per program in dist/, what the package's `bin` and the
// container image run.
import path from "node:path";
import { bundleProgram } from "../localcluster/bundle.ts";

export const PROGRAMS = ["local-ccm", "node-lifecycle-controller"] as const;

const root = path.resolve(import.meta.dirname, "..");
for (const program of PROGRAMS) {
  await bundleProgram(program, path.join(root, "dist"));
  console.log(`dist/${program}.cjs`);
}
