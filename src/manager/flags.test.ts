import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { HelpRequested, UsageError } from "../cli/flags.ts";
import { kubeletServingCsr } from "../csr/definition.ts";
import { nodeLifecycle } from "../lifecycle/definition.ts";
import { servicePools } from "../pools/definition.ts";
import { configOf, MANAGER_HEALTH_PORT, MANAGER_METRICS_PORT, managerFlagTable, parseManagerFlags } from "./flags.ts";

const noServiceAccount = () => undefined;

/** The parsed flags in one object: the program's, the enabled controllers' names, and each controller's config. */
function parse(
  argv: string[],
  env: Record<string, string> = {},
  podNamespace: () => string | undefined = noServiceAccount,
) {
  const flags = parseManagerFlags(argv, env, podNamespace);
  const { controllers, configs: _, ...program } = flags;
  return {
    ...configOf(flags, nodeLifecycle),
    ...program,
    controllers: new Set(controllers.map(({ name }) => name)),
    csr: configOf(flags, kubeletServingCsr),
  };
}

function rejects(argv: string[], message: string) {
  assert.throws(
    () => parse(argv),
    (err: unknown) => err instanceof UsageError && err.message === message,
    `expected UsageError "${message}"`,
  );
}

describe("parseManagerFlags, with the registered controllers' flags", () => {
  test("defaults are cozystack/local-ccm's, plus ours", () => {
    assert.deepEqual(parse([]), {
      watchAutoscalerTaint: true,
      nodeSelector: undefined,
      protectedLabels: [],
      protectedAnnotations: [],
      notReadyTimeoutMs: 300_000,
      pingTimeoutMs: 5000,
      pingCount: 3,
      probes: ["icmp", "tcp"],
      kubeletPort: 10250,
      reconcileIntervalMs: 30_000,
      maxDeletionsPerMinute: 10,
      unhealthyThreshold: 0.55,
      leaderElection: {
        enabled: true,
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2000,
        resourceName: "node-lifecycle-controller",
        resourceNamespace: "kube-system",
      },
      dryRun: false,
      controllers: new Set(["node-lifecycle", "service"]),
      csr: { apiServerNames: [], ipAllowlist: [], maxExpirationSeconds: 365 * 24 * 3600, pendingTimeoutMs: 600_000 },
      kubeconfig: "",
      verbosity: 0,
      logFormat: "text",
      healthBindAddress: { port: MANAGER_HEALTH_PORT },
      metrics: { address: { port: MANAGER_METRICS_PORT }, secure: true, withHealth: false, tokenAudiences: [] },
    });
  });

  test("every flag set", () => {
    const flags = parse([
      "--watch-autoscaler-taint=false",
      "--node-selector=node.kubernetes.io/pool in (spot,batch),!dedicated",
      "--protected-labels=keep,example.com/tier=critical",
      "--protected-annotations=example.com/note=do not delete",
      "--not-ready-timeout=0",
      "--ping-timeout=500ms",
      "--ping-count=1",
      "--probes=tcp",
      "--kubelet-port=10251",
      "--reconcile-interval=1s",
      "--max-deletions-per-minute=1",
      "--unhealthy-threshold=1",
      "--leader-elect=false",
      "--leader-elect-lease-duration=3s",
      "--leader-elect-renew-deadline=2s",
      "--leader-elect-retry-period=500ms",
      "--leader-elect-resource-name=nlc.example",
      "--leader-elect-resource-namespace=ops",
      "--dry-run",
      "--controllers=-node-lifecycle,kubelet-serving-csr",
      "--csr-ip-allowlist=198.18.0.0/15,fd00:198:18::/48",
      "--csr-dns-pattern={node}\\.lan",
      "--csr-api-server-names=api.example.com",
      "--csr-max-expiration=24h",
      "--csr-pending-timeout=1m",
      "--kubeconfig=/k",
      "--v=2",
      "--log-format=json",
      "--health-bind-address=127.0.0.1:0",
      "--metrics-bind-address=[::1]:0",
    ]);
    assert.deepEqual(flags, {
      watchAutoscalerTaint: false,
      nodeSelector: {
        text: "node.kubernetes.io/pool in (spot,batch),!dedicated",
        requirements: [
          { key: "node.kubernetes.io/pool", operator: "in", values: ["spot", "batch"] },
          { key: "dedicated", operator: "!", values: [] },
        ],
      },
      protectedLabels: [{ key: "keep" }, { key: "example.com/tier", value: "critical" }],
      protectedAnnotations: [{ key: "example.com/note", value: "do not delete" }],
      notReadyTimeoutMs: 0,
      pingTimeoutMs: 500,
      pingCount: 1,
      probes: ["tcp"],
      kubeletPort: 10251,
      reconcileIntervalMs: 1000,
      maxDeletionsPerMinute: 1,
      unhealthyThreshold: 1,
      leaderElection: {
        enabled: false,
        leaseDurationMs: 3000,
        renewDeadlineMs: 2000,
        retryPeriodMs: 500,
        resourceName: "nlc.example",
        resourceNamespace: "ops",
      },
      dryRun: true,
      controllers: new Set(["kubelet-serving-csr"]),
      csr: {
        apiServerNames: ["api.example.com"],
        extraDnsNames: { text: "{node}\\.lan" },
        ipAllowlist: [
          { address: "198.18.0.0", prefixLength: 15, family: 4 },
          { address: "fd00:198:18::", prefixLength: 48, family: 6 },
        ],
        maxExpirationSeconds: 86_400,
        pendingTimeoutMs: 60_000,
      },
      kubeconfig: "/k",
      verbosity: 2,
      logFormat: "json",
      healthBindAddress: { host: "127.0.0.1", port: 0 },
      metrics: { address: { host: "::1", port: 0 }, secure: true, withHealth: false, tokenAudiences: [] },
    });
  });

  test("lease namespace: flag, then POD_NAMESPACE, then the service account's, then kube-system", () => {
    const inPod = () => "from-sa";
    const namespace = (argv: string[], env: Record<string, string>, sa: () => string | undefined) =>
      parse(argv, env, sa).leaderElection.resourceNamespace;
    assert.equal(
      namespace(["--leader-elect-resource-namespace=flag"], { POD_NAMESPACE: "env" }, inPod),
      "flag",
    );
    assert.equal(namespace([], { POD_NAMESPACE: "env" }, inPod), "env");
    assert.equal(namespace([], {}, inPod), "from-sa");
    assert.equal(namespace([], {}, noServiceAccount), "kube-system");
    assert.throws(() => parse([], { POD_NAMESPACE: "Bad_NS" }), {
      message:
        'invalid value "Bad_NS" for POD_NAMESPACE (--leader-elect-resource-namespace): ' +
        "must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63)",
    });
  });

  test("bad input: one-line errors", () => {
    // The wording after the flag is labelselector.ts's; what matters here is that it is a UsageError.
    const usageError = (argv: string[], prefix: string) =>
      assert.throws(
        () => parse(argv),
        (err: unknown) =>
          err instanceof UsageError && err.message.startsWith(prefix) && !err.message.includes("\n"),
      );
    usageError(
      ["--node-selector=a b"],
      'invalid value "a b" for --node-selector: invalid label selector "a b": ',
    );
    usageError(
      ["--protected-labels=ok,bad key"],
      'invalid value "ok,bad key" for --protected-labels: invalid label "bad key": ',
    );
    usageError(
      ["--protected-annotations=-bad=x"],
      'invalid value "-bad=x" for --protected-annotations: invalid annotation "-bad=x": ',
    );
    rejects(
      ["--not-ready-timeout=5"],
      'invalid value "5" for --not-ready-timeout: not a duration (e.g. 10s, 1m30s, 500ms)',
    );
    rejects(["--ping-timeout=0s"], 'invalid value "0s" for --ping-timeout: must be greater than 0');
    rejects(["--ping-count=0"], 'invalid value "0" for --ping-count: must be at least 1');
    rejects(["--ping-count=three"], 'invalid value "three" for --ping-count: not an integer');
    rejects(["--probes="], 'invalid value "" for --probes: name at least one of: icmp, tcp');
    rejects(["--probes=icmp,http"], 'invalid value "icmp,http" for --probes: must be one of: icmp, tcp');
    rejects(["--probes=tcp,tcp"], 'invalid value "tcp,tcp" for --probes: "tcp" is given twice');
    rejects(["--kubelet-port=0"], 'invalid value "0" for --kubelet-port: must be between 1 and 65535');
    rejects(["--reconcile-interval=0"], 'invalid value "0" for --reconcile-interval: must be greater than 0');
    rejects(
      ["--max-deletions-per-minute=0"],
      'invalid value "0" for --max-deletions-per-minute: must be at least 1',
    );
    rejects(
      ["--unhealthy-threshold=0"],
      'invalid value "0" for --unhealthy-threshold: must be greater than 0 and at most 1',
    );
    rejects(
      ["--unhealthy-threshold=1.5"],
      'invalid value "1.5" for --unhealthy-threshold: must be greater than 0 and at most 1',
    );
    rejects(["--unhealthy-threshold=half"], 'invalid value "half" for --unhealthy-threshold: not a number');
    rejects(
      ["--leader-elect-lease-duration=10s"],
      "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline",
    );
    rejects(
      ["--leader-elect-retry-period=10s"],
      "--leader-elect-renew-deadline must be greater than --leader-elect-retry-period",
    );
    rejects(
      ["--leader-elect-resource-name=Bad"],
      'invalid value "Bad" for --leader-elect-resource-name: ' +
        "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.', at most 253)",
    );
    rejects(["--dry-run=maybe"], 'invalid value "maybe" for --dry-run: not a boolean (true or false)');
    rejects(["--node-name=x"], "unknown flag: --node-name");
  });

  test("--help", () => {
    assert.throws(() => parse(["-h"]), HelpRequested);
  });
});

