import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { flagsMarkdown, HelpRequested, UsageError } from "../cli/flags.ts";
import { AGENT_HEALTH_PORT, AGENT_METRICS_PORT, agentFlagTable, parseAgentFlags } from "./flags.ts";

const parse = (argv: string[], env: Record<string, string> = { NODE_NAME: "node-1" }) =>
  parseAgentFlags(argv, env);

function rejects(argv: string[], message: string, env?: Record<string, string>) {
  assert.throws(
    () => parse(argv, env),
    (err: unknown) => err instanceof UsageError && err.message === message,
    `expected UsageError "${message}"`,
  );
}

describe("parseAgentFlags", () => {
  test("defaults are cozystack/local-ccm's", () => {
    assert.deepEqual(parse([]), {
      nodeName: "node-1",
      internal: undefined,
      external: { kind: "target", targets: ["8.8.8.8"] },
      removeTaint: true,
      requireLocalNode: true,
      reconcileIntervalMs: 10_000,
      runOnce: false,
      metadata: { mode: "none", timeoutMs: 10_000, updateLabels: false, initRules: [], rules: { providerIDTemplate: "", rules: [] } },
      announce: undefined,
      bgp: undefined,
      kubeconfig: "",
      verbosity: 0,
      logFormat: "text",
      healthBindAddress: { port: AGENT_HEALTH_PORT },
      metrics: { address: { port: AGENT_METRICS_PORT }, secure: true, withHealth: false, tokenAudiences: [] },
    });
  });

  test("--bgp-speaker: off by default; the Secret namespace from the flag or POD_NAMESPACE, refused without one", () => {
    const env = { NODE_NAME: "node-1", POD_NAMESPACE: "kube-system" };
    assert.equal(parse([], env).bgp, undefined);
    const off = { advertisePodCidrs: false, networkUnavailableCondition: false };
    assert.deepEqual(parse(["--bgp-speaker"], env).bgp, { secretNamespace: "kube-system", claimClassless: false, ...off });
    assert.deepEqual(parse(["--bgp-speaker", "--bgp-secret-namespace=ops", "--bgp-claim-classless"], env).bgp, {
      secretNamespace: "ops",
      claimClassless: true,
      ...off,
    });
    rejects(["--bgp-claim-classless"], "--bgp-claim-classless needs --bgp-speaker", env);
    const podCidrs = ["--bgp-speaker", "--bgp-advertise-pod-cidrs", "--bgp-network-unavailable-condition"];
    assert.deepEqual(parse(podCidrs, env).bgp, {
      secretNamespace: "kube-system",
      claimClassless: false,
      advertisePodCidrs: true,
      networkUnavailableCondition: true,
    });
    rejects(["--bgp-advertise-pod-cidrs"], "--bgp-advertise-pod-cidrs needs --bgp-speaker", env);
    rejects(
      ["--bgp-speaker", "--bgp-network-unavailable-condition"],
      "--bgp-network-unavailable-condition needs --bgp-advertise-pod-cidrs",
      env,
    );
    rejects(["--bgp-speaker=maybe"], 'invalid value "maybe" for --bgp-speaker: not a boolean (true or false)', env);
    rejects(["--bgp-speaker"], "--bgp-speaker needs --bgp-secret-namespace (or env POD_NAMESPACE)", { NODE_NAME: "n" });
  });

  test("announcing: the Lease namespace from the flag or POD_NAMESPACE; refused without one or for a long name", () => {
    const env = { NODE_NAME: "node-1", POD_NAMESPACE: "kube-system" };
    assert.deepEqual(parse(["--lb-l2-announce"], env).announce, {
      leaseNamespace: "kube-system",
      interfaces: [],
      nodeSelector: undefined,
    });
    assert.equal(parse(["--lb-l2-announce", "--lb-l2-lease-namespace=ops"], env).announce?.leaseNamespace, "ops");
    assert.equal(parse([], env).announce, undefined);
    rejects(["--lb-l2-announce"], "--lb-l2-announce needs --lb-l2-lease-namespace (or env POD_NAMESPACE)");
    const long = `${"n".repeat(60)}.${"n".repeat(60)}.${"n".repeat(60)}.${"n".repeat(60)}`;
    rejects(
      ["--lb-l2-announce", `--node-name=${long}`],
      `--lb-l2-announce: node name "${long}" is too long for its announcer Lease's name`,
      env,
    );
    rejects(["--lb-l2-interfaces=eth0,a/b"], 'invalid value "eth0,a/b" for --lb-l2-interfaces: "a/b" is not an interface name (at most 15 characters, no \'/\' or spaces)');
  });

  test("announcing: --lb-l2-node-selector parsed at start as kubectl's label selectors; bad syntax refused", () => {
    const env = { NODE_NAME: "node-1", POD_NAMESPACE: "kube-system" };
    const selector = (text: string) =>
      parse(["--lb-l2-announce", `--lb-l2-node-selector=${text}`], env).announce?.nodeSelector;
    assert.deepEqual(selector("node-role.kubernetes.io/edge"), {
      text: "node-role.kubernetes.io/edge",
      requirements: [{ key: "node-role.kubernetes.io/edge", operator: "exists", values: [] }],
    });
    assert.deepEqual(selector("topology.kubernetes.io/zone in (a,b)")?.requirements, [
      { key: "topology.kubernetes.io/zone", operator: "in", values: ["a", "b"] },
    ]);
    assert.equal(selector(""), undefined);
    rejects(
      ["--lb-l2-node-selector=zone in (a"],
      'invalid value "zone in (a" for --lb-l2-node-selector: invalid label selector "zone in (a": ' +
        "found end of input, expected ',' or ')'",
      env,
    );
  });

  test("every flag set", () => {
    const flags = parse(
      [
        "--node-name=worker-2.example",
        "--internal-ip-target=198.18.0.1,fd00:198:18::1",
        "--external-ip-target",
        "198.19.0.1",
        "--remove-taint=false",
        "--require-local-node=false",
        "--reconcile-interval=1m30s",
        "--run-once",
        "--instance-metadata=azure",
        "--metadata-timeout=3s",
        "--provider-id=local://{systemUUID}",
        "--region-rules=name:^([a-z]+)-=$1",
        "--zone-rules=cidr:198.18.1.0/24=rack-1",
        "--instance-type-rules=product:^PowerEdge (R\\d+)$=$1",
        "--update-metadata-labels",
        "--lb-l2-announce",
        "--lb-l2-lease-namespace=ops",
        "--lb-l2-interfaces=eth1,bond0",
        "--lb-l2-node-selector=node-role.kubernetes.io/edge",
        "--bgp-speaker",
        "--bgp-secret-namespace=ops",
        "--kubeconfig=/etc/kubeconfig",
        "--v=4",
        "--log-format=json",
        "--health-bind-address=[::1]:0",
        "--metrics-bind-address=[::1]:0",
        "--secure-metrics=false",
      ],
      {},
    );
    assert.deepEqual(flags, {
      nodeName: "worker-2.example",
      internal: { kind: "target", targets: ["198.18.0.1", "fd00:198:18::1"] },
      external: { kind: "target", targets: ["198.19.0.1"] },
      removeTaint: false,
      requireLocalNode: false,
      reconcileIntervalMs: 90_000,
      runOnce: true,
      metadata: {
        mode: "azure",
        timeoutMs: 3000,
        updateLabels: true,
        initRules: [],
        rules: {
          providerIDTemplate: "local://{systemUUID}",
          rules: [
            { field: "region", source: "name", text: "name:^([a-z]+)-=$1", pattern: /^([a-z]+)-/, value: "$1" },
            {
              field: "zone",
              source: "cidr",
              text: "cidr:198.18.1.0/24=rack-1",
              cidr: { address: "198.18.1.0", prefixLength: 24, family: 4 },
              value: "rack-1",
            },
            {
              field: "instanceType",
              source: "product",
              text: "product:^PowerEdge (R\\d+)$=$1",
              pattern: /^PowerEdge (R\d+)$/,
              value: "$1",
            },
          ],
        },
      },
      announce: {
        leaseNamespace: "ops",
        interfaces: ["eth1", "bond0"],
        nodeSelector: {
          text: "node-role.kubernetes.io/edge",
          requirements: [{ key: "node-role.kubernetes.io/edge", operator: "exists", values: [] }],
        },
      },
      bgp: { secretNamespace: "ops", claimClassless: false, advertisePodCidrs: false, networkUnavailableCondition: false },
      kubeconfig: "/etc/kubeconfig",
      verbosity: 4,
      logFormat: "json",
      healthBindAddress: { host: "::1", port: 0 },
      metrics: { address: { host: "::1", port: 0 }, secure: false, withHealth: true, tokenAudiences: [] },
    });
  });

  test("node name from NODE_NAME; the flag wins", () => {
    assert.equal(parse([], { NODE_NAME: "from-env" }).nodeName, "from-env");
    assert.equal(parse(["--node-name=from-flag"], { NODE_NAME: "from-env" }).nodeName, "from-flag");
  });

  test("targets are kept in order and written as Kubernetes writes IPs", () => {
    const flags = parse(["--external-ip-target=2001:DB8:0:0::1,198.18.0.9,fd00::0:8"]);
    assert.deepEqual(flags.external, {
      kind: "target",
      targets: ["2001:db8::1", "198.18.0.9", "fd00::8"],
    });
  });

  test("CIDR and interface detection", () => {
    assert.deepEqual(parse(["--internal-ip-cidr=198.18.0.0/15, fd00:198:18::/48"]).internal, {
      kind: "cidr",
      cidrs: ["198.18.0.0/15", "fd00:198:18::/48"],
    });
    assert.deepEqual(parse(["--internal-ip-interface=eth1,bond0.100"]).internal, {
      kind: "interface",
      interfaces: ["eth1", "bond0.100"],
    });
  });

  test("an explicit external CIDR or interface replaces the default target", () => {
    assert.deepEqual(parse(["--external-ip-cidr=198.18.0.0/24"]).external, {
      kind: "cidr",
      cidrs: ["198.18.0.0/24"],
    });
    assert.deepEqual(parse(["--external-ip-interface=eth0"]).external, {
      kind: "interface",
      interfaces: ["eth0"],
    });
  });

  test("an empty external target disables ExternalIP management; empty other flags change nothing", () => {
    assert.equal(parse(["--external-ip-target="]).external, undefined);
    assert.deepEqual(parse(["--external-ip-target=", "--external-ip-cidr=198.18.0.0/24"]).external, {
      kind: "cidr",
      cidrs: ["198.18.0.0/24"],
    });
    assert.deepEqual(parse(["--external-ip-cidr="]).external, { kind: "target", targets: ["8.8.8.8"] });
    assert.equal(parse(["--internal-ip-interface="]).internal, undefined);
  });

  test("an empty health bind address disables the server", () => {
    assert.equal(parse(["--health-bind-address="]).healthBindAddress, undefined);
  });

  test("metrics: off, on their own address, given files, or with health only when not secure", () => {
    assert.equal(parse(["--metrics-bind-address="]).metrics, undefined);
    assert.deepEqual(parse(["--metrics-bind-address=[10.0.0.7]:9443", "--metrics-cert-file=/c", "--metrics-key-file=/k"]).metrics, {
      address: { host: "10.0.0.7", port: 9443 },
      secure: true,
      withHealth: false,
      tokenAudiences: [],
      certFile: "/c",
      keyFile: "/k",
    });
    // As before the metrics flags existed: one plain HTTP server at the health address.
    assert.deepEqual(parse(["--metrics-bind-address=:10263", "--secure-metrics=false"]).metrics, {
      address: { port: 10263 },
      secure: false,
      withHealth: true,
      tokenAudiences: [],
    });
    rejects(
      ["--metrics-bind-address=:10263"],
      "--metrics-bind-address=:10263 is --health-bind-address: secure metrics (HTTPS) need an address of their own, " +
        "or --secure-metrics=false to serve both over plain HTTP",
    );
    // Any free port twice is two ports: secure metrics beside health.
    assert.deepEqual(parse(["--health-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"]).metrics, {
      address: { host: "127.0.0.1", port: 0 },
      secure: true,
      withHealth: false,
      tokenAudiences: [],
    });
    rejects(["--metrics-cert-file=/c"], "--metrics-cert-file and --metrics-key-file go together: give both or neither");
    rejects(["--metrics-key-file=/k"], "--metrics-cert-file and --metrics-key-file go together: give both or neither");
    rejects(
      ["--secure-metrics=false", "--metrics-cert-file=/c", "--metrics-key-file=/k"],
      "--metrics-cert-file needs --secure-metrics (HTTPS)",
    );
    // Token audiences: a list, blanks dropped; reviewed only when secure.
    assert.deepEqual(parse(["--metrics-token-audiences=local-ccm-metrics,,https://example.com"]).metrics?.tokenAudiences, [
      "local-ccm-metrics",
      "https://example.com",
    ]);
    rejects(
      ["--secure-metrics=false", "--metrics-token-audiences=local-ccm-metrics"],
      "--metrics-token-audiences needs --secure-metrics (tokens are reviewed only then)",
    );
  });

  test("conflicting detection methods for one address type", () => {
    rejects(
      ["--external-ip-target=8.8.8.8", "--external-ip-cidr=198.18.0.0/24"],
      "--external-ip-target and --external-ip-cidr both choose how ExternalIPs are found: use one",
    );
    rejects(
      ["--external-ip-cidr=198.18.0.0/24", "--external-ip-interface=eth0"],
      "--external-ip-cidr and --external-ip-interface both choose how ExternalIPs are found: use one",
    );
    rejects(
      ["--internal-ip-target=198.18.0.1", "--internal-ip-interface=eth1"],
      "--internal-ip-target and --internal-ip-interface both choose how InternalIPs are found: use one",
    );
    rejects(
      ["--internal-ip-target=198.18.0.1", "--internal-ip-cidr=198.18.0.0/15", "--internal-ip-interface=eth1"],
      "--internal-ip-target and --internal-ip-cidr and --internal-ip-interface both choose how InternalIPs are found: use one",
    );
  });

  test("internal and external may use different methods", () => {
    const flags = parse(["--internal-ip-interface=eth1", "--external-ip-cidr=198.19.0.0/16"]);
    assert.deepEqual(flags.internal, { kind: "interface", interfaces: ["eth1"] });
    assert.deepEqual(flags.external, { kind: "cidr", cidrs: ["198.19.0.0/16"] });
  });

  test("bad input: one-line errors", () => {
    rejects([], "missing required flag --node-name (or env NODE_NAME)", {});
    rejects(["--node-name="], "missing required flag --node-name (or env NODE_NAME)", {});
    rejects(
      ["--node-name=Node_1"],
      `invalid value "Node_1" for --node-name: must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.', at most 253)`,
      {},
    );
    rejects(
      [],
      `invalid value "BAD" for NODE_NAME (--node-name): must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.', at most 253)`,
      { NODE_NAME: "BAD" },
    );
    rejects(
      ["--external-ip-target=8.8.8.8,dns.google"],
      'invalid value "8.8.8.8,dns.google" for --external-ip-target: "dns.google" is not an IP address',
    );
    rejects(
      ["--internal-ip-target=0.0.0.0"],
      'invalid value "0.0.0.0" for --internal-ip-target: "0.0.0.0" is the unspecified address, not a target',
    );
    rejects(
      ["--internal-ip-target=fe80::1%eth0"],
      'invalid value "fe80::1%eth0" for --internal-ip-target: "fe80::1%eth0" is not an IP address',
    );
    rejects(
      ["--internal-ip-cidr=198.18.0.0"],
      'invalid value "198.18.0.0" for --internal-ip-cidr: "198.18.0.0" is not a CIDR (e.g. 198.18.0.0/15 or fd00::/8)',
    );
    // Refused as kube-apiserver refuses such an IP field: text other software reads as another address.
    rejects(
      ["--external-ip-target=198.018.0.8"],
      'invalid value "198.018.0.8" for --external-ip-target: "198.018.0.8" has leading zeros, which some ' +
        "software reads as octal: write 198.18.0.8",
    );
    rejects(
      ["--external-ip-target=::ffff:198.18.0.8"],
      'invalid value "::ffff:198.18.0.8" for --external-ip-target: "::ffff:198.18.0.8" is an IPv4-mapped IPv6 ' +
        "address: write 198.18.0.8",
    );
    rejects(
      ["--external-ip-cidr=198.18.0.0/33"],
      'invalid value "198.18.0.0/33" for --external-ip-cidr: "198.18.0.0/33" has a prefix length above 32',
    );
    rejects(
      ["--external-ip-cidr=fd00::/129"],
      'invalid value "fd00::/129" for --external-ip-cidr: "fd00::/129" has a prefix length above 128',
    );
    rejects(
      ["--external-ip-cidr=eth0/24"],
      'invalid value "eth0/24" for --external-ip-cidr: "eth0/24" is not a CIDR (e.g. 198.18.0.0/15 or fd00::/8)',
    );
    rejects(
      ["--internal-ip-interface=a-very-long-interface"],
      `invalid value "a-very-long-interface" for --internal-ip-interface: "a-very-long-interface" is not an interface name (at most 15 characters, no '/' or spaces)`,
    );
    rejects(
      ["--reconcile-interval=10"],
      'invalid value "10" for --reconcile-interval: not a duration (e.g. 10s, 1m30s, 500ms)',
    );
    rejects(
      ["--reconcile-interval=0s"],
      'invalid value "0s" for --reconcile-interval: must be greater than 0',
    );
    rejects(["--v=6"], 'invalid value "6" for --v: must be between 0 and 5');
    rejects(["--log-format=xml"], 'invalid value "xml" for --log-format: must be one of: text, json');
    rejects(
      ["--health-bind-address=localhost:10263"],
      'invalid value "localhost:10263" for --health-bind-address: "localhost" is not an IP address (IPv6 goes in brackets: [::1]:port)',
    );
    rejects(["--remove-taint", "false"], 'unexpected argument "false" (flags are written --name=value)');
    rejects(["--cloud-provider=external"], "unknown flag: --cloud-provider");
    rejects(
      ["--instance-metadata=digitalocean"],
      'invalid value "digitalocean" for --instance-metadata: must be one of: none, auto, hetzner, aws, azure, gce, openstack',
    );
    rejects(
      ["--provider-id=local://{uuid}"],
      'invalid value "local://{uuid}" for --provider-id: unknown placeholder {uuid}: use {nodeName}, {systemUUID}, {machineID}, {productName}',
    );
    rejects(
      ["--zone-rules=cidr:198.18.1.0/24"],
      'invalid value "cidr:198.18.1.0/24" for --zone-rules: "cidr:198.18.1.0/24" is not <cidr|name|product|dmi.<file>>:<pattern>=<value>',
    );
    rejects(
      ["--node-label-rules=name:^gpu-=node-restriction.kubernetes.io/gpu=true"],
      'invalid value "name:^gpu-=node-restriction.kubernetes.io/gpu=true" for --node-label-rules: ' +
        '"name:^gpu-=node-restriction.kubernetes.io/gpu=true": node-restriction.kubernetes.io/gpu is in ' +
        "node-restriction.kubernetes.io/, which nodes may never set on themselves",
    );
    rejects(
      ["--node-taint-rules=name:^gpu-=nvidia.com/gpu=present"],
      'invalid value "name:^gpu-=nvidia.com/gpu=present" for --node-taint-rules: "name:^gpu-=nvidia.com/gpu=present" ' +
        "is not <cidr|name|product|dmi.<file>|region|zone|instance-type>:<pattern>=<key>=<value>:<NoSchedule|PreferNoSchedule|NoExecute>",
    );
  });

  test("--help", () => {
    assert.throws(() => parse(["--help"]), HelpRequested);
  });
});

