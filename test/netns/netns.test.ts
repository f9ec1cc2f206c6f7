// The namespace helper removes what it creates: orderly, when the test process exits on an
// error, and (for a process that was SIGKILLed) at the next createNetwork().
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import path from "node:path";
import { test } from "node:test";
import { createNetwork } from "./netns.ts";

const namespaces = () => execFileSync("ip", ["netns", "list"], { encoding: "utf8" });

test("hosts get their own namespace and links carry the addresses asked for; remove() deletes them", async () => {
  const net = await createNetwork();
  try {
    const [a, b] = [await net.host(), await net.host()];
    const link = await net.link(a, b, {
      addressesA: ["198.18.0.1/24"],
      addressesB: ["198.18.0.2/24", "fd00:198:18::2/64"],
    });
    assert.match(
      await b.ip("-o", "address", "show", "dev", link.nameB),
      /198\.18\.0\.2\/24.*\n.*fd00:198:18::2\/64/s,
    );
    assert.match(await a.ip("route", "show"), /^198\.18\.0\.0\/24 dev \S+ proto kernel/m);
    assert.doesNotMatch(await a.ip("route", "show"), /default/);
    assert.match(namespaces(), new RegExp(a.name));
    await net.remove();
    assert.doesNotMatch(namespaces(), new RegExp(`${a.name}|${b.name}`));
  } finally {
    await net.remove();
  }
});

test("a test process that fails leaves no namespace; one that is killed is swept by the next run", async () => {
  const script = (exit: string) =>
    `import { createNetwork } from ${JSON.stringify(path.join(import.meta.dirname, "netns.ts"))};
     const net = await createNetwork(); const h = await net.host(); await net.link("root", h, {});
     console.log(h.name); ${exit}`;
  const failing = spawnSync(
    process.execPath,
    ["--input-type=module", "-e", script("throw new Error('boom')")],
    { encoding: "utf8" },
  );
  assert.notEqual(failing.status, 0);
  const failedName = failing.stdout.trim();
  assert.match(failedName, /^lccm\d+-/);
  assert.doesNotMatch(namespaces(), new RegExp(failedName));

  const killed = spawnSync(
    process.execPath,
    ["--input-type=module", "-e", script("process.kill(process.pid, 'SIGKILL')")],
    { encoding: "utf8" },
  );
  assert.equal(killed.signal, "SIGKILL");
  const killedName = killed.stdout.trim();
  assert.match(namespaces(), new RegExp(killedName), "a SIGKILLed process cannot clean up by itself");
  const net = await createNetwork();
  await net.remove();
  assert.doesNotMatch(namespaces(), new RegExp(killedName));
});
