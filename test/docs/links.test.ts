// Every relative link in the docs (README.md, docs/*.md, the chart's README) resolves: the file or folder exists
// in the repository, and a #fragment names a heading of the page it points to, slugged as GitHub slugs headings.
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { docsFiles, ROOT } from "../../scripts/docs-tables.ts";

/** Markdown outside fenced code blocks and inline code, where links and headings are what they look like. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```$/gm, "").replace(/`[^`\n]*`/g, "code");
}

/** GitHub's heading anchor: the heading's text lower-cased, punctuation dropped, each space a hyphen. */
export function slug(heading: string): string {
  const text = heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/[`*]/g, "")
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, "").replace(/ /g, "-");
}

/** The anchors of a Markdown page: its headings' slugs, a repeated one numbered as GitHub numbers it. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  const stripped = markdown.replace(/^```[\s\S]*?^```$/gm, "");
  for (const [, heading] of stripped.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(heading as string);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    out.add(count ? `${base}-${count}` : base);
  }
  return out;
}

test("GitHub's slugs: code, punctuation and links dropped, spaces hyphenated, repeats numbered", () => {
  assert.equal(slug("Address pools (layer 2)"), "address-pools-layer-2");
  assert.equal(slug("`local-ccm.io/*` annotations and labels"), "local-ccmio-annotations-and-labels");
  assert.equal(slug("Compared with a full cloud-controller-manager"), "compared-with-a-full-cloud-controller-manager");
  assert.equal(slug("Install, upgrade, uninstall"), "install-upgrade-uninstall");
  assert.deepEqual([...anchors("# A\n## A\n```\n# not a heading\n```\n## A\n")], ["a", "a-1", "a-2"]);
});

test("every relative link and #anchor in the docs resolves", () => {
  const broken: string[] = [];
  let checked = 0;
  for (const file of docsFiles()) {
    const text = readFileSync(path.join(ROOT, file), "utf8");
    for (const [, target] of prose(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target as string)) continue; // https:, mailto: …: not ours to check here
      checked++;
      const [pathPart, fragment] = (target as string).split("#", 2) as [string, string | undefined];
      const resolved = pathPart ? path.resolve(path.dirname(path.join(ROOT, file)), decodeURIComponent(pathPart)) : path.join(ROOT, file);
      if (!resolved.startsWith(ROOT + path.sep) || !existsSync(resolved)) {
        broken.push(`${file}: ${target}: no such file`);
        continue;
      }
      if (fragment === undefined) continue;
      if (!statSync(resolved).isFile() || !resolved.endsWith(".md")) {
        broken.push(`${file}: ${target}: an anchor into a file that is not Markdown`);
        continue;
      }
      if (!anchors(readFileSync(resolved, "utf8")).has(fragment))
        broken.push(`${file}: ${target}: no heading with that anchor in ${path.relative(ROOT, resolved)}`);
    }
  }
  assert.ok(checked > 50, `links checked: ${checked}`);
  assert.deepEqual(broken, []);
});
