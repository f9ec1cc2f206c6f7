// Process memory and CPU time as the kernel counts them, for the benchmarks.
import { execFileSync } from "node:child_process";
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

let ticksPerSecond: number | undefined;

/** User + system CPU time of a process in seconds (fields 14 and 15 of /proc/<pid>/stat, in clock ticks). */
export function cpuSeconds(pid: number): number {
  ticksPerSecond ??= Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }));
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
}
