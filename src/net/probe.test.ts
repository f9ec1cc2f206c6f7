// Probes against real hosts in network namespaces. The probing process runs inside a "prober"
// namespace (a fixture process), so the tests never touch the root namespace's routes, and so it
// can run as an unprivileged user. Hosts:
//   echo    198.18.1.2  fd00:198:18:1::2   answers ICMP; port 10250 closed (TCP reset)
//   tcp     198.18.2.2  fd00:198:18:2::2   ignores ICMP; a listener on 10250
//   closed  198.18.3.2  fd00:198:18:3::2   ignores ICMP; port 10250 closed (TCP reset)
//   dead    198.18.1.9  fd00:198:18:1::9   on echo's link, but no host has it
//   no route 198.19.0.1                    no route from the prober
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { run } from "../../localcluster/exec.ts";
import { createNetwork, type Host, type Network } from "../../test/netns/netns.ts";
import { startKubeletListener } from "../../test/netns/listener.ts";
import { type ProbeOptions, type ProbeResult, probeNode } from "./probe.ts";

const ECHO = { v4: "198.18.1.2", v6: "fd00:198:18:1::2" };
const TCP = { v4: "198.18.2.2", v6: "fd00:198:18:2::2" };
const CLOSED = { v4: "198.18.3.2", v6: "fd00:198:18:3::2" };
const DEAD = { v4: "198.18.1.9", v6: "fd00:198:18:1::9" };
const NO_ROUTE = "198.19.0.1";

const FAST: Omit<ProbeOptions, "signal"> = {
  icmp: true,
  tcp: true,
  pingCount: 2,
  pingTimeoutMs: 500,
  kubeletPort: 10250,
};
const NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"];

let net: Network;
let prober: Host;
let pinger: Host;
let listener: ChildProcess | undefined;

/** Runs probeNode for each case concurrently in one fixture process inside `host`; setpriv args drop privileges. */
async function probeIn(
  host: Host,
  cases: [string[], Partial<ProbeOptions>][],
  setpriv?: string[],
): Promise<ProbeResult[]> {
  const probe = path.join(import.meta.dirname, "probe.ts");
  const script = `import { probeNode } from ${JSON.stringify(probe)};
    const cases = ${JSON.stringify(cases.map(([addresses, options]) => [addresses, { ...FAST, ...options }]))};
    console.log(JSON.stringify(await Promise.all(cases.map(([a, o]) => probeNode(a, o)))));`;
  const node = [process.execPath, "--input-type=module", "-e", script];
  const [command, args] = setpriv
    ? host.wrap("setpriv", [...setpriv, ...node])
    : host.wrap(node[0] as string, node.slice(1));
  return JSON.parse(await run(command, args));
}

before(async () => {
  net = await createNetwork();
  prober = await net.host();
  pinger = await net.host();
  const [echo, tcp, closed] = [await net.host(), await net.host(), await net.host()];
  const subnet = (n: number, host: number) => [`198.18.${n}.${host}/24`, `fd00:198:18:${n}::${host}/64`];
  await net.link(prober, echo, { addressesA: subnet(1, 1), addressesB: subnet(1, 2) });
  await net.link(prober, tcp, { addressesA: subnet(2, 1), addressesB: subnet(2, 2) });
  await net.link(prober, closed, { addressesA: subnet(3, 1), addressesB: subnet(3, 2) });
  // The pinger reaches the echo host's addresses through its own link, routed by the echo host.
  await net.link(pinger, echo, { addressesA: subnet(4, 1), addressesB: subnet(4, 2) });
  await pinger.ip("route", "add", "198.18.1.0/24", "via", "198.18.4.2");
  await pinger.ip("-6", "route", "add", "fd00:198:18:1::/64", "via", "fd00:198:18:4::2");
  // Everyone in the pinger's namespace may open ping sockets; the prober keeps the default (nobody).
  await pinger.exec("sysctl", ["-qw", "net.ipv4.ping_group_range=0 2147483647"]);
  for (const host of [tcp, closed])
    for (const sysctl of ["net.ipv4.icmp_echo_ignore_all=1", "net.ipv6.icmp.echo_ignore_all=1"])
      await host.exec("sysctl", ["-qw", sysctl]);
  listener = await startKubeletListener(tcp);
});

after(async () => {
  listener?.kill("SIGKILL");
  await net?.remove();
});

