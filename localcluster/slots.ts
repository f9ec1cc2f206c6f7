// A cluster's slot on this machine: claimed with a record in /run/local-ccm-clusters/, and everything the cluster
// made removed from that record alone (stop(), `down`, the exit hook, or the next start when its owner was
// killed), a node's power loss, and what is left, for tests. Synchronous: teardown also runs from the exit hook.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { cgroupHierarchies, killAll, processesInCgroups, processesUnder, removeCgroups } from "./cgroups.ts";
import { mountPointsUnder } from "./containerd.ts";
import { alive, quietly, sh } from "./exec.ts";
import { clusterLayout, MAX_NODES, MAX_SLOTS, type NodeLayout } from "./layout.ts";

const REGISTRY = "/run/local-ccm-clusters";

/** What /run/local-ccm-clusters/<slot>.json holds: enough to remove the cluster without its process. */
export interface ClusterRecord {
  slot: number;
  dir: string;
  /** The process the cluster dies with; null when detached (only `down` removes it). */
  owner: number | null;
  nodes: NodeLayout[];
}

const recordPath = (slot: number) => path.join(REGISTRY, `${slot}.json`);

export function readRecord(slot: number): ClusterRecord | undefined {
  try {
    return JSON.parse(readFileSync(recordPath(slot), "utf8")) as ClusterRecord;
  } catch {
    return undefined;
  }
}

/** Claims the first free slot (exclusive create, so concurrent starts never share one). */
export function claimSlot(record: Omit<ClusterRecord, "slot">): ClusterRecord {
  mkdirSync(REGISTRY, { recursive: true });
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    try {
      writeFileSync(recordPath(slot), JSON.stringify({ ...record, slot }), { flag: "wx" });
      return { ...record, slot };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
  throw new Error(`all ${MAX_SLOTS} cluster slots are in use (npm run cluster -- down removes a detached one)`);
}

export function writeRecord(record: ClusterRecord): void {
  writeFileSync(recordPath(record.slot), JSON.stringify(record));
}

/** Removes the clusters whose owner process is gone (killed tests); detached ones stay. */
export function removeLeftovers(): number[] {
  const removed: number[] = [];
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    const record = readRecord(slot);
    if (record && record.owner !== null && !alive(record.owner)) {
      removeCluster(record);
      removed.push(slot);
    }
  }
  return removed;
}

/** A node's power loss: its processes (by folder and by cgroup) killed and its link down. */
export function powerOff(dir: string, node: NodeLayout): void {
  const nodeDir = path.join(dir, "nodes", node.name);
  killAll(() => [...processesUnder(nodeDir), ...processesInCgroups(node.cgroup)]);
  quietly("ip", ["link", "set", node.rootVeth, "down"]);
}

/** Removes everything of a cluster: processes, cgroups, mounts, namespaces, rule, bridge, folder, record. */
export function removeCluster(record: ClusterRecord): void {
  const layout = clusterLayout(record.slot);
  killAll(() => processesUnder(record.dir));
  // Cgroups by prefix, not by the record's node list: a start killed before it wrote a node still made them.
  const cgroups = new Set(
    cgroupHierarchies().flatMap((h) => readdirSync(h).filter((name) => name.startsWith(layout.prefix))),
  );
  for (const cgroup of cgroups) killAll(() => processesInCgroups(cgroup));
  for (const cgroup of cgroups) removeCgroups(cgroup);
  for (const point of mountPointsUnder(record.dir)) quietly("umount", ["--lazy", point]);
  for (const name of sh("ip", ["netns", "list"]).split("\n").map((line) => line.split(" ")[0] ?? ""))
    if (name.startsWith(layout.prefix)) quietly("ip", ["netns", "delete", name]);
  for (let i = 0; i < MAX_NODES; i++) quietly("ip", ["link", "delete", `lccm${record.slot}v${i}`]);
  quietly("ip", ["link", "delete", layout.clientVeth]);
  while (sh("ip", ["rule", "list"]).includes(`lookup ${layout.table}`))
    sh("ip", ["rule", "del", "iif", layout.bridge, "lookup", String(layout.table)]);
  quietly("ip", ["route", "flush", "table", String(layout.table)]);
  quietly("ip", ["link", "delete", layout.bridge]);
  rmSync(record.dir, { recursive: true, force: true });
  rmSync(recordPath(record.slot), { force: true });
}

/** `kill-node` for a detached cluster: the same power loss, from its record. */
export function killRecordedNode(record: ClusterRecord, name: string): void {
  const node = record.nodes.find((n) => n.name === name);
  if (!node) throw new Error(`no node ${name} (nodes: ${record.nodes.map((n) => n.name).join(", ")})`);
  powerOff(record.dir, node);
}

/** The record of the cluster kept in `dir`, if one is running there. */
export function recordFor(dir: string): ClusterRecord | undefined {
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    const record = readRecord(slot);
    if (record && path.resolve(record.dir) === path.resolve(dir)) return record;
  }
  return undefined;
}

/**
 * Used by tests to prove nothing is left: what of the cluster that ran in slot `slot` from `dir` still
 * exists on this machine. Once another cluster holds the slot (a parallel test started one), the
 * slot's names are its own: only what lives under `dir` is checked then.
 */
export function leftoversOf(slot: number, dir: string): string[] {
  const found: string[] = [];
  const successor = readRecord(slot);
  if (!successor || path.resolve(successor.dir) === path.resolve(dir)) found.push(...slotLeftovers(slot));
  for (const pid of processesUnder(dir)) found.push(`process ${pid}`);
  for (const point of mountPointsUnder(dir)) found.push(`mount ${point}`);
  if (existsSync(dir) && statSync(dir).isDirectory()) found.push(`folder ${dir}`);
  return found;
}

/** What carries slot `slot` in its name: bridge, namespaces, cgroups, rule, record. */
function slotLeftovers(slot: number): string[] {
  const layout = clusterLayout(slot);
  const found: string[] = [];
  if (existsSync(`/sys/class/net/${layout.bridge}`)) found.push(`bridge ${layout.bridge}`);
  for (const name of sh("ip", ["netns", "list"]).split("\n").map((l) => l.split(" ")[0] ?? ""))
    if (name.startsWith(layout.prefix)) found.push(`netns ${name}`);
  for (const hierarchy of cgroupHierarchies())
    for (const name of readdirSync(hierarchy))
      if (name.startsWith(layout.prefix)) found.push(`cgroup ${hierarchy}/${name}`);
  if (sh("ip", ["rule", "list"]).includes(`lookup ${layout.table}`)) found.push(`rule lookup ${layout.table}`);
  if (existsSync(recordPath(slot))) found.push(`record ${recordPath(slot)}`);
  return found;
}
