// Reachability of a node: ICMP echo to every address plus a TCP connect to the kubelet port, all
// at once. Any answer from any address means alive — a TCP reset too, since only a live host
// sends one. "Unreachable" is claimed only when every address was actually probed and nothing
// answered; a probe that could not run (no permission, no addon, IPv6 disabled) proves nothing.
import { connect, isIP } from "node:net";
import { type EchoOutcome, echo } from "./icmp.ts";
import { hostPort, uniqueIPs } from "./ip.ts";

export interface ProbeResult {
  /** False only when every address was probed and no probe got an answer. */
  alive: boolean;
  /** What answered, or what ran without answer: reused as the reason in logs and Events. */
  detail: string;
  /** ICMP could not run (no CAP_NET_RAW nor ping-socket permission, or no addon): TCP decided alone. */
  icmpUnavailable?: boolean;
  /** No probe could run on some address: nothing is proven, so alive is true and nothing is deleted. */
  inconclusive?: boolean;
}

export interface ProbeOptions {
  icmp: boolean;
  tcp: boolean;
  /** ICMP requests per address; TCP gets the same total time (the kernel retransmits SYNs itself). */
  pingCount: number;
  pingTimeoutMs: number;
  kubeletPort: number;
  /** Stops all probes (e.g. at shutdown): the result is then inconclusive unless something answered. */
  signal?: AbortSignal;
}

/** `how` says how the host answered, when that is worth telling (a refused connection). */
type ProbeOutcome = EchoOutcome & { how?: string };
type Outcome = ProbeOutcome & { probe: "icmp" | "tcp"; address: string };

/** Connection errors that are an answer from the host (it is alive). */
const HOST_ANSWERED: Record<string, string> = {
  ECONNREFUSED: "refused the connection (the host answered)",
  ECONNRESET: "reset the connection (the host answered)",
};
/** Errors that mean no answer reached us: the host is silent or there is no path to it. */
const NO_ANSWER = new Set(["ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "ENETDOWN"]);

function tcpConnect(
  address: string,
  port: number,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<ProbeOutcome> {
  if (signal.aborted) return Promise.resolve({ kind: "silent" });
  return new Promise((resolve) => {
    const socket = connect({ host: address, port });
    const finish = (outcome: ProbeOutcome) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      socket.destroy();
      resolve(outcome);
    };
    const onAbort = () => finish({ kind: "silent" });
    const timer = setTimeout(onAbort, timeoutMs);
    signal.addEventListener("abort", onAbort, { once: true });
    socket.once("connect", () => finish({ kind: "answered", how: "answered" }));
    socket.on("error", (err: NodeJS.ErrnoException) => {
      const code = err.code ?? "";
      if (HOST_ANSWERED[code]) finish({ kind: "answered", how: HOST_ANSWERED[code] });
      else if (NO_ANSWER.has(code)) finish({ kind: "silent" });
      else finish({ kind: "failed", reason: `tcp ${hostPort(address, port)}: ${err.message}` });
    });
  });
}

export async function probeNode(addresses: string[], options: ProbeOptions): Promise<ProbeResult> {
  // Never a name: resolving one would probe the resolver, not the node.
  const targets = uniqueIPs(addresses).filter((address) => isIP(address) !== 0);
  const notIPs = addresses.filter((address) => isIP(address) === 0);
  const { outcomes, winner } = await runProbes(targets, options);
  const flags = outcomes.some((outcome) => outcome.kind === "unavailable") ? { icmpUnavailable: true } : {};
  if (winner)
    return { alive: true, detail: `reachable: ${describeAnswer(winner, options.kubeletPort)}`, ...flags };

  const why = [
    ...new Set(outcomes.flatMap((outcome) => ("reason" in outcome ? [outcome.reason] : []))),
    ...notIPs.map((address) => `not an IP address: ${address}`),
    ...(options.icmp ? [] : ["icmp disabled"]),
    ...(options.tcp ? [] : ["tcp disabled"]),
  ].join("; ");
  const withWhy = (text: string) => (why ? `${text} (${why})` : text);
  const unprobed = [...notIPs, ...targets].filter(
    (address) => !outcomes.some((outcome) => outcome.address === address && outcome.kind === "silent"),
  );
  if (options.signal?.aborted)
    return { alive: true, inconclusive: true, detail: "probe inconclusive: stopped", ...flags };
  if (addresses.length === 0 || unprobed.length > 0) {
    const what =
      addresses.length === 0 ? "no address to probe" : `no probe could run on ${unprobed.join(", ")}`;
    return { alive: true, inconclusive: true, detail: withWhy(`probe inconclusive: ${what}`), ...flags };
  }
  const ran = new Set(
    outcomes.filter((outcome) => outcome.kind === "silent").map((outcome) => outcome.probe),
  );
  const names = [...ran].map((probe) =>
    probe === "icmp" ? `icmp ×${pingCount(options)}` : `tcp :${options.kubeletPort}`,
  );
  return {
    alive: false,
    detail: withWhy(`unreachable: no answer from ${names.join(" or ")} on ${targets.join(", ")}`),
    ...flags,
  };
}

const pingCount = (options: ProbeOptions) => Math.max(1, options.pingCount);

/** Every enabled probe on every address at once; the first answer stops the others. */
async function runProbes(targets: string[], options: ProbeOptions) {
  const stop = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
  const count = pingCount(options);
  let winner: Outcome | undefined;
  const run = async (probe: Outcome["probe"], address: string, start: () => Promise<ProbeOutcome>) => {
    const outcome: Outcome = { ...(await start()), probe, address };
    if (outcome.kind === "answered" && !winner) {
      winner = outcome;
      stop.abort();
    }
    return outcome;
  };
  const tasks = targets.flatMap((address) => [
    ...(options.icmp
      ? [run("icmp", address, () => echo(address, { count, timeoutMs: options.pingTimeoutMs, signal }))]
      : []),
    ...(options.tcp
      ? [
          run("tcp", address, () =>
            tcpConnect(address, options.kubeletPort, count * options.pingTimeoutMs, signal),
          ),
        ]
      : []),
  ]);
  const outcomes = await Promise.all(tasks);
  return { outcomes, winner: winner as Outcome | undefined };
}

function describeAnswer(outcome: Outcome, port: number): string {
  return outcome.probe === "icmp"
    ? `icmp ${outcome.address} answered`
    : `tcp ${hostPort(outcome.address, port)} ${outcome.how ?? "answered"}`;
}
