// A previous release of the project, from git, for upgrade tests: `git archive` of a commit (the repository is not
// touched: no worktree, no checkout) into a temporary folder, its chart, and its image built by its own
// localcluster/image.ts under a tag of its own, so that both images sit side by side on the nodes.
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { BuiltImage } from "./image.ts";
import { run } from "./exec.ts";

const ROOT = path.resolve(import.meta.dirname, "..");
/** Built here, not in git: the previous commit's image takes them as they are (an addon change shows in `git diff`). */
const NATIVE_BUILDS = ["native/sockets/build", "native/memory/build"];

export interface PreviousRelease {
  commit: string;
  chartDir: string;
  image: BuiltImage;
  remove(): void;
}

/** The chart and image of `commit`, its image tagged `<appVersion>-<short commit>` (its chart's image.tag). */
export async function previousRelease(commit: string): Promise<PreviousRelease> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-previous-"));
  try {
    const archive = path.join(dir, "source.tar");
    await run("git", ["-C", ROOT, "archive", "--format=tar", `--output=${archive}`, commit]);
    const tree = path.join(dir, "tree");
    mkdirSync(tree);
    await run("tar", ["-xf", archive, "-C", tree]);
    symlinkSync(path.join(ROOT, "node_modules"), path.join(tree, "node_modules"));
    for (const build of NATIVE_BUILDS) cpSync(path.join(ROOT, build), path.join(tree, build), { recursive: true });
    // Its chart names its own image: the tag goes into its values.yaml, which its image.ts reads too.
    const values = path.join(tree, "charts/local-ccm/values.yaml");
    const appVersion = /^appVersion: "?([^"\n]+)"?$/m.exec(readFileSync(path.join(tree, "charts/local-ccm/Chart.yaml"),
      "utf8"))?.[1];
    const tag = `${appVersion}-${commit.slice(0, 7)}`;
    const text = readFileSync(values, "utf8");
    const tagged = text.replace(/^(image:\n(?:[ #].*\n)*? {2}tag: ).*$/m, `$1"${tag}"`);
    if (tagged === text) throw new Error(`${commit}: no image.tag in charts/local-ccm/values.yaml`);
    writeFileSync(values, tagged);
    const script = `import { buildImage } from "./localcluster/image.ts";
console.log(JSON.stringify(await buildImage(${JSON.stringify(path.join(dir, "image.tar"))})));`;
    const output = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: tree });
    const image = JSON.parse(output.trim().split("\n").at(-1) as string) as BuiltImage;
    if (!image.reference.endsWith(`:${tag}`)) throw new Error(`${commit}'s image is ${image.reference}, not :${tag}`);
    const remove = () => rmSync(dir, { recursive: true, force: true });
    return { commit, chartDir: path.join(tree, "charts/local-ccm"), image, remove };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
