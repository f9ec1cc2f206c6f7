// The LoadBalancerIPPool CRD against a real kube-apiserver: its CEL rules and schema refuse bad pools with their
// message, take good ones with the defaults, and `kubectl get` shows the printer columns.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { isApiError } from "../../src/kube/errors.ts";
import { Resource } from "../../src/kube/resource.ts";
import { type LoadBalancerIPPool, POOL_RESOURCE, POOL_TYPE } from "../../src/pools/pool.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { installPoolCrd } from "./crd.ts";

let plane: ControlPlane;
let pools: Resource<LoadBalancerIPPool>;
before(async () => {
  plane = await startControlPlane();
  await installPoolCrd(plane);
  pools = new Resource(plane.admin, POOL_RESOURCE);
});
after(async () => {
  await plane?.stop();
});

let created = 0;
/** The apiserver's refusal of a pool with this spec, or undefined when it takes it. */
async function refusal(spec: unknown): Promise<string | undefined> {
  try {
    await pools.create({ ...POOL_TYPE, metadata: { name: `pool-${++created}` }, spec } as LoadBalancerIPPool);
    return undefined;
  } catch (err) {
    assert.ok(isApiError(err, "Invalid"), String(err));
    return err.message;
  }
}

const ADDRESS_RULE = "each address is a CIDR, an IP, or a first-last range of two IPs of one family";
const ORDER_RULE = "a first-last range ends before it starts";