describe("--controllers, as kube-controller-manager's", () => {
  const cases: [string, string[]][] = [
    ["*", ["node-lifecycle", "service"]],
    ["*,kubelet-serving-csr", ["node-lifecycle", "kubelet-serving-csr", "service"]],
    ["kubelet-serving-csr", ["kubelet-serving-csr"]],
    ["*,-node-lifecycle,kubelet-serving-csr", ["kubelet-serving-csr", "service"]],
    ["*,-service", ["node-lifecycle"]],
    ["node-lifecycle", ["node-lifecycle"]],
  ];
  for (const [text, enabled] of cases)
    test(`${text} runs ${enabled.join(", ")}`, () => assert.deepEqual(parse([`--controllers=${text}`]).controllers, new Set(enabled)));

  test("class-less Services are claimed by one running controller at most", () => {
    rejects(
      ["--controllers=*,service-l2-pools", "--lb-claim-classless", "--lb-l2-claim-classless"],
      "--lb-claim-classless and --lb-l2-claim-classless both claim Services without a loadBalancerClass: turn on one",
    );
    rejects(
      ["--controllers=*,-service,service-l2-pools", "--lb-bgp", "--lb-l2-claim-classless", "--lb-bgp-claim-classless"],
      "--lb-l2-claim-classless and --lb-bgp-claim-classless both claim Services without a loadBalancerClass: turn on one",
    );
    rejects(
      ["--controllers=*,service-l2-pools", "--lb-bgp-claim-classless"],
      "--lb-bgp-claim-classless needs --lb-bgp: class-less Services would go over BGP",
    );
    const overBgp = ["--controllers=*,-service,service-l2-pools", "--lb-bgp", "--lb-bgp-claim-classless"];
    assert.equal(configOf(parseManagerFlags(overBgp, {}, noServiceAccount), servicePools).bgpClaimClassless, true);
    // A controller that does not run claims nothing.
    const flags = ["--lb-claim-classless", "--lb-l2-claim-classless"];
    assert.deepEqual(parse(["--controllers=*", ...flags]).controllers, new Set(["node-lifecycle", "service"]));
  });

  test("unknown names and an empty choice are usage errors", () => {
    rejects(
      ["--controllers=*,csr"],
      'invalid value "*,csr" for --controllers: unknown controller "csr" (known: node-lifecycle, kubelet-serving-csr, service, service-l2-pools, bgppeer-status)',
    );
    rejects(
      ["--controllers=-node-lifecycle,-service"],
      'invalid value "-node-lifecycle,-service" for --controllers: no controller enabled',
    );
  });

  test("the approver's flags are checked", () => {
    rejects(["--csr-dns-pattern=.*\\.lan"], String.raw`invalid value ".*\.lan" for --csr-dns-pattern: DNS name pattern .*\.lan: must contain {node} (a name without it could be any node's)`);
    rejects(["--csr-max-expiration=5m"], `invalid value "5m" for --csr-max-expiration: must be at least 10m (the API's minimum)`);
    assert.equal(parse(["--csr-max-expiration=87600h"]).csr.maxExpirationSeconds, 10 * 365 * 24 * 3600);
  });
});

