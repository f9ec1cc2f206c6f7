/** The q-quantile (0 < q ≤ 1) of values sorted ascending: the smallest value at least q of them do not exceed. */
export function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number;
}
