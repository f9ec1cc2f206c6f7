// A containerd of its own: root, state, socket and log under one folder, so several run side by side (one per
// node: a shared one shows each kubelet the other's pods) and none touches the machine's own containerd.
// It dies with the process that started it (`setpriv --pdeathsig KILL`), also when that one is killed.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { sleep } from "../src/kube/backoff.ts";
import { run } from "./exec.ts";

export interface ContainerdOptions {
  /** Holds config.toml, root/, state/, containerd.sock and containerd.log. */
  dir: string;
  /** TOML appended to the config, e.g. the CRI plugin's settings for a kubelet; without it CRI is off. */
  config?: string;
}

export interface Containerd {
  socket: string;
  /** Runs `ctr --address <socket> args…` and resolves with its output. */
  ctr(args: string[]): Promise<string>;
  /** Stops containerd and unmounts what it left mounted under its folder (the caller removes the folder). */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 20_000;

/** One line naming what is missing, or undefined when containerd and ctr are installed. */
export function containerdMissing(): string | undefined {
  const missing = ["containerd", "ctr"].filter(
    (tool) => !["/usr/bin", "/usr/local/bin", "/usr/sbin"].some((dir) => existsSync(path.join(dir, tool))),
  );
  return missing.length === 0 ? undefined : `needs ${missing.join(" and ")}: apt-get install containerd runc`;
}

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
  const logPath = path.join(dir, "containerd.log");
  const log = openSync(logPath, "a");
  const child = spawn("setpriv", ["--pdeathsig", "KILL", "--", "containerd", "--config", "config.toml"], {
    cwd: dir,
    stdio: ["ignore", log, log],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const ctr = (args: string[]) => run("ctr", ["--address", socket, ...args]);
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      if (!(await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]))) child.kill("SIGKILL");
      await exited;
    }
    await unmountUnder(dir);
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (await ctr(["version"]).then(() => true, () => false)) return { socket, ctr, stop };
    const tail = () => readFileSync(logPath, "utf8").trim().split("\n").slice(-5).join("\n");
    if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`containerd in ${dir} did not start:\n${tail()}`);
    }
    await sleep(100);
  }
}

/** Unmounts every mount under `dir`, deepest first (snapshots and shims a killed containerd left). */
export async function unmountUnder(dir: string): Promise<void> {
  const mounts = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" ")[4]?.replace(/\\040/g, " "))
    .filter((point): point is string => point !== undefined && (point === dir || point.startsWith(`${dir}/`)))
    .sort((a, b) => b.length - a.length);
  for (const point of mounts) await run("umount", ["--lazy", point]);
}