describe("the agent's flag table", () => {
  test("has exactly the documented flags, in order", () => {
    assert.deepEqual(
      agentFlagTable.map((spec) => spec.name),
      [
        "node-name",
        "internal-ip-target",
        "internal-ip-cidr",
        "internal-ip-interface",
        "external-ip-target",
        "external-ip-cidr",
        "external-ip-interface",
        "remove-taint",
        "reconcile-interval",
        "run-once",
        "require-local-node",
        "instance-metadata",
        "metadata-timeout",
        "provider-id",
        "region-rules",
        "zone-rules",
        "instance-type-rules",
        "update-metadata-labels",
        "node-label-rules",
        "node-taint-rules",
        "lb-l2-announce",
        "lb-l2-lease-namespace",
        "lb-l2-interfaces",
        "lb-l2-node-selector",
        "bgp-speaker",
        "bgp-secret-namespace",
        "bgp-claim-classless",
        "bgp-advertise-pod-cidrs",
        "bgp-network-unavailable-condition",
        "kubeconfig",
        "v",
        "log-format",
        "health-bind-address",
        "metrics-bind-address",
        "secure-metrics",
        "metrics-cert-file",
        "metrics-key-file",
        "metrics-token-audiences",
      ],
    );
  });

  test("Helm values names", () => {
    const helm = Object.fromEntries(
      agentFlagTable.map((spec) => [spec.name, "helm" in spec ? spec.helm : undefined]),
    );
    assert.deepEqual(helm, {
      "node-name": undefined,
      "internal-ip-target": "ipDetection.internalIPTarget",
      "internal-ip-cidr": "ipDetection.internalIPCIDR",
      "internal-ip-interface": "ipDetection.internalIPInterface",
      "external-ip-target": "ipDetection.externalIPTarget",
      "external-ip-cidr": "ipDetection.externalIPCIDR",
      "external-ip-interface": "ipDetection.externalIPInterface",
      "remove-taint": "agent.removeTaint",
      "reconcile-interval": "agent.reconcileInterval",
      "run-once": undefined,
      // A DaemonSet's pod always runs on its node: the check is turned off only out of cluster, on purpose.
      "require-local-node": undefined,
      "instance-metadata": "metadata.instanceMetadata",
      "metadata-timeout": "metadata.timeout",
      "provider-id": "metadata.providerID",
      "region-rules": "metadata.regionRules",
      "zone-rules": "metadata.zoneRules",
      "instance-type-rules": "metadata.instanceTypeRules",
      "update-metadata-labels": "metadata.updateLabels",
      "node-label-rules": "metadata.nodeLabelRules",
      "node-taint-rules": "metadata.nodeTaintRules",
      "lb-l2-announce": "loadBalancer.l2.enabled",
      // The release namespace, from POD_NAMESPACE: not a value.
      "lb-l2-lease-namespace": undefined,
      "lb-l2-interfaces": "loadBalancer.l2.interfaces",
      "lb-l2-node-selector": "loadBalancer.l2.announcerNodes",
      "bgp-speaker": "bgp.enabled",
      // The release namespace, from POD_NAMESPACE: not a value.
      "bgp-secret-namespace": undefined,
      "bgp-claim-classless": "bgp.claimClassless",
      "bgp-advertise-pod-cidrs": "bgp.advertisePodCIDRs",
      "bgp-network-unavailable-condition": "bgp.networkUnavailableCondition",
      kubeconfig: undefined,
      v: "agent.verbosity",
      "log-format": "agent.logFormat",
      "health-bind-address": "agent.healthBindAddress",
      "metrics-bind-address": "agent.metricsBindAddress",
      "secure-metrics": "agent.secureMetrics",
      "metrics-cert-file": undefined,
      "metrics-key-file": undefined,
      "metrics-token-audiences": "agent.metricsTokenAudiences",
    });
  });

  test("docs table row for the external target", () => {
    assert.match(
      flagsMarkdown(agentFlagTable),
      /\n\| `--external-ip-target` \| {2}\| `8\.8\.8\.8` \| `ipDetection\.externalIPTarget` \| Comma-separated IPs/,
    );
  });
});
