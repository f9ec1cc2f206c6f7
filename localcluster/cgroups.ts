// A node's cgroup root in every hierarchy, and finding and killing processes by cgroup or by folder (a node's, a
// cluster's). Synchronous: teardown also runs from the exit hook.
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { NodeLayout } from "./layout.ts";

const CGROUP_ROOT = "/sys/fs/cgroup";
const pause = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Every v1 hierarchy and the unified one, as mounted on this machine kind. */
export function cgroupHierarchies(): string[] {
  return readdirSync(CGROUP_ROOT)
    .map((name) => path.join(CGROUP_ROOT, name))
    .filter((dir) => existsSync(path.join(dir, "cgroup.procs")));
}

/** Processes started from or working in `dir` (kubelet, containerd and its shims, the control plane). */
export function processesUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      if (cmdline.includes(`${dir}/`) || cwd === dir || cwd.startsWith(`${dir}/`)) pids.push(pid);
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** The cgroup folders under `top`, deepest first. */
function cgroupTree(top: string): string[] {
  const below = readdirSync(top, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .flatMap((entry) => cgroupTree(path.join(top, entry.name)));
  return [...below, top];
}

/** Processes in the cgroups of `cgroup` (a node's root) in any hierarchy: pods' containers. */
export function processesInCgroups(cgroup: string): number[] {
  const pids = new Set<number>();
  for (const hierarchy of cgroupHierarchies()) {
    const top = path.join(hierarchy, cgroup);
    if (!existsSync(top)) continue;
    for (const folder of cgroupTree(top)) {
      for (const line of readFileSync(path.join(folder, "cgroup.procs"), "utf8").split("\n"))
        if (line) pids.add(Number(line));
    }
  }
  return [...pids];
}

export function killAll(find: () => number[]): void {
  for (let round = 0; round < 50; round++) {
    const pids = find();
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // exited meanwhile
      }
    }
    pause(100);
  }
  throw new Error(`processes survive SIGKILL: ${find().join(", ")}`);
}

export function removeCgroups(cgroup: string): void {
  for (const hierarchy of cgroupHierarchies()) {
    const top = path.join(hierarchy, cgroup);
    if (!existsSync(top)) continue;
    for (const folder of cgroupTree(top)) {
      // A cgroup whose last process just died may still be busy for a moment.
      for (let attempt = 0; ; attempt++) {
        try {
          rmdirSync(folder);
          break;
        } catch (err) {
          if (attempt >= 50) throw err;
          pause(100);
        }
      }
    }
  }
}

/** The node's cgroup root in every hierarchy, made before kubelet starts (kubelet requires it). */
export function createCgroups(node: NodeLayout): void {
  for (const hierarchy of cgroupHierarchies()) {
    const dir = path.join(hierarchy, node.cgroup);
    mkdirSync(dir, { recursive: true });
    // A v1 cpuset cgroup starts with no CPUs and no memory nodes: nothing could join it.
    for (const file of ["cpuset.cpus", "cpuset.mems"]) {
      const parent = path.join(hierarchy, file);
      if (existsSync(parent)) writeFileSync(path.join(dir, file), readFileSync(parent, "utf8"));
    }
  }
}
