// The agent gives back memory it no longer uses (native/memory), in two steps of one kind:
// - once, when the node is first done (ready): start-up's pages. Node 24 maps ~40 MiB of its 120 MB binary while it
//   starts; at rest the agent uses a fraction of that. They are unmapped (madvise MADV_DONTNEED over the read-only
//   file mappings) and dropped from the page cache, which a cold start charged to the pod.
// - after later work (a write: addresses, taint, metadata), a trim: the code that work faulted back in is unmapped
//   again, this time kept in the page cache (a re-fault is a minor fault, no disk read), and glibc's malloc gives
//   back its free pages (malloc_trim), which free() keeps inside the [heap] segment.
// - at rest, a trim 2 s after each reconcile that wrote nothing (the safety-net resync every 10 s): the ~10 MiB of
//   code it and the watch's bookmarks fault back stay mapped for seconds, not until the next write. Measured in
//   docs/performance.md.
// The pages the agent touches again fault back in.
import { createRequire } from "node:module";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { Logger } from "../cli/log.ts";

interface Addon {
  /** Bytes of file mappings unmapped; their pages are dropped from the page cache unless told otherwise. */
  releaseFilePages(dropFromPageCache?: boolean): number;
  /** Whether malloc gave any memory back. */
  trimMalloc(): boolean;
}

const addon = (): Addon => createRequire(import.meta.url)("local-ccm-memory") as Addon;

/**
 * Called once, when the node is first done (ready); the bytes of mappings unmapped, or undefined when it failed
 * (which costs memory, nothing else).
 */
export function releaseStartupPages(log: Logger): number | undefined {
  try {
    const mapped = addon().releaseFilePages(true);
    log.info("start-up pages released", { unmappedMiB: Math.round(mapped / 2 ** 20) });
    return mapped;
  } catch (err) {
    log.warn("start-up pages not released: the agent's memory stays higher at rest", { err });
    return undefined;
  }
}

/** Why the agent trims: after a bout of work, or after a reconcile at rest. */
export type TrimReason = "work" | "rest";

/** V8's full collection; undefined until first asked for, null when it cannot be had. */
let collector: (() => void) | null | undefined;

/**
 * V8's full garbage collection, exposed on first use (the chart's Node flags need not carry --expose-gc). At rest V8
 * allocates too little to collect by itself: what a burst of work left stays in its heap (after 1,000 Services came
 * in, an agent still held 34 MiB at rest in bench:bgp).
 */
function fullGc(): (() => void) | undefined {
  if (collector === undefined) {
    try {
      setFlagsFromString("--expose-gc");
      collector = runInNewContext("gc") as () => void;
    } catch {
      collector = null;
    }
  }
  return collector ?? undefined;
}

/**
 * After work, V8's garbage collected first; then the pages later work touched unmapped (kept in the page cache) and
 * malloc's free memory given back. Logged at verbosity 2 after work, 4 at rest (one every resync).
 */
export function trimMemory(log: Logger, after: TrimReason): void {
  try {
    const started = performance.now();
    if (after === "work") fullGc()?.();
    const memory = addon();
    const mapped = memory.releaseFilePages(false);
    const mallocTrimmed = memory.trimMalloc();
    const ms = Math.round(performance.now() - started);
    log.v(after === "work" ? 2 : 4)?.("memory trimmed", { after, unmappedMiB: Math.round(mapped / 2 ** 20), mallocTrimmed, ms });
  } catch (err) {
    log.v(1)?.("memory not trimmed", { err });
  }
}

/** When the agent trims after work: what each trim costs is re-faulting the code the next work runs. */
export interface TrimTiming {
  /** Quiet this long after the last work: the work is over. */
  quietMs: number;
  /** While work goes on: at most this long after the first work since the last trim. */
  maxWaitMs: number;
  /** At rest: this long after a reconcile that did no work, so that what V8 runs after it (GC tasks) is over too. */
  restMs: number;
}

export const TRIM_TIMING: TrimTiming = { quietMs: 30_000, maxWaitMs: 60_000, restMs: 2_000 };

/**
 * Runs `trim` once the agent has been quiet for `quietMs` after work, or `maxWaitMs` after the first work since the
 * last trim if work goes on: under continuous churn one trim per `maxWaitMs`, and never two closer than
 * min(quietMs, maxWaitMs). At rest (no trim due), a reconcile that did no work is followed by a trim `restMs` after
 * it; work before then puts the trim off as work does. The timer does not keep the process alive.
 */
export class TrimSchedule {
  private timer: NodeJS.Timeout | undefined;
  /** When the first work since the last trim was done (Date.now(): fake timers in tests move it). */
  private since: number | undefined;
  private stopped = false;
  private readonly trim: (after: TrimReason) => void;
  private readonly timing: TrimTiming;

  constructor(trim: (after: TrimReason) => void, timing: TrimTiming = TRIM_TIMING) {
    this.trim = trim;
    this.timing = timing;
  }

  worked(): void {
    if (this.stopped) return;
    const now = Date.now();
    this.since ??= now;
    clearTimeout(this.timer);
    const due = Math.min(this.timing.quietMs, this.since + this.timing.maxWaitMs - now);
    this.timer = setTimeout(() => this.fire("work"), Math.max(0, due));
    this.timer.unref?.();
  }

  /** A reconcile that wrote nothing: trimmed `restMs` after, unless a trim is due anyway. */
  rested(): void {
    if (this.stopped || this.timer !== undefined) return;
    this.timer = setTimeout(() => this.fire("rest"), this.timing.restMs);
    this.timer.unref?.();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private fire(after: TrimReason): void {
    this.timer = undefined;
    this.since = undefined;
    this.trim(after);
  }
}