describe("the program's flag table", () => {
  test("Helm values names: the program's under nodeLifecycleController.controller, the controllers' own", () => {
    const helm = Object.fromEntries(
      managerFlagTable.map((spec) => [spec.name, "helm" in spec ? spec.helm : undefined]),
    );
    const prefix = "nodeLifecycleController.controller.";
    assert.deepEqual(helm, {
      "watch-autoscaler-taint": `${prefix}watchAutoscalerTaint`,
      "node-selector": "nodeLifecycleController.nodeDeletion.nodes",
      "protected-labels": `${prefix}protectedLabels`,
      "protected-annotations": `${prefix}protectedAnnotations`,
      "not-ready-timeout": `${prefix}notReadyTimeout`,
      "ping-timeout": `${prefix}pingTimeout`,
      "ping-count": `${prefix}pingCount`,
      probes: `${prefix}probes`,
      "kubelet-port": `${prefix}kubeletPort`,
      "reconcile-interval": `${prefix}reconcileInterval`,
      "max-deletions-per-minute": `${prefix}maxDeletionsPerMinute`,
      "unhealthy-threshold": `${prefix}unhealthyThreshold`,
      "leader-elect": `${prefix}leaderElection.enabled`,
      "leader-elect-lease-duration": `${prefix}leaderElection.leaseDuration`,
      "leader-elect-renew-deadline": `${prefix}leaderElection.renewDeadline`,
      "leader-elect-retry-period": `${prefix}leaderElection.retryPeriod`,
      "leader-elect-resource-name": `${prefix}leaderElection.resourceName`,
      "leader-elect-resource-namespace": `${prefix}leaderElection.resourceNamespace`,
      "dry-run": `${prefix}dryRun`,
      controllers: undefined,
      "csr-ip-allowlist": "csrApproval.rules.ipAllowlist",
      "csr-dns-pattern": "csrApproval.rules.dnsPattern",
      "csr-api-server-names": "csrApproval.rules.apiServerNames",
      "csr-max-expiration": "csrApproval.rules.maxExpiration",
      "csr-pending-timeout": "csrApproval.rules.pendingTimeout",
      "lb-claim-classless": "loadBalancer.claimClassless",
      "lb-node-selector": "loadBalancer.nodeAddress.nodes",
      "lb-max-nodes": "loadBalancer.maxNodes",
      "lb-reserved-ports": "loadBalancer.reservedPorts",
      "lb-node-port-range": "loadBalancer.nodePortRange",
      "lb-unknown-threshold": "loadBalancer.nodeAddress.unknownThreshold",
      "lb-unknown-grace": "loadBalancer.nodeAddress.unknownGrace",
      "lb-l2-claim-classless": "loadBalancer.l2.pools.claimClassless",
      "lb-bgp": "bgp.enabled",
      "lb-bgp-claim-classless": "bgp.claimClassless",
      "lb-l2-lease-namespace": undefined,
      kubeconfig: undefined,
      v: `${prefix}verbosity`,
      "log-format": `${prefix}logFormat`,
      "health-bind-address": `${prefix}healthBindAddress`,
      "metrics-bind-address": `${prefix}metricsBindAddress`,
      "secure-metrics": `${prefix}secureMetrics`,
      "metrics-cert-file": undefined,
      "metrics-key-file": undefined,
      "metrics-token-audiences": `${prefix}metricsTokenAudiences`,
    });
  });
});
