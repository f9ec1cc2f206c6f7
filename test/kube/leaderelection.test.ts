// Leader election between real processes on a real Lease: one leader at a time, takeover after
// the leader is killed (within lease duration + retry period), prompt takeover after a graceful
// release, and a leader that cannot renew stops within the renew deadline.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";

const LEASE_MS = 4000;
const RENEW_MS = 3000;
const RETRY_MS = 500;
/** Scheduling and process start-up on a busy two-core machine. */
const SLACK_MS = 2000;

interface Line {
  event: "started" | "stopped" | "released";
  identity: string;
  at: number;
  leader: boolean;
}

class Candidate {
  readonly lines: Line[] = [];
  readonly child: ChildProcess;
  readonly identity: string;
  constructor(plane: ControlPlane, identity: string) {
    this.identity = identity;
    this.child = spawn(
      process.execPath,
      [
        path.join(import.meta.dirname, "elector-fixture.ts"),
        plane.kubeconfigPath,
        identity,
        String(LEASE_MS),
        String(RENEW_MS),
        String(RETRY_MS),
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    let buffer = "";
    this.child.stdout?.on("data", (chunk: Buffer) => {
      buffer += chunk;
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        this.lines.push(JSON.parse(buffer.slice(0, i)) as Line);
        buffer = buffer.slice(i + 1);
      }
    });
  }
  has(event: Line["event"]): Line | undefined {
    return this.lines.find((l) => l.event === event);
  }
}

/** Leadership intervals [started, stopped or end] of every candidate must not overlap. */
function assertOneLeaderAtATime(candidates: Candidate[], ends: Map<string, number>): void {
  const intervals = candidates.flatMap((c) => {
    const started = c.has("started");
    if (!started) return [];
    return [
      {
        who: c.identity,
        from: started.at,
        to: c.has("stopped")?.at ?? ends.get(c.identity) ?? Number.POSITIVE_INFINITY,
      },
    ];
  });
  intervals.sort((a, b) => a.from - b.from);
  for (let i = 1; i < intervals.length; i++) {
    const prev = intervals[i - 1] as (typeof intervals)[number];
    const next = intervals[i] as (typeof intervals)[number];
    assert.ok(
      prev.to <= next.from,
      `${prev.who} still led until ${prev.to} when ${next.who} started at ${next.from}`,
    );
  }
}

describe("LeaderElector with real processes and a real Lease", () => {
  let plane: ControlPlane;
  let leases: Resource<Lease>;
  const candidates: Candidate[] = [];
  before(async () => {
    plane = await startControlPlane();
    leases = new Resource<Lease>(plane.admin, {
      group: "coordination.k8s.io",
      version: "v1",
      plural: "leases",
      namespace: "default",
    });
  });
  after(async () => {
    for (const c of candidates) c.child.kill("SIGKILL");
    process.kill(plane.pids().apiserver, "SIGCONT");
    await plane?.stop();
  });

  test("three candidates: exactly one leads; kill -9 it and another leads within lease duration + retry period; a graceful stop hands over at once", async () => {
    await leases.delete("fixture").catch(() => {});
    const trio = ["a", "b", "c"].map((id) => new Candidate(plane, id));
    candidates.push(...trio);
    const first = await waitFor("a first leader", () => trio.find((c) => c.has("started")));
    assert.equal((await leases.get("fixture")).spec?.holderIdentity, first.identity);
    await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS)); // others keep trying for two lease durations
    assert.deepEqual(
      trio.filter((c) => c.has("started")).map((c) => c.identity),
      [first.identity],
    );
    assert.equal((await leases.get("fixture")).spec?.leaseTransitions, 0);

    const killedAt = Date.now();
    first.child.kill("SIGKILL");
    const ends = new Map([[first.identity, killedAt]]);
    const rest = trio.filter((c) => c !== first);
    const second = await waitFor(
      "a second leader",
      () => rest.find((c) => c.has("started")),
      LEASE_MS + RETRY_MS + 3 * SLACK_MS,
    );
    const takeover = (second.has("started") as Line).at - killedAt;
    assert.ok(takeover <= LEASE_MS + RETRY_MS * 1.2 + SLACK_MS, `takeover took ${takeover} ms`);
    const lease = await leases.get("fixture");
    assert.equal(lease.spec?.holderIdentity, second.identity);
    assert.equal(lease.spec?.leaseTransitions, 1);

    const third = rest.find((c) => c !== second) as Candidate;
    const stoppingAt = Date.now();
    second.child.kill("SIGTERM");
    await waitFor("the second leader to release", () => second.has("released"));
    await waitFor("the third to lead", () => third.has("started"), LEASE_MS);
    assert.ok(
      (third.has("started") as Line).at - stoppingAt < LEASE_MS,
      "a released lease is taken without waiting for expiry",
    );
    assertOneLeaderAtATime(trio, ends);
    third.child.kill("SIGTERM");
    await waitFor("the third to release", () => third.has("released"));
  });

  test("a leader whose renewals fail (apiserver frozen) stops leading within the renew deadline", async () => {
    await leases.delete("fixture").catch(() => {});
    const solo = new Candidate(plane, "solo");
    candidates.push(solo);
    await waitFor("solo to lead", () => solo.has("started"));
    await new Promise((resolve) => setTimeout(resolve, 2 * RETRY_MS)); // at least one renewal happened
    const frozenAt = Date.now();
    process.kill(plane.pids().apiserver, "SIGSTOP");
    try {
      const stopped = await waitFor(
        "solo to stop leading",
        () => solo.has("stopped"),
        RENEW_MS + 3 * SLACK_MS,
      );
      assert.ok(
        stopped.at - frozenAt <= RENEW_MS + SLACK_MS,
        `stopped ${stopped.at - frozenAt} ms after the freeze`,
      );
      assert.equal(stopped.leader, false, "isLeader() is false once work stops");
    } finally {
      process.kill(plane.pids().apiserver, "SIGCONT");
    }
    // Once the API answers again it campaigns and leads again.
    await waitFor(
      "solo to lead again",
      () => solo.lines.filter((l) => l.event === "started").length === 2,
      LEASE_MS + 3 * SLACK_MS,
    );
  });
});
