// Three replicas of the node-lifecycle-controller with leader election on a real Lease, under the
// shipped RBAC: only the leader probes and deletes; when it is killed, another takes over; when it is stopped
// (SIGTERM, as kubelet stops a pod on a rollout or uninstall), it releases the Lease and another takes over at once.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { Resource } from "../../src/kube/resource.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { ControllerProcess, controllerFlags, nodeObject, SERVICE_ACCOUNT, startWorld, type World } from "./world.ts";

const LEASE = "node-lifecycle-controller";

let world: World;
const leaseResource = () =>
  new Resource<Lease>(world.plane.admin, {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    namespace: SERVICE_ACCOUNT.namespace,
  });
const replicas: ControllerProcess[] = [];
before(async () => {
  world = await startWorld({ subnet: 251 });
});
after(async () => {
  for (const replica of replicas) replica.child.kill("SIGKILL");
  await world?.stop();
});

test("three replicas: exactly one leads, probes and deletes; kill it and another takes over", async () => {
  const leases = leaseResource();
  const dead = await world.deadAddress();
  const expired = new Date(Date.now() - 60_000);
  const healthy = ["a", "b", "c"].map((n) =>
    nodeObject(`healthy-${n}`, { address: "198.18.200.1", ready: "True", tainted: false }),
  );
  for (const node of [...healthy, nodeObject("first-node", { address: dead, since: expired })])
    await world.nodes.create(node);

  for (const name of ["replica-a", "replica-b", "replica-c"]) {
    const args = controllerFlags(
      world,
      { notReadyTimeout: "10s", reconcileInterval: "1s" },
      `--leader-elect-resource-name=${LEASE}`,
      `--leader-elect-resource-namespace=${SERVICE_ACCOUNT.namespace}`,
    );
    replicas.push(new ControllerProcess(world, args, { env: { POD_NAME: name } }));
  }
  const deletedBy = (node: string) => replicas.filter((r) => r.find("deleted node", { node }).length > 0);
  await waitFor("first-node to be deleted", () => deletedBy("first-node").length > 0, 30_000);
  const leaders = replicas.filter((r) => r.find("started leading").length > 0);
  assert.equal(leaders.length, 1, "one leader");
  const leader = leaders[0] as ControllerProcess;
  assert.deepEqual(deletedBy("first-node"), [leader]);
  const holder = (await leases.get(LEASE)).spec?.holderIdentity ?? "";
  assert.equal(holder, leader.find("started leading")[0]?.identity);
  const followers = replicas.filter((r) => r !== leader);
  for (const follower of followers) {
    assert.deepEqual(follower.find("probing"), [], "followers never probe");
    await follower.waitForLog("caches synced"); // and keep their cache warm for a takeover
  }
  const gauge = async (replica: ControllerProcess) => {
    const serving = await replica.waitForLog("serving /healthz, /readyz and /metrics");
    const text = await (await fetch(`http://${serving.address}/metrics`)).text();
    return /^node_lifecycle_controller_leader (\d)$/m.exec(text)?.[1];
  };
  assert.deepEqual(await Promise.all(replicas.map(gauge)), replicas.map((r) => (r === leader ? "1" : "0")));

  leader.child.kill("SIGKILL");
  await leader.exited;
  await world.nodes.create(nodeObject("second-node", { address: dead, since: expired }));
  await waitFor("second-node to be deleted", () => deletedBy("second-node").length > 0, 30_000);
  const [successor] = deletedBy("second-node");
  assert.ok(successor && followers.includes(successor), "deleted by a follower that took over");
  assert.equal(successor.find("started leading").length, 1);
  assert.equal(
    followers.filter((r) => r.find("started leading").length > 0).length,
    1,
    "one leader at a time",
  );
  const lease = await leases.get(LEASE);
  assert.equal(lease.spec?.holderIdentity, successor.find("started leading")[0]?.identity);
  assert.equal(lease.spec?.leaseTransitions, 1);
  assert.equal(
    replicas.reduce((sum, r) => sum + r.find("deleted node").length, 0),
    2,
    "each node deleted once",
  );

  // A graceful stop releases the lease at once.
  for (const replica of followers) assert.equal(await replica.stop(), 0);
  assert.equal((await leases.get(LEASE)).spec?.holderIdentity, "");
});

test("a SIGTERM'd leader releases its Lease: the other replica takes over at once, not after the lease duration", async () => {
  const leases = leaseResource();
  // A lease no follower could wait out within the bound below: only a release explains a takeover in time.
  const LEASE_DURATION_S = 120;
  const pair = ["replica-x", "replica-y"].map((name) => {
    const args = controllerFlags(
      world,
      { notReadyTimeout: "10m", reconcileInterval: "1s" },
      `--leader-elect-resource-name=${LEASE}`,
      `--leader-elect-resource-namespace=${SERVICE_ACCOUNT.namespace}`,
      `--leader-elect-lease-duration=${LEASE_DURATION_S}s`,
      "--leader-elect-renew-deadline=60s",
      "--leader-elect-retry-period=500ms",
    );
    const replica = new ControllerProcess(world, args, { env: { POD_NAME: name } });
    replicas.push(replica);
    return replica;
  });
  const leading = () => pair.filter((r) => r.find("started leading").length > 0);
  await waitFor("one of the pair to lead", () => leading().length === 1, 60_000);
  const [leader] = leading() as [ControllerProcess];
  const [follower] = pair.filter((r) => r !== leader) as [ControllerProcess];
  await follower.waitForLog("caches synced");
  const identity = leader.find("started leading")[0]?.identity;
  assert.equal((await leases.get(LEASE)).spec?.holderIdentity, identity);

  const stoppedAt = Date.now();
  assert.equal(await leader.stop(), 0, "a graceful stop exits 0");
  await waitFor("the follower to lead", () => follower.find("started leading").length > 0, 60_000);
  const handOverMs = Date.now() - stoppedAt;
  assert.ok(handOverMs < (LEASE_DURATION_S * 1000) / 2, `hand-over took ${handOverMs} ms`);
  const lease = await leases.get(LEASE);
  assert.equal(lease.spec?.holderIdentity, follower.find("started leading")[0]?.identity);
  assert.notEqual(lease.spec?.holderIdentity, identity);
  console.log(`leader hand-over after SIGTERM: ${handOverMs} ms (lease duration ${LEASE_DURATION_S}s)`);
  assert.equal(await follower.stop(), 0);
});