test("as root: any answer on any address is alive; only silence everywhere is unreachable", {
  timeout: 60_000,
}, async () => {
  const cases: [string, [string[], Partial<ProbeOptions>], Partial<ProbeResult>][] = [
    [
      "ICMP answers (v4)",
      [[ECHO.v4], { tcp: false }],
      { alive: true, detail: `reachable: icmp ${ECHO.v4} answered` },
    ],
    [
      "ICMP answers (v6)",
      [[ECHO.v6], { tcp: false }],
      { alive: true, detail: `reachable: icmp ${ECHO.v6} answered` },
    ],
    [
      "only TCP answers (v4)",
      [[TCP.v4], {}],
      { alive: true, detail: `reachable: tcp ${TCP.v4}:10250 answered` },
    ],
    [
      "only TCP answers (v6)",
      [[TCP.v6], {}],
      { alive: true, detail: `reachable: tcp [${TCP.v6}]:10250 answered` },
    ],
    [
      "the TCP-only host really ignores ICMP",
      [[TCP.v4, TCP.v6], { tcp: false }],
      { alive: false, detail: `unreachable: no answer from icmp ×2 on ${TCP.v4}, ${TCP.v6} (tcp disabled)` },
    ],
    [
      "closed port, ICMP ignored: the reset is an answer (v4)",
      [[CLOSED.v4], {}],
      { alive: true, detail: `reachable: tcp ${CLOSED.v4}:10250 refused the connection (the host answered)` },
    ],
    [
      "closed port, ICMP ignored: the reset is an answer (v6)",
      [[CLOSED.v6], {}],
      {
        alive: true,
        detail: `reachable: tcp [${CLOSED.v6}]:10250 refused the connection (the host answered)`,
      },
    ],
    [
      "address on no live host",
      [[DEAD.v4, DEAD.v6], {}],
      { alive: false, detail: `unreachable: no answer from icmp ×2 or tcp :10250 on ${DEAD.v4}, ${DEAD.v6}` },
    ],
    [
      "no route to the address",
      [[NO_ROUTE], {}],
      { alive: false, detail: `unreachable: no answer from icmp ×2 or tcp :10250 on ${NO_ROUTE}` },
    ],
    [
      "one live address among dead ones is enough",
      [[DEAD.v4, NO_ROUTE, TCP.v6], {}],
      { alive: true, detail: `reachable: tcp [${TCP.v6}]:10250 answered` },
    ],
    [
      // Without the early stop the dead address would hold this probe for 3 × 30 s, past the test's timeout.
      "the first answer stops the other probes",
      [[DEAD.v4, ECHO.v4], { tcp: false, pingCount: 3, pingTimeoutMs: 30_000 }],
      { alive: true, detail: `reachable: icmp ${ECHO.v4} answered` },
    ],
    [
      "icmp disabled: TCP decides (the echo host's closed port answers)",
      [[ECHO.v4], { icmp: false }],
      { alive: true, detail: `reachable: tcp ${ECHO.v4}:10250 refused the connection (the host answered)` },
    ],
    [
      "icmp disabled: silence on TCP is unreachable",
      [[DEAD.v4], { icmp: false }],
      { alive: false, detail: `unreachable: no answer from tcp :10250 on ${DEAD.v4} (icmp disabled)` },
    ],
    [
      "nothing enabled proves nothing",
      [[DEAD.v4], { icmp: false, tcp: false }],
      {
        alive: true,
        inconclusive: true,
        detail: `probe inconclusive: no probe could run on ${DEAD.v4} (icmp disabled; tcp disabled)`,
      },
    ],
    [
      "no address proves nothing",
      [[], {}],
      { alive: true, inconclusive: true, detail: "probe inconclusive: no address to probe" },
    ],
    [
      "a name is never resolved, and an address left unprobed proves nothing",
      [[DEAD.v4, "node-1.example"], {}],
      {
        alive: true,
        inconclusive: true,
        detail:
          "probe inconclusive: no probe could run on node-1.example (not an IP address: node-1.example)",
      },
    ],
  ];
  const results = await probeIn(
    prober,
    cases.map(([, input]) => input),
  );
  cases.forEach(([name, , expected], i) => {
    assert.deepEqual(results[i], expected, name);
  });
});

test("without CAP_NET_RAW or ping-socket permission, ICMP is reported unavailable and TCP decides", {
  timeout: 60_000,
}, async () => {
  const results = await probeIn(
    prober,
    [
      [[TCP.v4], {}],
      [[DEAD.v4, DEAD.v6], {}],
      [[ECHO.v4], { tcp: false }],
    ],
    [...NOBODY, "--inh-caps=-all"],
  );
  const unavailable =
    "icmp unavailable: no raw socket (needs CAP_NET_RAW) and no ping socket (group not in net.ipv4.ping_group_range)";
  assert.deepEqual(results, [
    { alive: true, icmpUnavailable: true, detail: `reachable: tcp ${TCP.v4}:10250 answered` },
    {
      alive: false,
      icmpUnavailable: true,
      detail: `unreachable: no answer from tcp :10250 on ${DEAD.v4}, ${DEAD.v6} (${unavailable})`,
    },
    {
      alive: true,
      inconclusive: true,
      icmpUnavailable: true,
      detail: `probe inconclusive: no probe could run on ${ECHO.v4} (${unavailable}; tcp disabled)`,
    },
  ]);
});

test("CAP_NET_RAW alone (no root) is enough for ICMP", { timeout: 60_000 }, async () => {
  const results = await probeIn(
    prober,
    [
      [[ECHO.v4], { tcp: false }],
      [[ECHO.v6], { tcp: false }],
    ],
    [...NOBODY, "--inh-caps=-all,+net_raw", "--ambient-caps=-all,+net_raw"],
  );
  assert.deepEqual(results, [
    { alive: true, detail: `reachable: icmp ${ECHO.v4} answered` },
    { alive: true, detail: `reachable: icmp ${ECHO.v6} answered` },
  ]);
});

test("an unprivileged user uses ping sockets where net.ipv4.ping_group_range admits it", {
  timeout: 60_000,
}, async () => {
  const results = await probeIn(
    pinger,
    [
      [[ECHO.v4], { tcp: false }],
      [[ECHO.v6], { tcp: false }],
      [[DEAD.v4], { tcp: false }],
    ],
    [...NOBODY, "--inh-caps=-all"],
  );
  assert.deepEqual(results, [
    { alive: true, detail: `reachable: icmp ${ECHO.v4} answered` },
    { alive: true, detail: `reachable: icmp ${ECHO.v6} answered` },
    { alive: false, detail: `unreachable: no answer from icmp ×2 on ${DEAD.v4} (tcp disabled)` },
  ]);
});

test("a probe stopped from outside proves nothing", { timeout: 10_000 }, async () => {
  const result = await probeNode(["127.0.0.1"], { ...FAST, signal: AbortSignal.abort() });
  assert.deepEqual(result, { alive: true, inconclusive: true, detail: "probe inconclusive: stopped" });
});
