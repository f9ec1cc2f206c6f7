// A containerd of its own: root, state, socket and log under one folder, so several run side by side (one per
// node: a shared one shows each kubelet the other's pods) and none touches the machine's own containerd.
// It dies with the process that started it (`setpriv --pdeathsig KILL`), also when that one is killed,
// unless detached; a cluster node's runs in the node's network namespace (CNI sets pods up there).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { sleep } from "../src/time/backoff.ts";
import { run } from "./exec.ts";
import { logTail, running, type Service, startService, stopService } from "./service.ts";

export interface ContainerdOptions {
  /** Holds config.toml, root/, state/, containerd.sock and containerd.log. */
  dir: string;
  /** TOML appended to the config, e.g. the CRI plugin's settings for a kubelet; without it CRI is off. */
  config?: string;
  /** Network namespace to run in (a path such as /run/netns/x). */
  netns?: string;
  detached?: boolean;
}

export interface Containerd {
  socket: string;
  service: Service;
  /** Runs `ctr --address <socket> args…` and resolves with its output. */
  ctr(args: string[]): Promise<string>;
  /** Stops containerd and unmounts what it left mounted under its folder (the caller removes the folder). */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 20_000;

export async function startContainerd(options: ContainerdOptions): Promise<Containerd> {
  const dir = path.resolve(options.dir);
  const socket = path.join(dir, "containerd.sock");
  mkdirSync(dir, { recursive: true });
  const config = [
    "version = 2",
    `root = ${JSON.stringify(path.join(dir, "root"))}`,
    `state = ${JSON.stringify(path.join(dir, "state"))}`,
    options.config === undefined ? 'disabled_plugins = ["io.containerd.grpc.v1.cri"]' : "",
    `[grpc]\n  address = ${JSON.stringify(socket)}`,
    options.config ?? "",
  ];
  writeFileSync(path.join(dir, "config.toml"), `${config.filter(Boolean).join("\n")}\n`);
  const service = startService("containerd", "containerd", ["--config", "config.toml"], {
    dir,
    netns: options.netns,
    detached: options.detached,
  });
  const ctr = (args: string[]) => run("ctr", ["--address", socket, ...args]);
  const stop = async () => {
    await stopService(service, 10_000);
    await unmountUnder(dir);
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (await ctr(["version"]).then(() => true, () => false)) return { socket, service, ctr, stop };
    if (!running(service) || Date.now() > deadline) {
      await stop();
      throw new Error(`containerd in ${dir} did not start:\n${await logTail(service)}`);
    }
    await sleep(100);
  }
}

/** Mount points at or under `dir`, deepest first. */
export function mountPointsUnder(dir: string): string[] {
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" ")[4]?.replace(/\\040/g, " "))
    .filter((point): point is string => point !== undefined && (point === dir || point.startsWith(`${dir}/`)))
    .sort((a, b) => b.length - a.length);
}

/** Unmounts every mount under `dir`, deepest first (snapshots and shims a killed containerd left). */
export async function unmountUnder(dir: string): Promise<void> {
  for (const point of mountPointsUnder(dir)) await run("umount", ["--lazy", point]);
}
