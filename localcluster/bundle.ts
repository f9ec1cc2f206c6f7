// Bundles an entry point into one CommonJS file with esbuild: what the container image runs, and
// what the benchmarks measure. Two measured reasons for this shape (Node 24, this machine):
// - running .ts directly costs ~20 MiB of RSS for Node's type stripping;
// - an ESM `import` of node:http builds the module namespace, which evaluates its lazy getters
//   and loads undici (+13 MiB); `require` does not.
// Native addons stay external: they are loaded from node_modules next to the bundle.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { build, type Plugin } from "esbuild";

export const EXTERNAL = ["local-ccm-memory", "local-ccm-sockets"];

const ROOT = path.resolve(import.meta.dirname, "..");

/**
 * Parts a program loads with import() only when a flag turns them on, each bundled apart into a file beside the
 * program's (the agent's BGP speaker, --bgp-speaker): an agent without it neither loads nor maps that code.
 */
export const LAZY_PARTS: Record<string, { module: string; file: string }[]> = {
  "local-ccm": [{ module: "src/agent/announcer/bgp/definition.ts", file: "local-ccm-bgp.cjs" }],
};

/** Resolves each lazy part's import to its own bundle, required at run time from beside the program's. */
function lazyParts(parts: readonly { module: string; file: string }[]): Plugin {
  return {
    name: "lazy-parts",
    setup(builder) {
      builder.onResolve({ filter: /\.ts$/ }, (args) => {
        const part = parts.find(({ module }) => path.resolve(args.resolveDir, args.path) === path.join(ROOT, module));
        return part && { path: `./${part.file}`, external: true };
      });
    },
  };
}

export async function bundle(
  entry: string,
  outfile: string,
  lazy: readonly { module: string; file: string }[] = [],
): Promise<void> {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node24",
    external: EXTERNAL,
    plugins: [lazyParts(lazy)],
    // import() of a lazy part as require(): the part is CommonJS like the rest, no ESM loader (see above).
    supported: { "dynamic-import": false },
    legalComments: "none",
    logLevel: "warning",
    // The bundle's file comments name paths relative to this: its bytes (and the image digest) must not depend
    // on the caller's working directory.
    absWorkingDir: ROOT,
    // CommonJS has no import.meta: give modules that resolve files next to themselves
    // (createRequire(import.meta.url), e.g. the sockets addon) the bundle's own URL.
    define: { "import.meta.url": "__import_meta_url", LOCAL_CCM_REVISION: JSON.stringify(revision()) },
    banner: { js: 'var __import_meta_url = require("node:url").pathToFileURL(__filename).href;' },
  });
}

/**
 * The commit the bundle is built from (src/cli/version.ts): $LOCAL_CCM_REVISION (the Dockerfile's build
 * argument, where no .git is copied in), else the checkout's HEAD, else "unknown". Never the time or the host,
 * so one checkout bundles to the same bytes.
 */
function revision(): string {
  if (process.env.LOCAL_CCM_REVISION) return process.env.LOCAL_CCM_REVISION;
  try {
    const root = path.resolve(import.meta.dirname, "..");
    return execFileSync("git", ["rev-parse", "HEAD"], { cwd: root, encoding: "utf8", stdio: "pipe" }).trim();
  } catch {
    return "unknown";
  }
}

/**
 * Bundles a program's entry point (src/bin/<program>.ts) into `dir`/<program>.cjs, each of its lazy parts into its
 * own file beside it, and returns the program's path.
 */
export async function bundleProgram(program: string, dir: string): Promise<string> {
  const outfile = path.join(dir, `${program}.cjs`);
  const lazy = LAZY_PARTS[program] ?? [];
  await bundle(path.join(import.meta.dirname, "../src/bin", `${program}.ts`), outfile, lazy);
  for (const { module, file } of lazy) await bundle(path.join(ROOT, module), path.join(dir, file));
  return outfile;
}
