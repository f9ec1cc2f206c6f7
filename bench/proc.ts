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

/** The fields of /proc/<pid>/stat from the third (state) on (index i is field i + 3), and the clock ticks a second. */
function stat(pid: number): { fields: string[]; ticks: number } {
  ticksPerSecond ??= Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }));
  return { fields: readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [], ticks: ticksPerSecond };
}

/** User + system CPU time of a process in seconds (fields 14 and 15 of /proc/<pid>/stat, in clock ticks). */
export function cpuSeconds(pid: number): number {
  const { fields, ticks } = stat(pid);
  return (Number(fields[11]) + Number(fields[12])) / ticks;
}

/** When a process started, in seconds since boot (field 22 of /proc/<pid>/stat; CLOCK_BOOTTIME, in clock ticks). */
export function startedSinceBoot(pid: number): number {
  const { fields, ticks } = stat(pid);
  return Number(fields[19]) / ticks;
}

/** Now, in seconds since boot (/proc/uptime: the clock process start times count, to 10 ms). */
export const secondsSinceBoot = (): number => Number(readFileSync("/proc/uptime", "utf8").split(" ")[0]);

/**
 * A process's anonymous memory by where it lives (/proc/<pid>/smaps), bytes: `brk`, the [heap] segment (glibc's main
 * malloc arena), and `mapped`, every other anonymous mapping (V8's heap pages, other threads' arenas, stacks).
 */
export function anonymousBySegment(pid: number): { brk: number; mapped: number } {
  let segment = "";
  const bytes = { brk: 0, mapped: 0 };
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) segment = line.trim().split(/\s+/)[5] ?? "";
    const anonymous = /^Anonymous:\s+(\d+) kB/.exec(line)?.[1];
    if (anonymous) bytes[segment === "[heap]" ? "brk" : "mapped"] += Number(anonymous) * 1024;
  }
  return bytes;
}
