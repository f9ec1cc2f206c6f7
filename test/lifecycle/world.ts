// A world for the node-lifecycle-controller, shared by its integration tests and its benchmark:
// a real control plane, the shipped RBAC and admission policies applied, and a "prober" network
// namespace where the controller runs. The prober reaches the apiserver over a veth to the root
// namespace, and test hosts over one veth each:
//   root 198.19.<s>.1/30 ── 198.19.<s>.2/30 prober 198.18.<n>.1/24 ── 198.18.<n>.2/24 host n
// (<s>: the subnet given.) An address like 198.18.<n>.9 is on a link but no host has it: it never answers.
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import type { Event, Node } from "kubernetes-types/core/v1.js";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { auditedRequests as requestsInAuditLog } from "../../localcluster/audit.ts";
import { onExit } from "../../localcluster/cleanup.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { createNetwork, type Host, type Network } from "../netns/netns.ts";
import { startKubeletListener } from "../netns/listener.ts";
import { waitFor } from "../../localcluster/wait.ts";

const ROOT = path.resolve(import.meta.dirname, "../..");
export const RBAC_FILE = path.join(ROOT, "deploy/nlc-rbac.yaml");
/** The admission policies that limit its deletions and Lease creation, applied beside the RBAC. */
export const POLICY_FILE = path.join(ROOT, "deploy/nlc-policy.yaml");
export const PROGRAM_TS = path.join(ROOT, "src/bin/node-lifecycle-controller.ts");
export const SERVICE_ACCOUNT = { namespace: "kube-system", name: "node-lifecycle-controller" };
export const USER_AGENT_COMPONENT = "(node-lifecycle-controller)";
export const AUTOSCALER_TAINT = { key: "ToBeDeletedByClusterAutoscaler", effect: "NoSchedule" };

export interface World {
  plane: ControlPlane;
  net: Network;
  prober: Host;
  /** The prober's address on its root link: where a health server in the prober is reachable. */
  proberIP: string;
  /** The apiserver's URL as the prober reaches it. */
  server: string;
  /** A kubeconfig for the shipped service account, pointing at `server`. */
  kubeconfig: string;
  nodes: Resource<Node>;
  events: Resource<Event>;
  /** A host on its own link: "echo" answers ICMP only, "tcp" answers TCP on 10250 only. Returns its IP. */
  addHost(kind: "echo" | "tcp"): Promise<string>;
  /** An address no host has, on a link of the prober (ARP goes unanswered). */
  deadAddress(): Promise<string>;
  stop(): Promise<void>;
}

/**
 * `subnet` picks 198.19.<subnet>.0/30 for the root link: one per test file (root is shared). `serviceCIDR`: room
 * for more than 253 Services.
 */
export async function startWorld(options: { subnet: number; audit?: boolean; serviceCIDR?: string }): Promise<World> {
  const rootIP = `198.19.${options.subnet}.1`;
  const proberIP = `198.19.${options.subnet}.2`;
  const net = await createNetwork();
  const listeners: ChildProcess[] = [];
  let plane: ControlPlane | undefined;
  try {
    const prober = await net.host();
    await net.link("root", prober, { addressesA: [`${rootIP}/30`], addressesB: [`${proberIP}/30`] });
    plane = await startControlPlane({ extraIPs: [rootIP], audit: options.audit, serviceCIDR: options.serviceCIDR });
    await plane.kubectl(["apply", "-f", RBAC_FILE, "-f", POLICY_FILE]);
    const server = plane.serverAt(rootIP);
    const kubeconfig = await plane.serviceAccountKubeconfig({ ...SERVICE_ACCOUNT, server });
    let links = 0;
    let deadLink: number | undefined;
    const link = async () => {
      const n = ++links;
      const host = await net.host();
      await net.link(prober, host, { addressesA: [`198.18.${n}.1/24`], addressesB: [`198.18.${n}.2/24`] });
      return { host, n };
    };
    const started = plane;
    return {
      plane,
      net,
      prober,
      proberIP,
      server,
      kubeconfig,
      nodes: new Resource<Node>(plane.admin, NODE_RESOURCE),
      events: new Resource<Event>(plane.admin, {
        group: "",
        version: "v1",
        plural: "events",
        namespace: "default",
      }),
      async addHost(kind) {
        const { host, n } = await link();
        if (kind === "echo") {
          // ICMP answers; TCP to the kubelet port gets no answer at all (not even a reset).
          for (const family of ["-4", "-6"])
            await host.ip(family, "rule", "add", "ipproto", "tcp", "sport", "10250", "blackhole");
        } else {
          for (const sysctl of ["net.ipv4.icmp_echo_ignore_all=1", "net.ipv6.icmp.echo_ignore_all=1"])
            await host.exec("sysctl", ["-qw", sysctl]);
          listeners.push(await startKubeletListener(host));
        }
        return `198.18.${n}.2`;
      },
      async deadAddress() {
        deadLink ??= (await link()).n;
        return `198.18.${deadLink}.9`;
      },
      async stop() {
        for (const listener of listeners) listener.kill("SIGKILL");
        await started.stop();
        await net.remove();
      },
    };
  } catch (err) {
    for (const listener of listeners) listener.kill("SIGKILL");
    await plane?.stop();
    await net.remove();
    throw err;
  }
}

/**
 * Flags for a controller under test: the world's kubeconfig and health address, the given timings,
 * quick probes (2 × 300 ms) and, unless `leaderElect` is false, a quick leader election (4s/3s/500ms).
 */
