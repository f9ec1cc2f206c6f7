// Leader election between real processes on a real Lease: one leader at a time, takeover after the leader is
// killed (never before its last renewal has expired), takeover after a graceful release long before the lease would
// have expired, a lease taken by a write whose answer a stop cut off is still released, and a leader that cannot renew stops leading before anyone else could take over. How long each
// step took goes to the diagnostics: on a loaded two-core machine only the ordering is a fact.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import { Resource } from "../../src/kube/resource.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";

interface Timing {
  leaseMs: number;
  renewMs: number;
  retryMs: number;
}
const SHORT: Timing = { leaseMs: 4000, renewMs: 3000, retryMs: 500 };
/** Where a step must be shown to beat the lease's expiry, expiry is far beyond any scheduling delay. */
const LONG: Timing = { leaseMs: 60_000, renewMs: 15_000, retryMs: 500 };
/** Generous bound for a step that takes a few seconds on a busy two-core machine. */
const STEP_LIMIT_MS = 60_000;

interface Line {
  event: "started" | "stopped" | "released" | "writing";
  identity: string;
  at: number;
  leader: boolean;
}

class Candidate {
  readonly lines: Line[] = [];
  readonly child: ChildProcess;
  readonly identity: string;
  /** `lateAnswerMs`: how late the answers to its Lease writes come (elector-fixture.ts). */
  constructor(plane: ControlPlane, identity: string, { leaseMs, renewMs, retryMs }: Timing = SHORT, lateAnswerMs = 0) {
    this.identity = identity;
    this.child = spawn(
      process.execPath,
      [
        path.join(import.meta.dirname, "elector-fixture.ts"),
        plane.kubeconfigPath,
        identity,
        String(leaseMs),
        String(renewMs),
        String(retryMs),
        String(lateAnswerMs),
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

  /** The fixture Lease's renewTime (wall clock of the holder's process, ms), once it satisfies `ready`. */
  const renewal = (what: string, ready: (renewed: number, acquired: number) => boolean) =>
    waitFor(
      what,
      async () => {
        const spec = (await leases.get("fixture")).spec;
        const renewed = Date.parse(spec?.renewTime ?? "");
        return ready(renewed, Date.parse(spec?.acquireTime ?? "")) && { renewed, holder: spec?.holderIdentity };
      },
      STEP_LIMIT_MS,
      100,
    );

  test("three candidates: exactly one leads; kill -9 it and another leads only once its lease expired", async (t) => {
    await leases.delete("fixture").catch(() => {});
    const trio = ["a", "b", "c"].map((id) => new Candidate(plane, id));
    candidates.push(...trio);
    const first = await waitFor("a first leader", () => trio.find((c) => c.has("started")), STEP_LIMIT_MS);
    assert.equal((await leases.get("fixture")).spec?.holderIdentity, first.identity);
    // Held through two lease durations by renewals alone: the others kept trying and took nothing.
    await renewal("the leader's renewals to span two lease durations", (renewed, acquired) =>
      renewed - acquired >= 2 * SHORT.leaseMs);
    assert.deepEqual(
      trio.filter((c) => c.has("started")).map((c) => c.identity),
      [first.identity],
    );
    assert.equal((await leases.get("fixture")).spec?.leaseTransitions, 0);

    const killedAt = Date.now();
    first.child.kill("SIGKILL");
    // Its last renewal: nobody else may write the Lease before it expires, so this read sees it.
    const last = await renewal("the killed leader's last renewal", () => true);
    assert.equal(last.holder, first.identity);
    const ends = new Map([[first.identity, killedAt]]);
    const rest = trio.filter((c) => c !== first);
    const second = await waitFor("a second leader", () => rest.find((c) => c.has("started")), STEP_LIMIT_MS);
    const secondAt = (second.has("started") as Line).at;
    t.diagnostic(`takeover ${secondAt - killedAt} ms after kill -9 (lease ${SHORT.leaseMs} ms, retry ` +
      `${SHORT.retryMs} ms)`);
    // A candidate measures expiry from when it saw the last change, which is no earlier than the renewTime written.
    assert.ok(secondAt >= last.renewed + SHORT.leaseMs,
      `${second.identity} led ${secondAt - last.renewed} ms after the last renewal, before the lease expired`);
    const lease = await leases.get("fixture");
    assert.equal(lease.spec?.holderIdentity, second.identity);
    assert.equal(lease.spec?.leaseTransitions, 1);

    const third = rest.find((c) => c !== second) as Candidate;
    second.child.kill("SIGTERM");
    await waitFor("the second leader to release", () => second.has("released"), STEP_LIMIT_MS);
    await waitFor("the third to lead", () => third.has("started"), STEP_LIMIT_MS);
    assertOneLeaderAtATime(trio, ends);
    third.child.kill("SIGTERM");
    await waitFor("the third to release", () => third.has("released"), STEP_LIMIT_MS);
  });

  test("a graceful stop hands over at once: long before the released lease would have expired", async (t) => {
    await leases.delete("fixture").catch(() => {});
    const pair = ["d", "e"].map((id) => new Candidate(plane, id, LONG));
    candidates.push(...pair);
    const first = await waitFor("a first leader", () => pair.find((c) => c.has("started")), STEP_LIMIT_MS);
    const other = pair.find((c) => c !== first) as Candidate;
    // Without the release the other would wait a whole lease duration from when it first saw the lease held.
    const stoppingAt = Date.now();
    first.child.kill("SIGTERM");
    await waitFor("the leader to release", () => first.has("released"), STEP_LIMIT_MS);
    await waitFor("the other to lead, well within the lease duration", () => other.has("started"), LONG.leaseMs / 2);
    t.diagnostic(`handover ${(other.has("started") as Line).at - stoppingAt} ms after SIGTERM ` +
      `(lease ${LONG.leaseMs} ms)`);
    assertOneLeaderAtATime(pair, new Map());
    other.child.kill("SIGTERM");
    await waitFor("the other to release", () => other.has("released"), STEP_LIMIT_MS);
  });

  test("stopped while the answer to the write that took the lease is on its way: that lease is released", async () => {
    await leases.delete("fixture").catch(() => {});
    const slow = new Candidate(plane, "f", LONG, 2000);
    candidates.push(slow);
    await waitFor("its first write to go out", () => slow.has("writing"), STEP_LIMIT_MS);
    slow.child.kill("SIGTERM");
    await waitFor("it to end", () => slow.has("released"), STEP_LIMIT_MS);
    assert.equal(slow.has("started"), undefined, "it never led");
    // Left held, no other replica could lead for a whole lease duration.
    assert.equal((await leases.get("fixture")).spec?.holderIdentity, "");
  });

  test("a leader whose renewals fail (apiserver frozen) stops leading before its lease could expire", async (t) => {
    await leases.delete("fixture").catch(() => {});
    const solo = new Candidate(plane, "solo", LONG);
    candidates.push(solo);
    await waitFor("solo to lead", () => solo.has("started"), STEP_LIMIT_MS);
    const { renewed } = await renewal("at least one renewal", (renewedAt, acquired) => renewedAt > acquired);
    const frozenAt = Date.now();
    process.kill(plane.pids().apiserver, "SIGSTOP");
    try {
      const stopped = await waitFor("solo to stop leading", () => solo.has("stopped"), LONG.leaseMs);
      t.diagnostic(`stopped ${stopped.at - frozenAt} ms after the freeze (renew deadline ${LONG.renewMs} ms)`);
      // The last renewal was no earlier than the one read before the freeze; others wait a lease duration from it.
      assert.ok(stopped.at < renewed + LONG.leaseMs,
        `stopped ${stopped.at - frozenAt} ms after the freeze, when others could already take over`);
      assert.equal(stopped.leader, false, "isLeader() is false once work stops");
    } finally {
      process.kill(plane.pids().apiserver, "SIGCONT");
    }
    // Once the API answers again it campaigns and leads again.
    await waitFor(
      "solo to lead again",
      () => solo.lines.filter((l) => l.event === "started").length === 2,
      STEP_LIMIT_MS,
    );
  });
});
