// Durations as Go writes them (time.Duration): parsed from flags, printed in logs, Events and messages.

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3, // U+00B5 micro sign
  μs: 1e-3, // U+03BC Greek mu
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const DURATION = /^[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$/;
const DURATION_PART = /(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)/g;

/** Go's time.ParseDuration ("1m30s", "1.5h", "-2s", "0") in milliseconds; undefined when malformed. */
export function parseDuration(text: string): number | undefined {
  if (/^[-+]?0$/.test(text)) return 0;
  if (!DURATION.test(text)) return undefined;
  let ms = 0;
  for (const [, amount, unit] of text.matchAll(DURATION_PART))
    ms += Number(amount) * (UNIT_MS[unit ?? ""] ?? 0);
  ms = Math.round(ms * 1e6) / 1e6; // whole nanoseconds, as Go keeps them
  return text.startsWith("-") ? -ms : ms;
}

/** Go's time.Duration format at millisecond precision: 500ms, 1.5s, 2m10s, 5m0s, 1h0m0s. */
export function formatDuration(ms: number): string {
  if (ms < 0) return `-${formatDuration(-ms)}`;
  if (ms < 1000) return ms === 0 ? "0s" : `${Number(ms.toFixed(3))}ms`;
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  const seconds = `${Number(((ms % 60_000) / 1000).toFixed(3))}s`;
  if (hours) return `${hours}h${minutes}m${seconds}`;
  return minutes ? `${minutes}m${seconds}` : seconds;
}
