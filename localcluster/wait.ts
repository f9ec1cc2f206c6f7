// Bounded polling for tests, benchmarks and the demo: every wait has a limit and says what it waited
// for when it fails.
import { setTimeout as delay } from "node:timers/promises";

export async function waitFor<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined && value !== null && value !== false) return value;
    } catch (err) {
      lastError = err;
    }
    await delay(intervalMs);
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${(lastError as Error).message})` : ""}`,
  );
}

/** Waits until `read` gives `expected` (compared as JSON), and says what it last saw when it never does. */
export async function waitForEqual<T>(
  what: string,
  read: () => Promise<T>,
  expected: T,
  timeoutMs = 20_000,
): Promise<void> {
  let last: T | undefined;
  try {
    await waitFor(what, async () => JSON.stringify((last = await read())) === JSON.stringify(expected), timeoutMs);
  } catch (err) {
    throw new Error(`${(err as Error).message}; last seen ${JSON.stringify(last)}`, { cause: err });
  }
}