describe("LoadBalancerIPPool CRD", () => {
  test("good pools are taken, with autoAssign true and avoidBuggyIPs false by default", async () => {
    const ranges = ["198.51.101.10-198.51.101.20", "2001:db8:1::1 - 2001:db8:1::9"];
    const addresses = ["198.51.100.0/24", "2001:db8::/64", ...ranges];
    const selector = { matchLabels: { a: "b" } };
    assert.equal(await refusal({ addresses, namespaces: ["web"], serviceSelector: selector }), undefined);
    const pool = await pools.get(`pool-${created}`);
    assert.deepEqual([pool.spec?.autoAssign, pool.spec?.avoidBuggyIPs], [true, false]);
  });

  test("bad addresses are refused with the rule's message", async () => {
    const bad = ["198.51.100.0/33", "010.0.0.1", "198.51.100.1-2001:db8::1", "a-b", "1.2.3.4-5.6.7.8-9.9.9.9"];
    for (const entry of [...bad, "fe80::1%eth0", "pool"]) {
      const message = await refusal({ addresses: [entry] });
      assert.ok(message?.includes(ADDRESS_RULE), `${entry}: ${message}`);
    }
  });

  test("a reversed IPv4 range is refused (IPv6: by the controller); ranges in order are taken", async () => {
    const reversed = ["198.51.100.9-198.51.100.1", "10.0.0.10-10.0.0.9", "10.1.0.0 - 9.255.255.255"];
    for (const entry of reversed) {
      const message = await refusal({ addresses: ["192.0.2.0/24", entry] });
      assert.ok(message?.includes(ORDER_RULE), `${entry}: ${message}`);
      assert.ok(!message?.includes(ADDRESS_RULE), `${entry}: only the order is wrong`);
    }
    const ordered = [
      "198.51.100.1-198.51.100.1",
      "10.0.0.9-10.0.0.10",
      "2001:db8::ffff-2001:db8::1:0",
      "::-::1",
      "2001:DB8::1-2001:db8::2",
      "fe80::1-fe80:0:0:1::",
    ];
    for (const entry of ordered) assert.equal(await refusal({ addresses: [entry] }), undefined, entry);
  });

  test("a prefix length out of range and mixed families are refused by the address rule", async () => {
    for (const entry of ["198.51.100.0/33", "2001:db8::/129", "198.51.100.0/-1", "198.51.100.1-2001:db8::2"]) {
      const message = await refusal({ addresses: [entry] });
      assert.ok(message?.includes(ADDRESS_RULE), `${entry}: ${message}`);
    }
  });

  test("no addresses, a bad selector or namespace are refused", async () => {
    assert.match((await refusal({ addresses: [] })) ?? "", /spec\.addresses: Invalid value: .*at least 1 item/);
    assert.match((await refusal({})) ?? "", /spec\.addresses: Required value/);
    const selector = { matchExpressions: [{ key: "tier", operator: "In" }] };
    assert.match(
      (await refusal({ addresses: ["198.51.100.0/24"], serviceSelector: selector })) ?? "",
      /In and NotIn need values; Exists and DoesNotExist take none/,
    );
    const namespaces = ["Not_A_Label"];
    assert.match((await refusal({ addresses: ["198.51.100.0/24"], namespaces })) ?? "", /namespaces\[0\]/);
  });

  test("BGP attributes: AA:NN communities of 16-bit numbers and a uint32 local-pref are taken, others refused", async () => {
    const bgp = { communities: ["64512:100", "0:0", "65535:65535"], localPref: 4_294_967_295 };
    assert.equal(await refusal({ addresses: ["192.0.2.0/24"], bgp }), undefined);
    assert.deepEqual((await pools.get(`pool-${created}`)).spec?.bgp, bgp);
    for (const community of ["65536:1", "1:65536", "64512", "a:b", "1:2:3", "-1:2", " 1:2", "no-export"]) {
      const message = await refusal({ addresses: ["192.0.2.0/24"], bgp: { communities: [community] } });
      assert.ok(message?.includes("a community is AA:NN, two numbers from 0 to 65535 (RFC 1997)"), `${community}: ${message}`);
    }
    const twice = await refusal({ addresses: ["192.0.2.0/24"], bgp: { communities: ["1:2", "1:2"] } });
    assert.match(twice ?? "", /spec\.bgp\.communities\[1\]: Duplicate value/);
    for (const localPref of [-1, 4_294_967_296])
      assert.match(
        (await refusal({ addresses: ["192.0.2.0/24"], bgp: { localPref } })) ?? "",
        /spec\.bgp\.localPref: Invalid value/,
      );
  });

  test("kubectl get shows addresses, auto, size, used, free, ready and age; the status keeps every field", async () => {
    const name = `pool-${++created}`;
    await pools.create({ ...POOL_TYPE, metadata: { name }, spec: { addresses: ["192.0.2.0/30"] } });
    const ready = {
      type: "Ready",
      status: "False",
      reason: "Deleting",
      message: "being deleted; waits until Services release the 1 address(es) they hold of it: 192.0.2.1",
      lastTransitionTime: "2026-11-27T12:00:00Z",
      observedGeneration: 1,
    };
    const retained = ["192.0.2.1 (Service ns/a): pool x is being deleted"];
    const status = { size: "4", used: "1", free: "3", conflicts: [], retained, conditions: [ready] };
    await pools.patch(name, "merge", { status }, { subresource: "status" });
    assert.deepEqual((await pools.get(name)).status, status, "nothing pruned");
    const table = await plane.kubectl(["get", "loadbalancerippools", name]);
    const [header, row] = table.trim().split("\n").map((line) => line.trim().split(/\s{2,}/));
    assert.deepEqual(header, ["NAME", "ADDRESSES", "AUTO", "SIZE", "USED", "FREE", "READY", "REASON", "AGE"]);
    assert.deepEqual(row?.slice(0, 8), [name, '["192.0.2.0/30"]', "true", "4", "1", "3", "False", "Deleting"]);
  });

  test("kubectl wait --for=condition=Ready waits for the Ready condition of the pool's generation", async () => {
    const name = `pool-${++created}`;
    await pools.create({ ...POOL_TYPE, metadata: { name }, spec: { addresses: ["192.0.2.8/30"] } });
    const ready = (status: "True" | "False", reason: string, observedGeneration: number) => ({
      status: {
        conditions: [
          { type: "Ready", status, reason, message: reason, lastTransitionTime: "2026-11-27T12:00:00Z", observedGeneration },
        ],
      },
    });
    const wait = (timeout: string) =>
      plane.kubectl(["wait", "--for=condition=Ready", `lbpool/${name}`, `--timeout=${timeout}`]).then(
        (out) => `ready: ${out.trim()}`,
        (err: Error) => `not ready: ${err.message}`,
      );
    await pools.patch(name, "merge", ready("False", "Invalid", 1), { subresource: "status" });
    assert.match(await wait("2s"), /^not ready: .*timed out waiting for the condition/s);
    // True, but said of an earlier generation than the pool's: stale, not met.
    await pools.patch(name, "merge", ready("True", "Serving", 0), { subresource: "status" });
    assert.match(await wait("2s"), /^not ready: .*timed out waiting for the condition/s);
    await pools.patch(name, "merge", ready("False", "Invalid", 1), { subresource: "status" });
    const waiting = wait("60s");
    await pools.patch(name, "merge", ready("True", "Serving", 1), { subresource: "status" });
    assert.equal(await waiting, `ready: loadbalancerippool.local-ccm.io/${name} condition met`);
  });
});
