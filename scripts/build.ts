// `npm run build`: one bundled file per program in dist/, what the package's `bin` and the
// container image run.
import path from "node:path";
import { bundle } from "./bundle.ts";

export const PROGRAMS = ["local-ccm", "node-lifecycle-controller"] as const;

const root = path.resolve(import.meta.dirname, "..");
for (const program of PROGRAMS) {
  await bundle(path.join(root, "src/bin", `${program}.ts`), path.join(root, "dist", `${program}.cjs`));
  console.log(`dist/${program}.cjs`);
}
