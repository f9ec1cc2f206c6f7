// The router configurations docs/bgp.md gives are read by the routers themselves: every ```frr block by FRR's bgpd
// (its dry run, -C, which exits 0 even on a bad line, so the errors it prints are what counts) and every ```bird
// block by BIRD 2 (`bird -p`, parse only). Each checker first refuses a broken configuration, so it can fail.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { run } from "../../localcluster/exec.ts";

const PAGE = path.join(import.meta.dirname, "../../docs/bgp.md");

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "router-examples-"));
});
after(() => rm(dir, { recursive: true, force: true }));

async function blocks(language: string): Promise<string[]> {
  const page = await readFile(PAGE, "utf8");
  return [...page.matchAll(new RegExp(`^\`\`\`${language}\\n([\\s\\S]*?)^\`\`\`$`, "gm"))].map((match) => match[1] ?? "");
}

/** What FRR's bgpd says is wrong with `config` (an empty list: nothing). */
async function frrErrors(config: string, name: string): Promise<string[]> {
  const file = path.join(dir, `${name}.conf`);
  await writeFile(file, config);
  const args = ["-C", "-S", "-Z", "-n", "-P", "0", "-f", file, "-i", path.join(dir, `${name}.pid`), "--vty_socket", dir];
  const output = await run("sh", ["-c", '"$0" "$@" 2>&1', "/usr/lib/frr/bgpd", ...args]);
  return output.split("\n").filter((line) => /No such command|Unknown command|\[EC \d+\]|error/i.test(line));
}

/** BIRD's parse of `config`: undefined when it is valid, else its error. */
async function birdError(config: string, name: string): Promise<string | undefined> {
  const file = path.join(dir, `${name}.conf`);
  await writeFile(file, config);
  return run("bird", ["-p", "-c", file]).then(
    () => undefined,
    (err: Error) => err.message,
  );
}

test("FRR reads every FRR configuration of docs/bgp.md without an error", async () => {
  assert.notDeepEqual(await frrErrors("router bgp 64512\n no-such-command 1\n", "broken"), [], "a bad line is seen");
  const configs = await blocks("frr");
  assert.ok(configs.length > 0, "docs/bgp.md has an FRR configuration");
  for (const [index, config] of configs.entries()) assert.deepEqual(await frrErrors(config, `frr-${index}`), []);
});

test("BIRD 2 parses every BIRD configuration of docs/bgp.md", async () => {
  assert.ok(await birdError("protocol bgp x { no-such-option; }\n", "broken"), "a bad line is refused");
  const configs = await blocks("bird");
  assert.ok(configs.length > 0, "docs/bgp.md has a BIRD configuration");
  for (const [index, config] of configs.entries()) assert.equal(await birdError(config, `bird-${index}`), undefined);
});
