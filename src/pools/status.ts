// A pool's status, as a pure function of every pool, what allocate() left in use and kept, and what the network
// uses: its size, used and free counts, its conflicts (entries it cannot serve, another pool's overlap, addresses
// the network uses inside it, addresses of it another host answers for: inuse.ts), the addresses Services keep that
// it would no longer give (retained), and a Ready condition (metav1.Condition) that says, while the pool is being
// deleted, that it waits for those to be released.
import { poolHolds } from "./allocate.ts";
import type { ExclusionSet } from "./exclusions.ts";
import { type InUse, inUseLine } from "./inuse.ts";
import type { Condition, PoolFacts, PoolStatus } from "./pool.ts";
import { type AddressRange, formatRange, intersection, ipNumber, mergeRanges, rangeSize } from "./ranges.ts";

/** Conflicts (and retained addresses) listed per pool, at most: the status stays small whatever the pool meets. */
export const MAX_CONFLICTS = 20;

export interface PoolStatusInput {
  pool: PoolFacts;
  pools: readonly PoolFacts[];
  /** Its addresses that Services hold (allocate()'s used). */
  used: ReadonlySet<string>;
  /** allocate()'s retained lines of this pool. */
  retained: readonly string[];
  exclusions: ExclusionSet;
  /** Its addresses Services hold that another host answers for, as their announcers report (inuse.ts). */
  inUse: readonly InUse[];
  /** The Ready condition written now, whose lastTransitionTime stays while its status does. */
  current: Condition | undefined;
  now: Date;
}

export function poolStatus(input: PoolStatusInput): PoolStatus {
  const { pool, pools, used, retained, exclusions, inUse, current, now } = input;
  const conflicts = [
    ...(pool.problem === undefined ? [] : [`serves nothing: ${pool.problem}`]),
    ...pool.unservable.map((problem) => `cannot serve the entry ${problem}`),
    ...inUse.map(inUseLine),
  ];
  for (const other of pools) {
    if (other.name === pool.name) continue;
    for (const mine of pool.ranges)
      for (const theirs of other.ranges) {
        const common = intersection(mine, theirs);
        if (common) conflicts.push(`overlaps pool ${other.name} at ${formatRange(common)}`);
      }
  }
  const excluded: AddressRange[] = [];
  for (const range of pool.ranges)
    for (const exclusion of exclusions.meeting(range)) {
      const common = intersection(range, exclusion) as AddressRange;
      excluded.push(common);
      conflicts.push(`never hands out ${formatRange(common)}: it ${exclusion.reason}`);
    }
  const size = pool.ranges.reduce((sum, range) => sum + rangeSize(range, pool.avoidBuggyIps), 0n);
  const excludedCount = mergeRanges(excluded).reduce((sum, range) => sum + rangeSize(range, pool.avoidBuggyIps), 0n);
  // Of the addresses held, those it still offers: one kept though excluded is counted once, as excluded.
  const usedOffered = [...used].filter((ip) => {
    const number = ipNumber(ip);
    return number && poolHolds(pool, number.family, number.value) && !exclusions.find(number.family, number.value);
  }).length;
  const usedCount = BigInt(used.size);
  const serving = pool.problem === undefined && !pool.deleting;
  const free = serving ? size - excludedCount - BigInt(usedOffered) : 0n;
  return {
    size: String(size),
    used: String(usedCount),
    free: String(free < 0n ? 0n : free),
    conflicts: capped(conflicts),
    retained: capped(retained),
    conditions: [ready(pool, used, inUse, current, now)],
  };
}

function capped(lines: readonly string[]): string[] {
  if (lines.length <= MAX_CONFLICTS) return [...lines];
  return [...lines.slice(0, MAX_CONFLICTS - 1), `and ${lines.length - MAX_CONFLICTS + 1} more`];
}

/**
 * Ready stays True while another host answers for some of its addresses (reason AddressesInUse when nothing else is
 * wrong): the pool serves its other addresses and hands out new ones, and the Service concerned has its own Warning.
 * False would read as a pool that serves nothing, and would let one node's report turn a whole pool not Ready.
 */
function ready(
  pool: PoolFacts,
  used: ReadonlySet<string>,
  inUse: readonly InUse[],
  current: Condition | undefined,
  now: Date,
): Condition {
  const taken = inUse.length
    ? `; another host answers for ${inUse.length} of its address(es): ` +
      `${inUse.slice(0, 5).map(({ address }) => address).join(", ")}${inUse.length > 5 ? ", …" : ""}`
    : "";
  const [status, reason, message]: [Condition["status"], string, string] = pool.deleting
    ? [
        "False",
        "Deleting",
        `being deleted; waits until Services release the ${used.size} address(es) they hold of it: ` +
          `${[...used].slice(0, 5).join(", ")}${used.size > 5 ? ", …" : ""}`,
      ]
    : pool.problem !== undefined
      ? ["False", "Invalid", `serves nothing: ${pool.problem}`]
      : pool.unservable.length
        ? ["True", "EntriesUnservable", `serves its other entries; cannot serve ${pool.unservable.join("; ")}${taken}`]
        : inUse.length
          ? ["True", "AddressesInUse", `serves its addresses${taken}`]
          : ["True", "Serving", "serves its addresses"];
  const lastTransitionTime =
    current?.status === status ? current.lastTransitionTime : now.toISOString().replace(/\.\d+Z$/, "Z");
  return { type: "Ready", status, reason, message, lastTransitionTime, observedGeneration: pool.generation };
}

/** Whether a written status says the same (a condition's lastTransitionTime aside). */
export function sameStatus(current: PoolStatus | undefined, wanted: PoolStatus): boolean {
  if (!current) return false;
  const text = ({ size, used, free, conflicts = [], retained = [], conditions = [] }: PoolStatus) =>
    JSON.stringify([
      size,
      used,
      free,
      conflicts,
      retained,
      conditions.map(({ type, status, reason, message, observedGeneration }) => [
        type,
        status,
        reason,
        message,
        observedGeneration,
      ]),
    ]);
  return text(current) === text(wanted);
}
