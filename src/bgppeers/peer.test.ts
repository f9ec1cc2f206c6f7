import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type BGPPeer, peerFacts } from "./peer.ts";

const BASE = { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513 };
const problem = (spec: Partial<NonNullable<BGPPeer["spec"]>>) => peerFacts({ spec: { ...BASE, ...spec } }).problem;

describe("peerFacts", () => {
  test("defaults as the CRD's; durations read as Go reads them", () => {
    const facts = peerFacts({
      metadata: { name: "tor" },
      spec: { ...BASE, bfd: {}, gracefulRestart: {}, passwordSecretRef: { name: "md5" } },
    });
    assert.deepEqual(facts, {
      name: "tor",
      ...{ peerAddress: "192.0.2.1", peerAsn: 64512, myAsn: 64513, peerPort: 179, holdTimeSeconds: 90 },
      ...{ keepaliveTimeSeconds: undefined, nodeSelector: undefined, sourceAddress: undefined, ebgpMultiHop: false },
      password: { secret: "md5", key: "password" },
      bfd: { minRxMs: 300, minTxMs: 300, multiplier: 3 },
      gracefulRestart: { restartTimeSeconds: 120 },
      advertisePodCidrs: true,
      problem: undefined,
    });
    assert.equal(peerFacts({ spec: { ...BASE, advertisePodCIDRs: false } }).advertisePodCidrs, false, "opted out");
    assert.equal(peerFacts({ spec: { ...BASE, holdTime: "1m30s", keepaliveTime: "30s" } }).keepaliveTimeSeconds, 30);
    assert.equal(peerFacts({ spec: { ...BASE, bfd: { minRx: "0.05s" } } }).bfd?.minRxMs, 50);
  });

  const refusals: [Partial<NonNullable<BGPPeer["spec"]>>, RegExp][] = [
    [{ peerAddress: "router" }, /^peerAddress: /],
    [{ peerASN: 0 }, /^peerASN: 0 is not an AS number/],
    [{ myASN: 4_294_967_296 }, /^myASN: 4294967296 is not an AS number/],
    [{ holdTime: "1s" }, /^holdTime: 1s is not 0 or 3s to 65535s$/],
    [{ holdTime: "3.5s" }, /^holdTime: 3.5s is not a whole number of seconds$/],
    [{ holdTime: "1d" }, /^holdTime: "1d" is not a duration as Go writes it$/],
    [{ holdTime: "-3s" }, /^holdTime: "-3s" is not a duration/],
    [{ holdTime: "0s", keepaliveTime: "1s" }, /^keepaliveTime: 1s is not below holdTime 0s/],
    [{ holdTime: "9s", keepaliveTime: "9s" }, /^keepaliveTime: 9s is not below holdTime 9s/],
    [{ sourceAddress: "2001:db8::1" }, /^sourceAddress: 2001:db8::1 is not of the family of peerAddress/],
    [
      { nodeSelector: { matchExpressions: [{ key: "a", operator: "Near" }] } },
      /^nodeSelector: unknown operator "Near"$/,
    ],
    [{ bfd: { minTx: "5ms" } }, /^bfd\.minTx: 5ms is not 10ms to 60000ms$/],
    [{ bfd: { multiplier: 256 } }, /^bfd\.multiplier: 256 is not 1 to 255$/],
    [{ gracefulRestart: { restartTime: "4096s" } }, /^gracefulRestart\.restartTime: 4096s is not 1s to 4095s$/],
    [{ advertisePodCIDRs: "no" as unknown as boolean }, /^advertisePodCIDRs: "no" is not true or false$/],
  ];
  test("what the CRD's rules refuse (a peer written where they do not run) is a problem naming the field", () => {
    for (const [spec, pattern] of refusals) assert.match(problem(spec) ?? "sound", pattern, JSON.stringify(spec));
    assert.match(problem({ peerASN: 0, holdTime: "1s" }) ?? "", /^peerASN: .*; holdTime: /, "every problem told");
  });
});
