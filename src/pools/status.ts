// A pool's status, as a pure function of every pool, what allocate() left in use and the Nodes' addresses: its
// size, used and free counts, and its conflicts (a bad entry, another pool's overlap, a Node's address inside it).
import type { PoolFacts, PoolStatus } from "./pool.ts";
import { poolHolds } from "./allocate.ts";
import { formatRange, intersection, ipNumber, rangeSize } from "./ranges.ts";

/** Conflicts listed per pool, at most: the status of a pool overlapping hundreds of others stays small. */
export const MAX_CONFLICTS = 20;

export function poolStatus(
  pool: PoolFacts,
  pools: readonly PoolFacts[],
  used: ReadonlySet<string>,
  nodeAddresses: ReadonlyMap<string, string>,
): PoolStatus {
  const conflicts = pool.problem === undefined ? [] : [`serves nothing: ${pool.problem}`];
  for (const other of pools) {
    if (other.name === pool.name) continue;
    for (const mine of pool.ranges)
      for (const theirs of other.ranges) {
        const common = intersection(mine, theirs);
        if (common) conflicts.push(`overlaps pool ${other.name} at ${formatRange(common)}`);
      }
  }
  let nodeInside = 0n;
  for (const [ip, node] of nodeAddresses) {
    const number = ipNumber(ip);
    if (!number || !poolHolds(pool, number.family, number.value)) continue;
    nodeInside++;
    conflicts.push(`holds ${ip}, an address of node ${node}: never handed out`);
  }
  const size = pool.ranges.reduce((sum, range) => sum + rangeSize(range, pool.avoidBuggyIps), 0n);
  const usedCount = BigInt(used.size);
  const free = pool.problem === undefined ? size - usedCount - nodeInside : 0n;
  const shown =
    conflicts.length > MAX_CONFLICTS
      ? [...conflicts.slice(0, MAX_CONFLICTS - 1), `and ${conflicts.length - MAX_CONFLICTS + 1} more`]
      : conflicts;
  return { size: String(size), used: String(usedCount), free: String(free < 0n ? 0n : free), conflicts: shown };
}

/** Whether a written status says the same. */
export function sameStatus(current: PoolStatus | undefined, wanted: PoolStatus): boolean {
  if (!current) return false;
  const text = ({ size, used, free, conflicts = [] }: PoolStatus) => JSON.stringify([size, used, free, conflicts]);
  return text(current) === text(wanted);
}
