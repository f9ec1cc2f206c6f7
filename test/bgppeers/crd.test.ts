// The BGPPeer CRD against a real kube-apiserver: its schema and CEL rules refuse bad peers with their message, take
// good ones with the defaults, agree with peerFacts() (src/bgppeers/peer.ts) on which durations are sound, and
// `kubectl get bgppeer` shows the printer columns. A namespace editor (RBAC `edit`) can neither create nor change one.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { isApiError } from "../../src/kube/errors.ts";
import { Resource } from "../../src/kube/resource.ts";
import { BGP_PEER_RESOURCE, BGP_PEER_TYPE, type BGPPeer, peerFacts } from "../../src/bgppeers/peer.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { editorClient, namespaceEditor } from "../../localcluster/editor.ts";
import { installBgpPeerCrd } from "../pools/crd.ts";

let plane: ControlPlane;
let peers: Resource<BGPPeer>;
before(async () => {
  plane = await startControlPlane({ controllerManager: true }); // for the editor's aggregated `edit` ClusterRole
  await installBgpPeerCrd(plane);
  peers = new Resource(plane.admin, BGP_PEER_RESOURCE);
});
after(async () => {
  await plane?.stop();
});

const BASE = { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513 };
let created = 0;
/** The apiserver's refusal of a peer with this spec (BASE plus `spec`), or undefined when it takes it. */
async function refusal(spec: Record<string, unknown>): Promise<string | undefined> {
  try {
    const body = { ...BGP_PEER_TYPE, metadata: { name: `peer-${++created}` }, spec: { ...BASE, ...spec } };
    await peers.create(body as BGPPeer);
    return undefined;
  } catch (err) {
    assert.ok(isApiError(err, "Invalid"), String(err));
    return err.message;
  }
}

const refusedWith = async (spec: Record<string, unknown>, pattern: RegExp) => {
  const message = await refusal(spec);
  assert.match(message ?? "taken", pattern, JSON.stringify(spec));
};

