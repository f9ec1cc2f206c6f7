// `npm start` (demo/main.ts) tells the story the README promises, on the real cluster: kubelets
// register tainted on containerd, node-0 the control-plane node, the chart's agent pods initialise their
// nodes, the controller's replicas run on the control-plane node only, the killed autoscaler-tainted worker
// is deleted, the Events are shown, a LoadBalancer Service of our class answers curl from the client host at a
// node's ExternalIP, a Service of the layer-2 class answers at a pool address through its announcer's death, and
// nothing is left on the machine.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { leftoversOf } from "../../localcluster/slots.ts";
import { KUBERNETES_VERSION } from "../../localcluster/versions.ts";

const NODE_NAMES = ["node-0", "node-1", "node-2", "node-3"];
const CONTROL_PLANE = "node-0";
/** The taints a node keeps once initialised: kubeadm's on the control-plane node, none elsewhere. */
const keptTaints = (name: string) => (name === CONTROL_PLANE ? "node-role\\.kubernetes\\.io/control-plane" : "<none>");

/** The demo's output cut at its `== step` headings, each found by a word of its title. */
function section(out: string, title: string): string {
  const found = out.split("\n== ").find((part) => part.startsWith(title) || part.split("\n")[0]?.includes(title));
  assert.ok(found, `a step titled "${title}" in:\n${out}`);
  return found;
}

const row = (text: string, name: string) => text.split("\n").find((line) => line.startsWith(`${name} `)) ?? "";

test("the demo initialises the nodes, deletes the killed one, shows Events, serves a LoadBalancer, leaves nothing", (t) => {
  // Its own TMPDIR: the cluster's folder is found there, apart from other tests' clusters.
  const tmp = mkdtempSync(path.join(os.tmpdir(), "local-ccm-demo-test-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const demo = spawnSync(process.execPath, [path.join(import.meta.dirname, "../../demo/main.ts")], {
    encoding: "utf8",
    timeout: 600_000,
    env: { ...process.env, TMPDIR: tmp },
  });
  const out = demo.stdout;
  assert.equal(demo.status, 0, `${out}\n${demo.stderr}`);

  const registered = section(out, "real kubelets registered");
  for (const name of NODE_NAMES) {
    const wide = row(registered, name);
    const version = KUBERNETES_VERSION.replace(/\./g, "\\.");
    assert.match(wide, new RegExp(`Ready .* ${version} +198\\.19\\.\\d+\\.\\d+ +<none> `), "no ExternalIP yet");
    assert.match(wide, /containerd:\/\/\S+$/);
    const kept = name === CONTROL_PLANE ? `${keptTaints(name)},` : "";
    assert.match(registered, new RegExp(`\n${name} +${kept}node\\.cloudprovider\\.kubernetes\\.io/uninitialized\n`));
  }

  const installed = section(out, "helm install");
  assert.match(installed, /STATUS: deployed/);
  for (const name of NODE_NAMES) {
    assert.match(installed, new RegExp(`\nlocal-ccm-\\w+ +1/1 +Running .* ${name} `), `an agent pod Ready on ${name}`);
    assert.match(installed, new RegExp(`\n${name} +Ready .* 198\\.19\\.\\d+\\.\\d+ +198\\.19\\.\\d+\\.\\d+ `));
    assert.match(installed, new RegExp(`\n${name} +${keptTaints(name)}\n`), `${name} has no uninitialized taint left`);
  }
  assert.match(installed, new RegExp(`replicas run on control-plane node ${CONTROL_PLANE}; worker node-\\d hosts none`));

  const victim = /marks (\S+) for deletion/.exec(out)?.[1] as string;
  assert.ok(NODE_NAMES.includes(victim) && victim !== CONTROL_PLANE, `a worker was killed: ${victim}`);
  const killed = section(out, "cluster-autoscaler marks");
  assert.match(row(killed, victim), /NotReady/);
  const [, afterDeletion = ""] = killed.split("node-lifecycle-controller deleted it");
  assert.equal(row(afterDeletion, victim), "", `${victim} is gone from kubectl get nodes`);
  assert.equal(NODE_NAMES.filter((name) => row(afterDeletion, name) !== "").length, 3, "the others are untouched");

  const events = section(out, "Events");
  for (const name of NODE_NAMES)
    assert.match(events, new RegExp(`\ndefault +${name} +local-ccm +Normal +TaintRemoved `));
  assert.match(
    events,
    new RegExp(`\ndefault +${victim} +node-lifecycle-controller +Normal +DeletingNode +.*unreachable`),
  );

  // The Service's ingress is a node's ExternalIP, as kubectl showed it, and the pod answers curl there.
  const balanced = section(out, "a LoadBalancer Service of class local-ccm.io/node-address");
  const printed = /ingress written [\d.]+s after the Service was created: (\S.*)\n/.exec(balanced);
  const ingress = printed?.[1]?.split(", ") ?? [];
  assert.ok(ingress.length > 0, `the ingress is printed:\n${balanced}`);
  assert.ok(row(balanced, "web").includes(ingress.join(",")), "kubectl get service shows it as EXTERNAL-IP");
  const [, address, node = ""] = /\n {3}(\S+) is (node-\d)'s ExternalIP/.exec(balanced) ?? [];
  assert.equal(address, ingress[0]);
  const ip = String.raw`198\.19\.\d+\.\d+`;
  const externalIP = new RegExp(`\n${node} +Ready .* ${ip} +(${ip}) `).exec(installed)?.[1];
  assert.equal(address, externalIP, `${node}'s ExternalIP in kubectl get nodes -o wide`);
  assert.notEqual(node, victim, "a node that is still there");
  const curl = `\nclient\\$ curl http://${address?.replaceAll(".", "\\.")}/hostname\n`;
  assert.match(balanced, new RegExp(`${curl}web-[a-z0-9]+-[a-z0-9]+\n`), "the pod answers with its name");

  // A pool address of web-l2's own, answered by one worker; that worker killed, another takes it and the pod answers.
  const pooled = section(out, "a pool on the nodes' public network");
  const [, l2Address = "", announcer = ""] = /\nweb-l2 +(198\.19\.\d+\.2(?:4\d|50)) +(node-\d)\n/.exec(pooled) ?? [];
  assert.ok(l2Address, `web-l2's pool address and announcer are printed:\n${pooled}`);
  assert.ok(announcer !== victim && announcer !== CONTROL_PLANE, `announced by a live worker: ${announcer}`);
  const l2Curl = `\nclient\\$ curl http://${l2Address.replaceAll(".", "\\.")}/hostname\n`;
  assert.match(pooled, new RegExp(`${l2Curl}web-[a-z0-9]+-[a-z0-9]+\n`));
  const takeover = section(out, `${announcer}, which announces`);
  const [, successor = ""] = /\n {3}(node-\d) took \S+ over/.exec(takeover) ?? [];
  assert.ok(![announcer, victim, CONTROL_PLANE, ""].includes(successor), `taken over by another worker: ${successor}`);
  assert.match(takeover, new RegExp(`${l2Curl}web-[a-z0-9]+-[a-z0-9]+\n`), "answers again after the power loss");

  const [, slot, dir = ""] = /cluster slot (\d+), state and logs in (\S+)/.exec(out) ?? [];
  assert.ok(dir.startsWith(tmp), `the cluster's folder is in the test's TMPDIR: ${dir}`);
  assert.deepEqual(leftoversOf(Number(slot), dir), [], "no process, mount, netns, cgroup, rule, bridge or folder");
  assert.deepEqual(readdirSync(tmp), []);
});