export function controllerFlags(
  world: World,
  timing: { notReadyTimeout: string; reconcileInterval: string; leaderElect?: boolean },
  ...extra: string[]
): string[] {
  const leaderElection =
    timing.leaderElect === false
      ? ["--leader-elect=false"]
      : ["--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"];
  return [
    `--kubeconfig=${world.kubeconfig}`,
    `--not-ready-timeout=${timing.notReadyTimeout}`,
    `--reconcile-interval=${timing.reconcileInterval}`,
    "--ping-timeout=300ms",
    "--ping-count=2",
    ...leaderElection,
    "--v=2",
    // Metrics as before secure metrics: plain, at the health address (tests scrape them there).
    `--health-bind-address=${world.proberIP}:0`,
    `--metrics-bind-address=${world.proberIP}:0`,
    "--secure-metrics=false",
    ...extra,
  ];
}

/** The time `ms` ago as the API keeps it (whole seconds), so that a test computes the controller's expiry. */
export function apiTimeAgo(ms: number): Date {
  return new Date(Math.floor((Date.now() - ms) / 1000) * 1000);
}

export interface NodeSpec {
  address: string;
  /** Default: the autoscaler's taint. */
  tainted?: boolean;
  /** Ready condition status; default Unknown (kubelet gone). */
  ready?: "True" | "False" | "Unknown";
  /** lastTransitionTime of the Ready condition; default now. */
  since?: Date;
  labels?: Record<string, string>;
}

/** A Node as kubelet would have registered it, with its Ready condition as `spec` says. */
export function nodeObject(name: string, spec: NodeSpec): Node {
  const since = (spec.since ?? new Date()).toISOString();
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, labels: { "kubernetes.io/hostname": name, ...spec.labels } },
    spec: { taints: spec.tainted === false ? [] : [{ ...AUTOSCALER_TAINT, value: "1" }] },
    status: {
      addresses: [
        { type: "InternalIP", address: spec.address },
        { type: "Hostname", address: name },
      ],
      conditions: [
        {
          type: "Ready",
          status: spec.ready ?? "Unknown",
          reason: spec.ready === "True" ? "KubeletReady" : "NodeStatusUnknown",
          lastHeartbeatTime: since,
          lastTransitionTime: since,
        },
      ],
    },
  };
}

/** Sets the Ready condition through the status subresource, as the node controller or kubelet would. */
export async function setReady(world: World, name: string, ready: NodeSpec["ready"]): Promise<void> {
  const now = new Date().toISOString();
  const condition = { type: "Ready", status: ready, lastHeartbeatTime: now, lastTransitionTime: now };
  const patch = { status: { conditions: [condition] } };
  await world.nodes.patch(name, "strategic", patch, { subresource: "status" });
}

export interface LogLine {
  ts?: string;
  level?: string;
  msg: string;
  [field: string]: unknown;
}

/** The controller as a process in the prober namespace, logging JSON lines that the test reads. */
export class ControllerProcess {
  readonly lines: LogLine[] = [];
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  private readonly forget: () => void;

  /**
   * `world.prober`: the namespace to run in (none: this one); `entry`: the program file (default the .ts entry
   * point); `nodeArgs`: flags for node itself.
   */
  constructor(
    world: { prober?: Pick<Host, "wrap"> },
    args: string[],
    options: { env?: NodeJS.ProcessEnv; entry?: string; nodeArgs?: string[] } = {},
  ) {
    const wrap = world.prober?.wrap ?? ((command: string, rest: string[]): [string, string[]] => [command, rest]);
    const [command, argv] = wrap("setpriv", [
      "--pdeathsig",
      "KILL",
      "--",
      process.execPath,
      ...(options.nodeArgs ?? []),
      options.entry ?? PROGRAM_TS,
      "--log-format=json",
      ...args,
    ]);
    this.child = spawn(command, argv, {
      env: { ...process.env, ...options.env },
      stdio: ["ignore", "inherit", "pipe"],
    });
    this.forget = onExit(() => this.child.kill("SIGKILL"));
    this.exited = new Promise((resolve) =>
      this.child.once("exit", (code) => {
        this.forget();
        resolve(code);
      }),
    );
    let buffer = "";
    this.child.stderr?.on("data", (chunk: Buffer) => {
      buffer += chunk;
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        const line = buffer.slice(0, i);
        buffer = buffer.slice(i + 1);
        try {
          this.lines.push(JSON.parse(line) as LogLine);
        } catch {
          this.lines.push({ msg: line }); // the one-line error of a failed start is not JSON
        }
      }
    });
  }

  get pid(): number {
    return this.child.pid as number;
  }

  find(msg: string, fields: Record<string, unknown> = {}): LogLine[] {
    return this.lines.filter(
      (line) => line.msg === msg && Object.entries(fields).every(([key, value]) => line[key] === value),
    );
  }

  waitForLog(msg: string, fields: Record<string, unknown> = {}, timeoutMs = 30_000): Promise<LogLine> {
    return waitFor(
      `log line "${msg}" ${JSON.stringify(fields)} (last lines: ${this.tail()})`,
      () => this.find(msg, fields)[0],
      timeoutMs,
    );
  }

  tail(): string {
    return this.lines
      .slice(-5)
      .map((line) => line.msg)
      .join(" | ");
  }

  /** SIGTERM, and the exit code once it has shut down (SIGKILL after 20 s). */
  async stop(): Promise<number | null> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.child.exitCode;
    this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 20_000);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

/** The controller's requests in the audit log (received in [since, until)), as "verb resource" → count. */
export function auditedRequests(world: World, since?: Date, until?: Date): Promise<Map<string, number>> {
  return requestsInAuditLog(world.plane.auditLogPath as string, { userAgentSuffix: USER_AGENT_COMPONENT, since, until });
}

/** Events about a node, as "reason: message". */
export async function eventsAbout(world: World, node: string): Promise<string[]> {
  const { items } = await world.events.list({ fieldSelector: `involvedObject.name=${node}` });
  return items.map((event) => `${event.reason}: ${event.message}`);
}
