// Process memory as the kernel counts it, for the benchmarks.
import { readFileSync } from "node:fs";

export interface ProcessMemory {
  /** Resident set (VmRSS), bytes. */
  rss: number;
  /** Anonymous part of it (RssAnon: heap and stacks, not the mapped node binary), bytes. */
  anon: number;
  /** Peak resident set (VmHWM), bytes. */
  peak: number;
}

export function processMemory(pid: number | "self" = "self"): ProcessMemory {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const bytes = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? Number.NaN) * 1024;
  return { rss: bytes("VmRSS"), anon: bytes("RssAnon"), peak: bytes("VmHWM") };
}
