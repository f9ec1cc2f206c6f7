import assert from "node:assert/strict";
import { isIPv4, isIPv6 } from "node:net";
import { test } from "node:test";
import fc from "fast-check";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Node } from "kubernetes-types/core/v1.js";
import { UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import { canonicalIp, ipToBytes, parseCidr } from "../net/ip.ts";
import { csrObject, type OpensslRequest, opensslCsr } from "./csr.fixture.ts";
import { type CsrConfig, type CsrDecision, type CsrFacts, csrFacts, decideCSR } from "./decide.ts";
import { parseDnsNamePattern } from "./dnsnames.ts";
import { indexNode, indexNodes, type NodeFacts, nodeFacts } from "./nodes.ts";

const CREATED = "2026-01-01T12:00:00Z";
const NOW = new Date("2026-01-01T12:05:00Z");
const UNTIL = new Date("2026-01-01T12:10:00Z");

function node(name: string, addresses: [type: string, address: string][], uninitialized = false): Node {
  return {
    metadata: { name },
    spec: { taints: uninitialized ? [{ key: UNINITIALIZED_TAINT, effect: "NoSchedule" }] : [] },
    status: { addresses: addresses.map(([type, address]) => ({ type, address })) },
  };
}

const NODES = [
  node("n1", [
    ["InternalIP", "198.18.0.12"],
    ["InternalIP", "fd00:198:18::c"],
    ["ExternalIP", "198.18.0.50"], // n2 claims it too
    ["Hostname", "n1"],
    ["InternalDNS", "N1.lan"],
  ]),
  node("n2", [
    ["InternalIP", "198.18.0.13"],
    ["InternalIP", "::ffff:198.18.0.50"],
    ["Hostname", "n2"],
    ["ExternalDNS", "n2.example.com"],
  ]),
  node("n3", [["Hostname", "n3"]], true),
  node("a", [["InternalIP", "198.18.0.60"]]),
  node("a.b", [["InternalIP", "198.18.0.61"]]),
];
const index = (nodes: NodeFacts[]) => indexNodes(nodes.map(indexNode));
const INDEX = index(NODES.map((n) => nodeFacts(n)));

const CONFIG: CsrConfig = {
  apiServerNames: ["API.example.com"],
  ipAllowlist: [],
  maxExpirationSeconds: 86_400,
  pendingTimeoutMs: 600_000,
};

interface Case {
  title: string;
  request: OpensslRequest;
  spec?: Partial<CertificateSigningRequest["spec"]>;
  config?: Partial<CsrConfig>;
  object?: (csr: CertificateSigningRequest) => CertificateSigningRequest;
  expected: CsrDecision;
}

const n1 = (sans: string, extra: Partial<Case> = {}): Omit<Case, "title" | "expected"> => ({
  request: { sans },
  ...extra,
});
const as = (name: string, sans: string): Omit<Case, "title" | "expected"> => ({
  request: { subject: `/O=system:nodes/CN=system:node:${name}`, sans },
  spec: { username: `system:node:${name}` },
});
const approve = (reason: string): CsrDecision => ({ action: "approve", rule: "approved", reason });
const deny = (rule: Extract<CsrDecision, { action: "deny" }>["rule"], reason: string): CsrDecision => ({
  action: "deny",
  rule,
  reason,
});

const NODES_PATTERN = parseDnsNamePattern("{node}\\.nodes\\.example\\.com");

const CASES: Case[] = [
  {
    title: "a kubelet's request",
    ...n1("DNS:n1,DNS:n1.lan,IP:198.18.0.12,IP:fd00:198:18::c"),
    expected: approve('rules 1–8 hold for node "n1": DNS n1, n1.lan; IP 198.18.0.12, fd00:198:18::c'),
  },
  {
    title: "key encipherment, upper-case DNS, long IPv6, expiration at the maximum",
    ...n1("DNS:N1.LAN,IP:FD00:198:18:0:0:0:0:C", {
      spec: { usages: ["key encipherment", "server auth", "digital signature"], expirationSeconds: 86_400 },
    }),
    expected: approve('rules 1–8 hold for node "n1": DNS N1.LAN; IP fd00:198:18::c'),
  },
  // rule 1 and decided CSRs: left alone
  {
    title: "another signer, even with garbage",
    ...n1("DNS:n1", { spec: { signerName: "example.com/other" }, object: (csr) => withRequest(csr, "garbage") }),
    expected: { action: "ignore", rule: "signer", reason: "rule 1 (signer): example.com/other is not ours" },
  },
  {
    title: "kube-apiserver-client-kubelet is not ours either",
    ...n1("DNS:n1", { spec: { signerName: "kubernetes.io/kube-apiserver-client-kubelet" } }),
    expected: {
      action: "ignore",
      rule: "signer",
      reason: "rule 1 (signer): kubernetes.io/kube-apiserver-client-kubelet is not ours",
    },
  },
  {
    title: "already denied",
    ...n1("DNS:n2", { object: (csr) => ({ ...csr, status: { conditions: [{ type: "Denied", status: "True" }] } }) }),
    expected: { action: "ignore", rule: "decided", reason: "already Denied" },
  },
  {
    title: "already issued",
    ...n1("DNS:n1", { object: (csr) => ({ ...csr, status: { certificate: "Y2VydA==" } }) }),
    expected: { action: "ignore", rule: "decided", reason: "already issued" },
  },
  // rule 2
  {
    title: "not a node",
    ...n1("DNS:n1", { spec: { username: "alice" } }),
    expected: deny("identity", 'rule 2 (identity): username "alice" is not system:node:<name>'),
  },
  {
    title: "empty node name",
    ...n1("DNS:n1", { spec: { username: "system:node:" } }),
    expected: deny("identity", 'rule 2 (identity): username "system:node:" is not system:node:<name>'),
  },
  {
    title: "not in system:nodes",
    ...n1("DNS:n1", { spec: { groups: ["system:authenticated"] } }),
    expected: deny("identity", "rule 2 (identity): groups [system:authenticated] lack system:nodes"),
  },
  // rule 3
  {
    title: "garbage request",
    ...n1("DNS:n1", { object: (csr) => withRequest(csr, "garbage") }),
    expected: deny("request", "rule 3 (request): not one canonical PEM block: no BEGIN line"),
  },
  {
    title: "CN of another node",
    request: { subject: "/O=system:nodes/CN=system:node:n2", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject CN [system:node:n2] is not [system:node:n1]"),
  },
  {
    title: "two CNs (Go would read the last)",
    request: { subject: "/O=system:nodes/CN=system:node:n1/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny(
      "request",
      "rule 3 (request): subject CN [system:node:n1, system:node:n1] is not [system:node:n1]",
    ),
  },
  {
    title: "O system:masters too",
    request: { subject: "/O=system:nodes/O=system:masters/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject O [system:nodes, system:masters] is not [system:nodes]"),
  },
  {
    title: "no O",
    request: { subject: "/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject O [] is not [system:nodes]"),
  },
  {
    title: "an OU",
    request: { subject: "/O=system:nodes/OU=ops/CN=system:node:n1", sans: "DNS:n1" },
    expected: deny("request", "rule 3 (request): subject attribute OU not allowed (only CN and O)"),
  },
  {
    title: "email SAN",
    ...n1("DNS:n1,email:root@n1"),
    expected: deny("request", "rule 3 (request): email SAN root@n1 not allowed"),
  },
  {
    title: "URI SAN",
    ...n1("DNS:n1,URI:spiffe://cluster/n1"),
    expected: deny(
      "request",
      'rule 3 (request): unreadable: URI SAN "spiffe://cluster/n1": not read (Go rewrites a URI as it parses it; ' +
        "no kubelet asks for one)",
    ),
  },
  {
    title: "otherName SAN",
    ...n1("DNS:n1,otherName:1.3.6.1.4.1.311.20.2.3;UTF8:n1@example"),
    expected: deny("request", "rule 3 (request): otherName SAN not allowed"),
  },
  {
    title: "no SAN",
    request: {},
    expected: deny("request", "rule 3 (request): no DNS or IP SAN"),
  },
  // rule 4
  {
    title: "client auth",
    ...n1("DNS:n1", { spec: { usages: ["digital signature", "server auth", "client auth"] } }),
    expected: deny("usages", 'rule 4 (usages): "client auth" not allowed'),
  },
  {
    title: "no server auth",
    ...n1("DNS:n1", { spec: { usages: ["digital signature", "key encipherment"] } }),
    expected: deny("usages", 'rule 4 (usages): "server auth" missing'),
  },
  {
    title: "no digital signature",
    ...n1("DNS:n1", { spec: { usages: ["server auth"] } }),
    expected: deny("usages", 'rule 4 (usages): "digital signature" missing'),
  },
  // rule 5
  {
    title: "another node's IP",
    ...n1("DNS:n1,IP:198.18.0.13"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.13 is not an address of node "n1"'),
  },
  {
    title: "another node's IPv4 written IPv4-mapped (the certificate would carry 198.18.0.13)",
    ...n1("IP:::ffff:198.18.0.13"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.13 is not an address of node "n1"'),
  },
  {
    title: "an IP that both n1 and n2 list",
    ...n1("IP:198.18.0.12,IP:198.18.0.50"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.50 is also an address of node "n2"'),
  },
  {
    title: "an IP of no node",
    ...n1("IP:203.0.113.7"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 203.0.113.7 is not an address of node "n1"'),
  },
  // rule 6
  ...(
    [
      ["n2", 'is a name of node "n2"'],
      ["N2.example.com", 'is a name of node "n2"'],
      ["a.b", 'is a name of node "a.b"'],
      ["kubernetes", "is a name of the API server"],
      ["Kubernetes.Default", "is a name of the API server"],
      ["kubernetes.default.svc", "is a name of the API server"],
      ["kubernetes.default.svc.cluster.local", "is a name of the API server"],
      ["api.example.com", "is a name of the API server"],
      ["*.n1", "is a wildcard"],
      ["198.18.0.12", "is an IP address (IP SANs carry those)"],
      ["n1.", 'is not a name of node "n1"'],
      ["intranet", 'is not a name of node "n1"'],
      [`${"a.".repeat(127)}n1`, "is longer than 253 characters"],
    ] as const
  ).map(([name, problem]): Case => ({
    title: `DNS SAN ${name.slice(0, 40)}`,
    ...n1(`DNS:n1,DNS:${name}`),
    expected: deny("dns-san", `rule 6 (DNS SANs): "${name}" ${problem}`),
  })),
  // rule 6: the extra-names pattern
  {
    title: "a name the pattern gives to n1",
    ...n1("DNS:n1.nodes.example.com", { config: { extraDnsNames: NODES_PATTERN } }),
    expected: approve('rules 1–8 hold for node "n1": DNS n1.nodes.example.com'),
  },
  {
    title: "a name the pattern gives to n2",
    ...n1("DNS:n2.nodes.example.com", { config: { extraDnsNames: NODES_PATTERN } }),
    expected: deny(
      "dns-san",
      'rule 6 (DNS SANs): "n2.nodes.example.com" is not a name of node "n1" ' +
        "nor matches the extra DNS name pattern {node}\\.nodes\\.example\\.com",
    ),
  },
  {
    title: "a name the pattern gives to a and a.b alike",
    ...as("a", "DNS:a.b.lan"),
    config: { extraDnsNames: parseDnsNamePattern("{node}\\.(b\\.)?lan") },
    expected: deny("dns-san", 'rule 6 (DNS SANs): "a.b.lan" matches the extra DNS name pattern for node "a.b" too'),
  },
  {
    title: "the pattern never overrides another node's name",
    ...n1("DNS:n2.example.com", { config: { extraDnsNames: parseDnsNamePattern("^{node}$|^n2\\.example\\.com$") } }),
    expected: deny("dns-san", 'rule 6 (DNS SANs): "n2.example.com" is a name of node "n2"'),
  },
  // rule 7
  {
    title: "IPs inside the allowlist",
    ...n1("IP:198.18.0.12,IP:fd00:198:18::c", { config: { ipAllowlist: cidrs("198.18.0.0/24", "fd00:198:18::/48") } }),
    expected: approve('rules 1–8 hold for node "n1": IP 198.18.0.12, fd00:198:18::c'),
  },
  {
    title: "an own IP outside the allowlist",
    ...n1("IP:198.18.0.12,IP:fd00:198:18::c", { config: { ipAllowlist: cidrs("198.18.0.0/24") } }),
    expected: deny("ip-cidr", "rule 7 (IP allowlist): fd00:198:18::c is in none of 198.18.0.0/24"),
  },
  // rule 8
  {
    title: "expiration above the maximum",
    ...n1("DNS:n1", { spec: { expirationSeconds: 86_401 } }),
    expected: deny("expiration", "rule 8 (expiration): expirationSeconds 86401 exceeds the maximum 86400"),
  },
  // rule 9
  {
    title: "uninitialized node, address not there yet: wait",
    ...as("n3", "DNS:n3,IP:198.18.0.30"),
    expected: {
      action: "wait",
      rule: "ip-san",
      until: UNTIL,
      reason: 'waiting for node "n3" to be initialized: rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3"',
    },
  },
  {
    title: "uninitialized node, DNS name not there yet: wait",
    ...as("n3", "DNS:n3.lan"),
    expected: {
      action: "wait",
      rule: "dns-san",
      until: UNTIL,
      reason: 'waiting for node "n3" to be initialized: rule 6 (DNS SANs): "n3.lan" is not a name of node "n3"',
    },
  },
  {
    title: "uninitialized node, all well: approve",
    ...as("n3", "DNS:n3"),
    expected: approve('rules 1–8 hold for node "n3": DNS n3'),
  },
  {
    title: "uninitialized node past the pending timeout: deny",
    ...as("n3", "IP:198.18.0.30"),
    object: (csr) => ({ ...csr, metadata: { ...csr.metadata, creationTimestamp: "2026-01-01T11:55:00Z" } }),
    expected: deny(
      "ip-san",
      'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3" (waited 10m0s for node "n3" to be initialized)',
    ),
  },
  {
    title: "uninitialized node, but expiration too long: no point waiting",
    ...as("n3", "IP:198.18.0.30"),
    spec: { username: "system:node:n3", expirationSeconds: 90_000 },
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3"'),
  },
  {
    title: "uninitialized node, IP outside the allowlist: no point waiting",
    ...as("n3", "IP:198.18.0.30"),
    config: { ipAllowlist: cidrs("10.0.0.0/8") },
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3"'),
  },
  {
    title: "uninitialized node, request without creation time: deny",
    ...as("n3", "IP:198.18.0.30"),
    object: (csr) => ({ ...csr, metadata: { name: "csr-1" } }),
    expected: deny(
      "ip-san",
      'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n3" ' +
        '(no creation time to wait from for node "n3" to be initialized)',
    ),
  },
  {
    title: "missing node: wait",
    ...as("n9", "DNS:n9"),
    expected: {
      action: "wait",
      rule: "node-missing",
      until: UNTIL,
      reason: 'waiting for node "n9" to appear: rule 5 (node): node "n9" does not exist',
    },
  },
  {
    title: "missing node past the pending timeout: deny",
    ...as("n9", "DNS:n9"),
    object: (csr) => ({ ...csr, metadata: { ...csr.metadata, creationTimestamp: "2026-01-01T11:50:00Z" } }),
    expected: deny(
      "node-missing",
      'rule 5 (node): node "n9" does not exist (waited 10m0s for node "n9" to appear)',
    ),
  },
  {
    title: "initialized node: a failing IP is denied at once",
    ...n1("IP:198.18.0.30"),
    expected: deny("ip-san", 'rule 5 (IP SANs): 198.18.0.30 is not an address of node "n1"'),
  },
];

function withRequest(csr: CertificateSigningRequest, text: string): CertificateSigningRequest {
  return { ...csr, spec: { ...csr.spec, request: Buffer.from(text).toString("base64") } };
}

function cidrs(...texts: string[]) {
  return texts.map((text) => {
    const cidr = parseCidr(text);
    assert.ok(cidr, text);
    return cidr;
  });
}

test("decideCSR: every rule on real requests made by openssl, with its reason", () => {
  for (const { title, request, spec, config, object, expected } of CASES) {
    const csr = csrObject(opensslCsr(request), spec, CREATED);
    const facts = csrFacts(object ? object(csr) : csr);
    assert.deepEqual(decideCSR(facts, INDEX, { ...CONFIG, ...config }, NOW), expected, title);
  }
});

test("CSR facts: decided whatever the condition status, bad creation time, request parsed for ours only", () => {
  const csr = csrObject(opensslCsr({ sans: "DNS:n1" }), {}, CREATED);
  const facts = csrFacts(csr);
  assert.deepEqual(
    { ...facts, request: facts.request.ok },
    {
      name: "csr-1",
      signerName: "kubernetes.io/kubelet-serving",
      username: "system:node:n1",
      groups: ["system:nodes", "system:authenticated"],
      usages: ["digital signature", "server auth"],
      expirationSeconds: undefined,
      created: new Date(CREATED),
      decided: undefined,
      request: true,
    },
  );
  const failed = csrFacts({ ...csr, status: { conditions: [{ type: "Failed", status: "False" }] } });
  assert.equal(failed.decided, "Failed");
  const pending = csrFacts({ ...csr, status: { conditions: [{ type: "Pending", status: "True" }] } });
  assert.equal(pending.decided, undefined);
  assert.equal(csrFacts({ ...csr, metadata: { creationTimestamp: "yesterday" } }).created, undefined);
  const other = csrFacts({ ...csr, spec: { ...csr.spec, signerName: "example.com/x" } });
  assert.deepEqual(other.request, { ok: false, error: "not parsed (another signer)" });
});

test("node index: DNS names lower case, IPs canonical whatever their type, the uninitialized taint", () => {
  const nodes = index(
    [
      node("n1", [
        ["InternalIP", "::FFFF:198.18.0.12"],
        ["Hostname", "198.018.0.13"],
        ["InternalDNS", "N1.Lan"],
        ["ExternalDNS", "n1.example.com"],
        ["InternalIP", "not-an-ip"],
        ["SomethingElse", "other.name"],
      ]),
      node("n2", [["InternalIP", "198.18.0.12"]], true),
    ].map((n) => nodeFacts(n)),
  );
  const n1 = nodes.nodes.get("n1");
  assert.deepEqual([...(n1?.ips ?? [])], ["198.18.0.12", "198.18.0.13"]);
  assert.deepEqual([...(n1?.dnsNames ?? [])], ["n1", "n1.lan", "n1.example.com"]);
  assert.equal(n1?.uninitialized, false);
  assert.equal(nodes.nodes.get("n2")?.uninitialized, true);
  assert.deepEqual(nodes.ipOwners.get("198.18.0.12"), ["n1", "n2"]);
  assert.deepEqual(nodes.dnsOwners.get("n1.lan"), ["n1"]);
});

test("extra DNS name patterns: {node} is required, never escaped nor inside [...]", () => {
  for (const good of [
    "{node}\\.nodes\\.example\\.com",
    "^{node}\\.lan$",
    "(bmc\\.)?{node}\\.lan",
    "node-{node}",
    "{node}?\\.lan",
    "x\\.{node}$|^{node}\\.y",
    "[a-z]+\\.{node}",
  ])
    assert.doesNotThrow(() => parseDnsNamePattern(good), good);
  const bad: [string, RegExp][] = [
    ["nodes\\.example\\.com", /must contain \{node\}/],
    ["\\{node}\\.lan", /\\\{node\} is ambiguous/],
    ["[{node}]\\.lan", /inside \[\.\.\.\]/],
    ["[\\.{node}\\.]+", /inside \[\.\.\.\]/],
    ["{node}\\.(lan", /DNS name pattern .*: Invalid regular expression/],
  ];
  for (const [text, error] of bad) assert.throws(() => parseDnsNamePattern(text), error, text);
});

test("extra DNS name patterns: a name the pattern gives to other nodes too is refused", () => {
  const nodes = index(["n", "n1", "a", "a.b"].map((name) => nodeFacts(node(name, []))));
  const cases: [pattern: string, node: string, san: string, problem: string | undefined][] = [
    ["{node}\\.lan", "n1", "n1.lan", undefined],
    ["{node}\\.(b\\.)?lan", "a", "a.lan", undefined],
    ["{node}\\.(b\\.)?lan", "a", "a.b.lan", 'for node "a.b" too'],
    ["(x\\.)?{node}\\.lan", "a", "x.a.lan", undefined],
    // A quantifier after {node} applies to the whole name: n1's pattern does not give "n.lan".
    ["{node}?\\.lan", "n1", "n.lan", "is not a name of node"],
    ["{node}?\\.lan", "n1", ".lan", "for every node"],
    ["^{node}$|^intranet$", "n1", "intranet", "for every node"],
    ["node-{node}", "a", "node-a", undefined],
    ["[a-z.]*{node}", "a", "a.b", 'is a name of node "a.b"'],
    ["[a-z.]*{node}", "a", "x.a", undefined],
    ["[a-z.]*{node}", "n1", "nn1", undefined],
    ["[a-z.]*{node}", "n", "nn", undefined],
    ["[a-z.]*{node}", "n", "nn1", "is not a name of node"],
    ["[a-z.]*{node}", "n1", "x.n1", undefined],
  ];
  for (const [pattern, requester, san, problem] of cases) {
    const facts = csrFacts(csrObject(opensslCsr(as(requester, `DNS:${san}`).request), {
      username: `system:node:${requester}`,
    }, CREATED));
    const decision = decideCSR(facts, nodes, { ...CONFIG, extraDnsNames: parseDnsNamePattern(pattern) }, NOW);
    const title = `${pattern} for ${requester}: ${san}`;
    if (problem === undefined) assert.equal(decision.action, "approve", `${title}: ${decision.reason}`);
    else assert.match(decision.reason, new RegExp(problem.replace(/[.*+?()[\]]/g, "\\$&")), title);
  }
});

// ---- property: never approve a SAN that is another node's or no node's ----

const NODE_NAMES = ["n1", "n2", "n3", "a", "a.b", "c.a.b"];
const IPS = ["198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4", "fd00:198:18::1", "fd00:198:18::2"];
const DNS = ["h1", "h2", "H1.lan", "x.example.com", "n1", "a.b", "kubernetes"];
const PATTERNS = [
  undefined,
  "{node}\\.lan",
  "{node}\\.(b\\.)?lan",
  "(x\\.)?{node}\\.lan",
  "^{node}$|^b\\.{node}",
  "[a-z.]*{node}",
  "{node}?\\.lan",
  "^{node}$|^intranet$",
];

/** An IP as written in a CSR or a Node: its usual text, upper case, or (IPv4) IPv4-mapped. */
const writtenIp = (ip: string) =>
  fc.constantFrom(ip, ip.toUpperCase(), ...(isIPv4(ip) ? [`::ffff:${ip}`, `::FFFF:${ip}`] : []));

const nodesArb = fc
  .uniqueArray(fc.constantFrom(...NODE_NAMES), { minLength: 1, maxLength: NODE_NAMES.length })
  .chain((names) =>
    fc.tuple(
      ...names.map((name) =>
        fc.record({
          name: fc.constant(name),
          ips: fc.array(fc.constantFrom(...IPS).chain(writtenIp), { maxLength: 3 }),
          dns: fc.array(fc.constantFrom(...DNS), { maxLength: 2 }),
          uninitialized: fc.boolean(),
        }),
      ),
    ),
  )
  .map((nodes) =>
    nodes.map(
      ({ name, ips, dns, uninitialized }): NodeFacts => ({
        name,
        addresses: [
          ...ips.map((address, i) => ({ type: i % 2 ? "ExternalIP" : "InternalIP", address })),
          ...dns.map((address, i) => ({ type: ["Hostname", "InternalDNS", "ExternalDNS"][i % 3] ?? "", address })),
        ],
        uninitialized,
      }),
    ),
  );

const pick = <T,>(own: T[], others: fc.Arbitrary<T>) =>
  own.length ? fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...own) }, { weight: 1, arbitrary: others }) : others;

/** A requester (mostly an existing node) and SANs: its own, other nodes', pattern-made, no node's. */
const sanArb = (nodes: NodeFacts[]) =>
  fc
    .oneof({ weight: 9, arbitrary: fc.constantFrom(...nodes) }, { weight: 1, arbitrary: fc.constant(undefined) })
    .chain((requester) => {
      const own = requester?.addresses.map((a) => a.address) ?? [];
      const ownIps = IPS.filter((ip) => own.some((address) => canonicalIp(address) === canonicalIp(ip)));
      const ownNames = [requester?.name ?? "n9", ...own.filter((address) => canonicalIp(address) === undefined)];
      return fc.record({
        requester: fc.constant(requester?.name ?? "n9"),
        dnsNames: fc.array(
          pick(
            [...ownNames, ...ownNames.map((name) => name.toUpperCase()), `${requester?.name}.lan`],
            fc.oneof(
              fc.constantFrom(...DNS, ...NODE_NAMES, ...nodes.flatMap((n) => n.addresses.map((a) => a.address))),
              fc.constantFrom(...NODE_NAMES).map((name) => `${name}.lan`),
              fc.constantFrom(...NODE_NAMES).map((name) => `x.${name}.lan`),
              fc.constantFrom(...NODE_NAMES).map((name) => `b.${name}`),
              fc.constantFrom("intranet", ".lan", "n.lan", "a.lan"), // names some patterns give to many nodes
              fc.domain(),
            ),
          ),
          { maxLength: 3 },
        ),
        ips: fc.array(
          pick(ownIps, fc.oneof(fc.constantFrom(...IPS, "203.0.113.9", "fd00::9"), fc.ipV4(), fc.ipV6())).chain(
            writtenIp,
          ),
          { maxLength: 3 },
        ),
        pattern: fc.constantFrom(...PATTERNS),
        allowlist: fc.constantFrom<string[]>([], [], ["198.18.0.0/30"], ["198.18.0.0/24", "fd00::/8"]),
        ageMs: fc.integer({ min: 0, max: 1_200_000 }),
      });
    });

/** An IP's 16 bytes (IPv4 as IPv4-mapped), computed without the code under test's canonical form. */
const ipKey = (ip: string) =>
  isIPv4(ip)
    ? `00000000000000000000ffff${ipToBytes(ip).toString("hex")}`
    : isIPv6(ip)
      ? ipToBytes(ip).toString("hex")
      : undefined;

/**
 * The nodes a SAN belongs to, restated from the rules: the nodes that list it (by name or address); for a DNS
 * name no node lists, the nodes the pattern gives it to.
 */
function owners(nodes: NodeFacts[], san: { ip: string } | { dns: string }, pattern: string | undefined): string[] {
  if ("ip" in san)
    return nodes
      .filter((n) => n.addresses.some((a) => ipKey(a.address) !== undefined && ipKey(a.address) === ipKey(san.ip)))
      .map((n) => n.name);
  const name = san.dns.toLowerCase();
  const listed = nodes.filter(
    (n) => n.name === name || n.addresses.some((a) => !a.type.endsWith("IP") && a.address.toLowerCase() === name),
  );
  if (listed.length || pattern === undefined) return listed.map((n) => n.name);
  const given = (n: NodeFacts) =>
    new RegExp(`^(?:${pattern.replaceAll("{node}", `(?:${n.name.replaceAll(".", "\\.")})`)})$`).test(name);
  return nodes.filter(given).map((n) => n.name);
}

test("property: never approves an IP or DNS SAN that is another node's or no node's", () => {
  let approvals = 0;
  fc.assert(
    fc.property(
      nodesArb.chain((nodes) => fc.tuple(fc.constant(nodes), sanArb(nodes))),
      ([nodes, { requester, dnsNames, ips, pattern, allowlist, ageMs }]) => {
        const facts: CsrFacts = {
          name: "csr",
          signerName: "kubernetes.io/kubelet-serving",
          username: `system:node:${requester}`,
          groups: ["system:nodes"],
          usages: ["digital signature", "server auth"],
          created: new Date(NOW.getTime() - ageMs),
          request: {
            ok: true,
            commonNames: [`system:node:${requester}`],
            organizations: ["system:nodes"],
            otherSubjectAttributes: [],
            dnsNames,
            // As request.ts hands them over.
            ipAddresses: ips.map((ip) => canonicalIp(ip) ?? assert.fail(ip)),
            emailAddresses: [],
            otherSans: [],
          },
        };
        const config: CsrConfig = {
          ...CONFIG,
          ipAllowlist: cidrs(...allowlist),
          ...(pattern ? { extraDnsNames: parseDnsNamePattern(pattern) } : {}),
        };
        const decision = decideCSR(facts, index(nodes), config, NOW);
        assert.ok(decision.reason.length > 0);
        if (decision.action !== "approve") return;
        approvals++;
        for (const ip of ips) assert.deepEqual(owners(nodes, { ip }, pattern), [requester], `IP SAN ${ip}`);
        for (const dns of dnsNames) {
          assert.deepEqual(owners(nodes, { dns }, pattern), [requester], `DNS SAN ${dns}`);
          assert.ok(!dns.toLowerCase().startsWith("kubernetes"), `DNS SAN ${dns}`);
        }
      },
    ),
    { numRuns: 3000 },
  );
  assert.ok(approvals > 100, `only ${approvals} approvals: the generators hardly reach the interesting side`);
});
