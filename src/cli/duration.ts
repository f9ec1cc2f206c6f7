// Durations as Go reads and writes them (time.ParseDuration, time.Duration.String): parsed from flags, printed in
// logs, Events and messages. Go counts whole nanoseconds in an int64; so do these, in a bigint, step for step
// (test/oracle/duration.test.ts compares them with Go on generated text).

const UNIT_NS = new Map<string, bigint>([
  ["ns", 1n],
  ["us", 1_000n],
  ["µs", 1_000n], // U+00B5 micro sign
  ["μs", 1_000n], // U+03BC Greek mu
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);
const LIMIT = 1n << 63n; // Go accumulates in a uint64 and refuses anything above 2^63
const isDigit = (char: string | undefined) => char !== undefined && char >= "0" && char <= "9";

/**
 * Go's time.ParseDuration ("1m30s", "1.5h", "-2s", "0", ".5us") in nanoseconds; undefined where Go returns an
 * error, overflow included. A fraction adds as Go adds it: through a float64, truncated towards zero.
 */
export function parseDurationNs(text: string): bigint | undefined {
  let at = 0;
  const negative = text[0] === "-";
  if (negative || text[0] === "+") at++;
  if (text.slice(at) === "0") return 0n;
  if (at === text.length) return undefined;
  let total = 0n;
  while (at < text.length) {
    if (text[at] !== "." && !isDigit(text[at])) return undefined;
    const start = at;
    let whole = 0n;
    for (; isDigit(text[at]); at++) {
      whole = whole * 10n + BigInt(Number(text[at]));
      if (whole > LIMIT) return undefined;
    }
    const hasWhole = at > start;
    let [fraction, scale, hasFraction] = [0n, 1, false];
    if (text[at] === ".") {
      at++;
      let full = false; // Go stops adding digits (it does not fail) once the fraction would pass 2^63
      for (hasFraction = isDigit(text[at]); isDigit(text[at]); at++) {
        const next = fraction * 10n + BigInt(Number(text[at]));
        if (full || next > LIMIT) full = true;
        else [fraction, scale] = [next, scale * 10];
      }
    }
    if (!hasWhole && !hasFraction) return undefined; // ".s"
    const unitStart = at;
    while (at < text.length && text[at] !== "." && !isDigit(text[at])) at++;
    const unit = UNIT_NS.get(text.slice(unitStart, at));
    if (unit === undefined) return undefined;
    if (whole > LIMIT / unit) return undefined;
    let value = whole * unit;
    if (fraction > 0n) {
      value += BigInt(Math.trunc(Number(fraction) * (Number(unit) / scale)));
      if (value > LIMIT) return undefined;
    }
    total += value;
    if (total > LIMIT) return undefined;
  }
  if (negative) return -total;
  return total > LIMIT - 1n ? undefined : total;
}

/** Go's time.ParseDuration in milliseconds (the nearest double to its nanoseconds / 1e6); undefined when Go errs. */
export function parseDuration(text: string): number | undefined {
  const ns = parseDurationNs(text);
  return ns === undefined ? undefined : Number(ns) / 1e6;
}

/** Go's time.Duration.String(): 0s, 500ns, 1.5µs, 500ms, 1.5s, 2m10s, 5m0s, 1h0m0s. */
export function formatDurationNs(ns: bigint): string {
  if (ns < 0n) return `-${formatDurationNs(-ns)}`;
  if (ns === 0n) return "0s";
  if (ns < 1_000n) return `${ns}ns`;
  if (ns < 1_000_000n) return `${decimal(ns, 3)}µs`;
  if (ns < 1_000_000_000n) return `${decimal(ns, 6)}ms`;
  const seconds = `${decimal(ns % 60_000_000_000n, 9)}s`;
  const minutes = ns / 60_000_000_000n;
  if (minutes === 0n) return seconds;
  const hours = minutes / 60n;
  return hours ? `${hours}h${minutes % 60n}m${seconds}` : `${minutes}m${seconds}`;
}

/** `value` / 10^digits without trailing zeros (nor a trailing point), as Go's fmtFrac writes it. */
function decimal(value: bigint, digits: number): string {
  const base = 10n ** BigInt(digits);
  const fraction = (value % base).toString().padStart(digits, "0").replace(/0+$/, "");
  return fraction ? `${value / base}.${fraction}` : `${value / base}`;
}

/** Go's time.Duration.String() of a millisecond count (whole nanoseconds: ms rounded to 1e-6). */
export function formatDuration(ms: number): string {
  return formatDurationNs(BigInt(Math.round(ms * 1e6)));
}