describe("BGPPeer CRD", () => {
  test("a minimal peer is taken with the defaults: port 179, hold time 90s, no multi-hop, pod CIDRs taken; peerFacts agrees", async () => {
    assert.equal(await refusal({}), undefined);
    const peer = await peers.get(`peer-${created}`);
    const defaults = { peerPort: 179, holdTime: "90s", ebgpMultiHop: false, advertisePodCIDRs: true };
    assert.deepEqual(peer.spec, { ...BASE, ...defaults });
    const facts = peerFacts(peer);
    const read = [facts.problem, facts.holdTimeSeconds, facts.peerPort, facts.advertisePodCidrs];
    assert.deepEqual(read, [undefined, 90, 179, true]);
  });

  test("a full peer is taken; bfd, gracefulRestart and the password's key get their defaults", async () => {
    const spec = {
      peerAddress: "2001:db8::1",
      peerASN: 4_294_967_295,
      myASN: 4_200_000_000,
      peerPort: 1179,
      holdTime: "3s",
      keepaliveTime: "1s",
      nodeSelector: { matchExpressions: [{ key: "rack", operator: "In", values: ["r1"] }] },
      sourceAddress: "2001:db8::10",
      ebgpMultiHop: true,
      passwordSecretRef: { name: "router-md5" },
      bfd: {},
      gracefulRestart: {},
    };
    assert.equal(await refusal(spec), undefined);
    const peer = await peers.get(`peer-${created}`);
    assert.deepEqual(peer.spec?.bfd, { minRx: "300ms", minTx: "300ms", multiplier: 3 });
    assert.deepEqual(peer.spec?.gracefulRestart, { restartTime: "120s" });
    assert.deepEqual(peer.spec?.passwordSecretRef, { name: "router-md5", key: "password" });
    // No namespace: a Secret elsewhere cannot be named (the field is pruned, as any unknown one).
    const elsewhere = { passwordSecretRef: { name: "md5", namespace: "tenant" } };
    assert.equal(await refusal(elsewhere), undefined);
    assert.deepEqual((await peers.get(`peer-${created}`)).spec?.passwordSecretRef, { name: "md5", key: "password" });
    const facts = peerFacts(peer);
    assert.equal(facts.problem, undefined);
    assert.deepEqual(facts.bfd, { minRxMs: 300, minTxMs: 300, multiplier: 3 });
    assert.deepEqual(
      [facts.holdTimeSeconds, facts.keepaliveTimeSeconds, facts.gracefulRestart],
      [3, 1, { restartTimeSeconds: 120 }],
    );
  });

  test("ASN 0 or above 4294967295, and a missing ASN or address, are refused", async () => {
    await refusedWith({ peerASN: 0 }, /spec\.peerASN: Invalid value: 0: .*greater than or equal to 1/);
    await refusedWith({ myASN: 0 }, /spec\.myASN: Invalid value: 0/);
    await refusedWith(
      { myASN: 4_294_967_296 },
      /spec\.myASN: Invalid value: 4294967296: .*less than or equal to 4294967295/,
    );
    await refusedWith({ peerASN: undefined }, /spec\.peerASN: Required value/);
    await refusedWith({ peerAddress: undefined }, /spec\.peerAddress: Required value/);
  });

  test("an address that is not an IP is refused with the rule's message, peerAddress and sourceAddress alike", async () => {
    for (const bad of ["router-1", "192.0.2.256", "010.0.0.1", "fe80::1%eth0", "192.0.2.0/24", ""]) {
      await refusedWith({ peerAddress: bad }, /peerAddress is an IP address/);
      await refusedWith({ sourceAddress: bad }, /sourceAddress is an IP address/);
    }
    await refusedWith({ sourceAddress: "2001:db8::1" }, /sourceAddress is of the peerAddress's family/);
  });

  test("a hold time of 1s, 2s, above 65535s, fractional or not Go's is refused; 0 and 3s are taken", async () => {
    for (const hold of ["1s", "2s", "2999ms", "65536s", "19h"])
      await refusedWith({ holdTime: hold }, /holdTime is 0 or 3s to 65535s/);
    await refusedWith({ holdTime: "3.5s" }, /whole seconds/);
    for (const hold of ["90", "-90s", "1d", "90 s", "+90s"])
      await refusedWith({ holdTime: hold }, /a duration as Go writes it/);
    for (const hold of ["0", "0s", "3s", "1m30s", "65535s", "3000ms"])
      assert.equal(await refusal({ holdTime: hold }), undefined, hold);
  });

  test("a keepalive not below the hold time is refused (0 with hold time 0); below it, it is taken", async () => {
    await refusedWith({ holdTime: "9s", keepaliveTime: "9s" }, /keepaliveTime is below holdTime/);
    await refusedWith({ holdTime: "9s", keepaliveTime: "30s" }, /keepaliveTime is below holdTime/);
    await refusedWith({ keepaliveTime: "91s" }, /keepaliveTime is below holdTime/);
    await refusedWith(
      { holdTime: "0s", keepaliveTime: "1s" },
      /keepaliveTime is below holdTime \(and 0 when holdTime is 0\)/,
    );
    await refusedWith({ keepaliveTime: "0.5s" }, /whole seconds/);
    assert.equal(await refusal({ holdTime: "0s", keepaliveTime: "0s" }), undefined);
    assert.equal(await refusal({ holdTime: "9s", keepaliveTime: "3s" }), undefined);
  });

  test("bfd intervals outside 10ms-1m, a multiplier of 0, a restart time outside 1s-4095s are refused", async () => {
    await refusedWith({ bfd: { minRx: "5ms" } }, /a BFD interval is 10ms to 1m/);
    await refusedWith({ bfd: { minTx: "2m" } }, /a BFD interval is 10ms to 1m/);
    await refusedWith({ bfd: { multiplier: 0 } }, /spec\.bfd\.multiplier: Invalid value: 0/);
    await refusedWith({ gracefulRestart: { restartTime: "4096s" } }, /restartTime is 1s to 4095s/);
    await refusedWith({ gracefulRestart: { restartTime: "0s" } }, /restartTime is 1s to 4095s/);
    await refusedWith({ passwordSecretRef: { key: "password" } }, /spec\.passwordSecretRef\.name: Required value/);
    await refusedWith({ passwordSecretRef: { name: "Not_A_Name" } }, /spec\.passwordSecretRef\.name/);
    const selector = { matchExpressions: [{ key: "rack", operator: "In" }] };
    await refusedWith({ nodeSelector: selector }, /In and NotIn need values/);
  });

  test("the apiserver (Go's time.ParseDuration in CEL) and peerFacts (cli/duration.ts) agree on each hold time", async () => {
    const unit = fc.constantFrom("ns", "us", "µs", "ms", "s", "m", "h", "", "d", "S");
    const number = fc.oneof(
      fc.nat({ max: 70_000 }).map(String),
      fc.constantFrom("1.5", ".5", "3.", "0", "00", "3.000"),
    );
    const part = fc.tuple(number, unit).map(([n, u]) => n + u);
    const text = fc.oneof(
      fc.array(part, { minLength: 1, maxLength: 3 }).map((parts) => parts.join("")),
      fc.constantFrom("0", "-3s", ""),
    );
    const samples = [...fc.sample(text, { numRuns: 80, seed: 27 }), "3s", "65535s", "1m5s", "3.000s"];
    const outcomes = new Set<boolean>();
    for (const holdTime of new Set(samples)) {
      const taken = (await refusal({ holdTime })) === undefined;
      const sound = peerFacts({ spec: { ...BASE, holdTime } }).problem === undefined;
      assert.equal(taken, sound, `holdTime ${JSON.stringify(holdTime)}: apiserver ${taken ? "takes" : "refuses"} it`);
      outcomes.add(taken);
    }
    assert.equal(outcomes.size, 2, "some taken, some refused");
  });

  test("a namespace editor (RBAC edit) can neither create, change nor delete a BGPPeer: cluster-admin only", async () => {
    const name = `peer-${++created}`;
    await peers.create({ ...BGP_PEER_TYPE, metadata: { name }, spec: BASE });
    const editor = new Resource<BGPPeer>(
      await editorClient(await namespaceEditor(plane, "bgp-editor")),
      BGP_PEER_RESOURCE,
    );
    const forbidden = (write: Promise<unknown>) =>
      write.then(
        () => "allowed",
        (err: unknown) => (isApiError(err, "Forbidden") ? "forbidden" : String(err)),
      );
    const hostile = { ...BASE, peerAddress: "203.0.113.66" };
    assert.equal(
      await forbidden(editor.create({ ...BGP_PEER_TYPE, metadata: { name: "rogue" }, spec: hostile })),
      "forbidden",
    );
    assert.equal(await forbidden(editor.patch(name, "merge", { spec: hostile })), "forbidden");
    assert.equal(await forbidden(editor.delete(name)), "forbidden");
    assert.equal((await peers.get(name)).spec?.peerAddress, BASE.peerAddress);
  });

  test("kubectl get bgppeer shows peer, ASNs, established sessions and nodes; the status keeps every field", async () => {
    const name = `peer-${++created}`;
    await peers.create({ ...BGP_PEER_TYPE, metadata: { name }, spec: BASE });
    const status = { nodes: 5, established: 3, notEstablished: ["node-3: Active", "node-4: no report"] };
    await peers.patch(name, "merge", { status }, { subresource: "status" });
    assert.deepEqual((await peers.get(name)).status, status, "nothing pruned");
    const table = await plane.kubectl(["get", "bgppeer", name]);
    const [header, row] = table
      .trim()
      .split("\n")
      .map((line) => line.trim().split(/\s{2,}/));
    assert.deepEqual(header, ["NAME", "PEER", "PEER ASN", "MY ASN", "ESTABLISHED", "NODES", "AGE"]);
    assert.deepEqual(row?.slice(0, 6), [name, "192.0.2.1", "64512", "64513", "3", "5"]);
  });
});
