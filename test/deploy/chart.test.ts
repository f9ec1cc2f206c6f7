// The Helm chart against the programs' flag tables: values.yaml, values.schema.json and flags.yaml
// agree with the tables; every value reaches its program as its flag (the rendered args parse back
// with the program's own parser); bad values are rejected with messages naming them; the static
// deploy/ files are the chart's default render.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { before, describe, test } from "node:test";
import type { Container, PodSpec } from "kubernetes-types/core/v1.js";
import { parse, parseAllDocuments, stringify } from "yaml";
import { parseAgentFlags } from "../../src/agent/flags.ts";
import { type FlagSpec, parseFlags, UsageError } from "../../src/cli/flags.ts";
import { LOG_FORMATS } from "../../src/cli/log.ts";
import { nodeLifecycle } from "../../src/lifecycle/definition.ts";
import { CONTROLLERS } from "../../src/manager/registry.ts";
import { ANNOUNCER_LEASE_LABEL, ANNOUNCER_LEASE_PREFIX } from "../../src/pools/announcement.ts";
import { configOf, parseManagerFlags } from "../../src/manager/flags.ts";
import {
  CHART_DIR,
  chartFlagsYaml,
  DEPLOY_DIR,
  CONTROLLERS_FILE,
  chartControllersYaml,
  FLAGS_FILE,
  helmTemplate,
  KUBE_VERSION_FLAG,
  PROGRAM_FLAGS,
  renderDeployFiles,
  templateNames,
} from "../../scripts/render-manifests.ts";
import { ensureBinaries } from "../../localcluster/build.ts";
import { run } from "../../localcluster/exec.ts";
import { CHART_CERTIFICATE_ARGS } from "./shipped.ts";

type Program = keyof typeof PROGRAM_FLAGS;
type Values = Record<string, unknown>;
interface PodMetadata {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: { template?: { metadata?: PodMetadata; spec: PodSpec } } & Record<string, unknown>;
  [key: string]: unknown;
}

const ROOT = path.resolve(import.meta.dirname, "../..");
const PROGRAMS = Object.keys(PROGRAM_FLAGS) as Program[];
/** The workload that runs each program. */
const WORKLOAD: Record<Program, { kind: string; name: string }> = {
  "local-ccm": { kind: "DaemonSet", name: "local-ccm" },
  "node-lifecycle-controller": { kind: "Deployment", name: "node-lifecycle-controller" },
};
/** What the downward API gives each program in a pod (for parsing its rendered args). */
const POD_ENV: Record<Program, Record<string, string>> = {
  "local-ccm": { NODE_NAME: "node-a", POD_IP: "198.18.0.7", POD_NAMESPACE: "kube-system" },
  "node-lifecycle-controller": { POD_NAMESPACE: "kube-system", POD_NAME: "nlc-0" },
};

const helmFlags = (program: Program): FlagSpec[] =>
  (PROGRAM_FLAGS[program] as readonly FlagSpec[]).filter((spec) => spec.helm !== undefined);

/** String flags that the program reads as comma lists (key or key=value items): the chart takes YAML lists too. */
const COMMA_LISTS = new Set(["protected-labels", "protected-annotations"]);
/** List flags of ports: one port may also be a number (`--set loadBalancer.reservedPorts=22` gives one). */
const PORT_LISTS = new Set(["lb-reserved-ports"]);

/** The value of a flag as a Helm value: booleans and numbers typed, the rest as the flag's text. */
function helmValue(spec: FlagSpec, text: string): unknown {
  if (spec.type === "bool") return text === "true";
  if (spec.type === "int" || spec.type === "float") return Number(text);
  return text;
}

function at(values: unknown, dotted: string): unknown {
  return dotted.split(".").reduce<unknown>((node, key) => (node as Values | undefined)?.[key], values);
}

/** Dotted paths of every leaf (non-object value) below `values`. */
function leafPaths(values: Values, prefix = ""): string[] {
  return Object.entries(values).flatMap(([key, value]) =>
    value !== null && typeof value === "object" && !Array.isArray(value)
      ? leafPaths(value as Values, `${prefix}${key}.`)
      : [`${prefix}${key}`],
  );
}

/** Whether a program accepts `--flag=text` alone (on top of its pod's environment). */
function accepts(program: Program, args: string[]): boolean {
  try {
    parseProgram(program, args);
    return true;
  } catch (err) {
    if (err instanceof UsageError) return false;
    throw err;
  }
}

/** Rendered args as the program gets them: kubelet expands $(VAR) from the container's environment. */
const expand = (program: Program, args: string[]) =>
  args.map((arg) => arg.replace(/\$\((\w+)\)/g, (whole, name: string) => POD_ENV[program][name] ?? whole));

function parseProgram(program: Program, rendered: string[]): void {
  const args = expand(program, rendered);
  if (program === "local-ccm") parseAgentFlags(args, POD_ENV[program]);
  else parseManagerFlags(args, POD_ENV[program], () => undefined);
}

/** Values a user might set, by flag type; the first one a flag accepts (and is not its default) is used. */
const CANDIDATES: Record<FlagSpec["type"], (spec: FlagSpec) => string[]> = {
  bool: (spec) => [String(spec.default !== "true")],
  int: (spec) => [String(Number(spec.default) + 1)],
  float: () => ["0.75"],
  duration: () => ["1m7s", "12s", "3s", "2h30m"],
  string: () => [
    "json",
    "auto",
    "local://{nodeName}",
    "127.0.0.1:19999",
    "custom-lease",
    "node.kubernetes.io/pool in (spot, batch)",
    "example.com/keep=yes,example.com/pin",
    String.raw`{node}\.nodes\.example\.com`,
    "20000-22767",
  ],
  list: () => [
    "198.18.0.1, fd00:198:18::1",
    "198.18.0.0/15,fd00:198:18::/48",
    "eth1,bond0",
    "tcp",
    "cidr:198.18.0.0/15=rack-1,name:^([a-z]+)-=$1",
    "cidr:198.18.0.0/15=example.com/rack=r1, name:^gpu-=node-role.kubernetes.io/gpu=",
    "name:^gpu-=nvidia.com/gpu=present:NoSchedule,dmi.sys_vendor:^NVIDIA=example.com/vendor=nvidia:PreferNoSchedule",
    "22,8000-8080",
  ],
};

/** Values that another value needs beside it (its program refuses it alone), by Helm path. */
const NEEDS: Record<string, Record<string, unknown>> = {
  "bgp.claimClassless": { "bgp.enabled": true },
  "bgp.advertisePodCIDRs": { "bgp.enabled": true },
  "bgp.networkUnavailableCondition": { "bgp.enabled": true, "bgp.advertisePodCIDRs": true },
};

/** `beside`: the args the values it NEEDS render to. */
function nonDefaultValue(program: Program, spec: FlagSpec, beside: string[] = []): string {
  const value = CANDIDATES[spec.type](spec).find(
    (text) => text !== spec.default && accepts(program, [...beside, `--${spec.name}=${text}`]),
  );
  assert.ok(value !== undefined, `no candidate value for --${spec.name}`);
  return value;
}

/** A value the flag rejects, by type: wrong JSON types for typed values, bad text for strings. */
function badValue(spec: FlagSpec): unknown {
  switch (spec.type) {
    case "bool":
      return "yes";
    case "int":
      return 1.5;
    case "float":
      return "half";
    case "duration":
      return "ten seconds";
    default: {
      const text = ["bad$value", "has space/and slash"].find((candidate) => {
        try {
          parseFlags([spec], [`--${spec.name}=${candidate}`], {});
          return false;
        } catch {
          return true;
        }
      });
      assert.ok(text, `no bad value found for --${spec.name}`);
      return text;
    }
  }
}

/** The whole error output of a `helm template` that must fail (run() keeps only its last lines). */
async function helmFailure(helm: string, args: string[]): Promise<string> {
  const result = spawnSync(helm, ["template", "local-ccm", CHART_DIR, KUBE_VERSION_FLAG, ...args], { encoding: "utf8" });
  assert.notEqual(result.status, 0, `helm template accepted ${args.join(" ")}`);
  return result.stderr;
}

/** The one line a failed render ends with: Helm's "Error: execution error at (<template>): <message>". */
function errorLine(stderr: string): string {
  const lines = stderr.split("\n").filter((line) => line.startsWith("Error: "));
  assert.equal(lines.length, 1, `one error line in: ${stderr}`);
  return lines[0] as string;
}

/**
 * Options the programs refuse together (or a duration out of the range its flag accepts): the values, the line
 * the chart fails with, and the program's own flags for them (undefined: a rule of the chart alone).
 */
const REFUSALS: { values: Record<string, unknown>; line: string; program?: Program; args?: string[] }[] = [
  {
    values: { "ipDetection.externalIPTarget": "1.1.1.1", "ipDetection.externalIPInterface": "eth0" },
    line: "ipDetection.externalIPTarget and ipDetection.externalIPInterface both choose how ExternalIPs are found: set one",
    program: "local-ccm",
    args: ["--external-ip-target=1.1.1.1", "--external-ip-interface=eth0"],
  },
  {
    values: { "ipDetection.externalIPCIDR": ["198.18.0.0/15"], "ipDetection.externalIPInterface": ["eth0"] },
    line: "ipDetection.externalIPCIDR and ipDetection.externalIPInterface both choose how ExternalIPs are found: set one",
    program: "local-ccm",
    args: ["--external-ip-cidr=198.18.0.0/15", "--external-ip-interface=eth0"],
  },
  {
    values: { "ipDetection.internalIPTarget": "10.0.0.1", "ipDetection.internalIPCIDR": "10.0.0.0/8" },
    line: "ipDetection.internalIPTarget and ipDetection.internalIPCIDR both choose how InternalIPs are found: set one",
    program: "local-ccm",
    args: ["--internal-ip-target=10.0.0.1", "--internal-ip-cidr=10.0.0.0/8"],
  },
  {
    values: { "nodeLifecycleController.controller.leaderElection.renewDeadline": "20s" },
    line:
      "nodeLifecycleController.controller.leaderElection.leaseDuration=15s must be longer than " +
      "nodeLifecycleController.controller.leaderElection.renewDeadline=20s",
    program: "node-lifecycle-controller",
    args: ["--leader-elect-renew-deadline=20s"],
  },
  {
    values: { "nodeLifecycleController.controller.leaderElection.retryPeriod": "10000ms" },
    line:
      "nodeLifecycleController.controller.leaderElection.renewDeadline=10s must be longer than " +
      "nodeLifecycleController.controller.leaderElection.retryPeriod=10000ms",
    program: "node-lifecycle-controller",
    args: ["--leader-elect-retry-period=10000ms"],
  },
  {
    values: {
      "loadBalancer.l2.enabled": true,
      "loadBalancer.claimClassless": true,
      "loadBalancer.l2.pools.claimClassless": true,
    },
    line:
      "loadBalancer.claimClassless and loadBalancer.l2.pools.claimClassless both claim Services without a " +
      "loadBalancerClass: set one",
    program: "node-lifecycle-controller",
    args: ["--controllers=*,service-l2-pools", "--lb-claim-classless", "--lb-l2-claim-classless"],
  },
  {
    values: { "bgp.enabled": true, "loadBalancer.l2.pools.claimClassless": true, "bgp.claimClassless": true },
    line:
      "loadBalancer.l2.pools.claimClassless and bgp.claimClassless both claim Services without a loadBalancerClass: " +
      "set one",
    program: "node-lifecycle-controller",
    args: ["--controllers=*,service-l2-pools", "--lb-bgp", "--lb-l2-claim-classless", "--lb-bgp-claim-classless"],
  },
  {
    values: { "bgp.claimClassless": true },
    line: "bgp.claimClassless needs bgp.enabled: class-less Services would go over BGP",
    program: "local-ccm",
    args: ["--bgp-claim-classless"],
  },
  {
    values: { "bgp.advertisePodCIDRs": true },
    line: "bgp.advertisePodCIDRs needs bgp.enabled: the pod CIDRs go over the agents' BGP sessions",
    program: "local-ccm",
    args: ["--bgp-advertise-pod-cidrs"],
  },
  {
    values: { "bgp.enabled": true, "bgp.networkUnavailableCondition": true },
    line: "bgp.networkUnavailableCondition needs bgp.advertisePodCIDRs: the condition follows the pod CIDRs' routes",
    program: "local-ccm",
    args: ["--bgp-speaker", "--bgp-network-unavailable-condition"],
  },
  {
    values: { "nodeLifecycleController.controller.pingTimeout": "0s" },
    line: "nodeLifecycleController.controller.pingTimeout=0s: --ping-timeout must be greater than 0",
    program: "node-lifecycle-controller",
    args: ["--ping-timeout=0s"],
  },
  {
    values: { "metadata.timeout": "596h31m23.648s" },
    line: "metadata.timeout=596h31m23.648s: --metadata-timeout is too long (at most 596h)",
    program: "local-ccm",
    args: ["--metadata-timeout=596h31m23.648s"],
  },
  {
    values: { "csrApproval.rules.maxExpiration": "9m59s" },
    line: "csrApproval.rules.maxExpiration=9m59s: --csr-max-expiration must be at least 600s",
    program: "node-lifecycle-controller",
    args: ["--csr-max-expiration=9m59s"],
  },
  {
    values: { "agent.healthBindAddress": "127.0.0.1:65536" },
    line: "agent.healthBindAddress=127.0.0.1:65536: the port must be at most 65535",
    program: "local-ccm",
    args: ["--health-bind-address=127.0.0.1:65536"],
  },
  {
    values: { "ipDetection.internalIPCIDR": ["10.0.0.0/8", "::ffff:10.0.0.0/104"] },
    line: 'ipDetection.internalIPCIDR: "::ffff:10.0.0.0/104" is an IPv4-mapped IPv6 address, which Kubernetes refuses: write it as IPv4',
    program: "local-ccm",
    args: ["--internal-ip-cidr=10.0.0.0/8,::ffff:10.0.0.0/104"],
  },
  {
    values: { "ipDetection.externalIPTarget": ["8.8.8.8", "0:0::0"] },
    line: 'ipDetection.externalIPTarget: "0:0::0" is the unspecified address, not a target',
    program: "local-ccm",
    args: ["--external-ip-target=8.8.8.8,0:0::0"],
  },
  {
    values: { "loadBalancer.reservedPorts": ["22", "9100-9000"] },
    line: 'loadBalancer.reservedPorts: "9100-9000" runs backwards: write a range from-to, lower port first',
    program: "node-lifecycle-controller",
    args: ["--lb-reserved-ports=22,9100-9000"],
  },
  {
    values: { "loadBalancer.nodePortRange": "32767-30000" },
    line: 'loadBalancer.nodePortRange: "32767-30000" runs backwards: write a range from-to, lower port first',
    program: "node-lifecycle-controller",
    args: ["--lb-node-port-range=32767-30000"],
  },
  {
    values: { "nodeLifecycleController.enabled": false, "csrApproval.enabled": true },
    line:
      "csrApproval.enabled needs nodeLifecycleController.enabled: the approver runs in the " +
      "node-lifecycle-controller Deployment (nodeLifecycleController.nodeDeletion.enabled=false turns off node " +
      "deletion alone)",
  },
  {
    // Agents that announce (as root, with NET_RAW) and no controller that allocates.
    values: { "nodeLifecycleController.enabled": false, "loadBalancer.l2.enabled": true },
    line:
      "loadBalancer.l2.enabled needs nodeLifecycleController.enabled: the pool controller runs in the " +
      "node-lifecycle-controller Deployment (nodeLifecycleController.nodeDeletion.enabled=false turns off node " +
      "deletion alone)",
  },
  {
    values: { "nodeLifecycleController.enabled": false, "bgp.enabled": true },
    line:
      "bgp.enabled needs nodeLifecycleController.enabled: the pool controller runs in the " +
      "node-lifecycle-controller Deployment (nodeLifecycleController.nodeDeletion.enabled=false turns off node " +
      "deletion alone)",
  },
  {
    values: { "nodeLifecycleController.nodeDeletion.enabled": false, "loadBalancer.nodeAddress.enabled": false },
    line:
      "nodeLifecycleController.nodeDeletion.enabled, csrApproval.enabled, loadBalancer.nodeAddress.enabled, " +
      "loadBalancer.l2.enabled and bgp.enabled are all off: set nodeLifecycleController.enabled=false",
    program: "node-lifecycle-controller",
    args: ["--controllers=*,-node-lifecycle,-service"],
  },
];

/** The service controller's cluster-wide rules, as its definition lists them. */
const SERVICE_CONTROLLER_RULES = [
  { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
  { apiGroups: [""], resources: ["services"], verbs: ["list", "watch", "patch"] },
  { apiGroups: [""], resources: ["services/status"], verbs: ["patch"] },
  { apiGroups: [""], resources: ["nodes"], verbs: ["list", "watch"] },
  { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
  { apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] },
];

const CONTROL_PLANE_AFFINITY = {
  nodeAffinity: {
    requiredDuringSchedulingIgnoredDuringExecution: {
      nodeSelectorTerms: [{ matchExpressions: [{ key: "node-role.kubernetes.io/control-plane", operator: "Exists" }] }],
    },
  },
};
const CONTROL_PLANE_TOLERATION = {
  key: "node-role.kubernetes.io/control-plane",
  operator: "Exists",
  effect: "NoSchedule",
};
const UNINITIALIZED_TOLERATION = {
  key: "node.cloudprovider.kubernetes.io/uninitialized",
  operator: "Exists",
  effect: "NoSchedule",
};

/** `--set-json path=value` for each entry. */
const setJson = (values: Record<string, unknown>) =>
  Object.entries(values).flatMap(([dotted, value]) => ["--set-json", `${dotted}=${JSON.stringify(value)}`]);

/** Both programs' probes, as the chart renders them. */
const PROBES = {
  liveness: { httpGet: { path: "/healthz", port: "health" }, timeoutSeconds: 5, periodSeconds: 10, failureThreshold: 6 },
  readiness: { httpGet: { path: "/readyz", port: "health" }, timeoutSeconds: 5 },
};

describe("Helm chart", () => {
  let helm: string;
  const render = async (args: string[] = []): Promise<KubeObject[]> =>
    parseAllDocuments(await helmTemplate(helm, args))
      .map((doc) => doc.toJS() as KubeObject | null)
      .filter((obj): obj is KubeObject => obj !== null);
  const find = (objects: KubeObject[], kind: string, name: string) => {
    const found = objects.find((obj) => obj.kind === kind && obj.metadata.name === name);
    assert.ok(found, `${kind} ${name} is rendered`);
    return found;
  };
  const podSpec = (objects: KubeObject[], program: Program): PodSpec => {
    const { kind, name } = WORKLOAD[program];
    return find(objects, kind, name).spec?.template?.spec as PodSpec;
  };
  const container = (objects: KubeObject[], program: Program): Container =>
    podSpec(objects, program).containers[0] as Container;
  /** A program's args less the chart's metrics certificate (passed whenever its metrics are secure): what values set. */
  const valueArgs = (objects: KubeObject[], program: Program): string[] | undefined => {
    const args = (container(objects, program).args ?? []).filter((arg) => !CHART_CERTIFICATE_ARGS.includes(arg));
    return args.length > 0 ? args : undefined;
  };

  let values: Values;
  let schema: Values;
  let appVersion: string;

  before(async () => {
    ({ helm } = await ensureBinaries());
    values = parse(await readFile(path.join(CHART_DIR, "values.yaml"), "utf8")) as Values;
    schema = JSON.parse(await readFile(path.join(CHART_DIR, "values.schema.json"), "utf8")) as Values;
    const packageJson = await readFile(path.join(ROOT, "package.json"), "utf8");
    appVersion = (JSON.parse(packageJson) as { version: string }).version;
  });

  test("helm lint passes", async () => {
    const out = await run(helm, ["lint", "--strict", CHART_DIR]);
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  test("Chart.yaml: apiVersion v2, local-ccm 0.1.0, appVersion from package.json", async () => {
    const chart = parse(await readFile(path.join(CHART_DIR, "Chart.yaml"), "utf8")) as Values;
    assert.equal(chart.apiVersion, "v2");
    assert.equal(chart.name, "local-ccm");
    assert.equal(chart.version, "0.1.0");
    assert.equal(chart.appVersion, appVersion);
  });

  test("kubeVersion: the chart renders for Kubernetes 1.33 and later, the release the tests run, and refuses 1.32", async () => {
    const chart = parse(await readFile(path.join(CHART_DIR, "Chart.yaml"), "utf8")) as Values;
    assert.equal(chart.kubeVersion, ">=1.33.0-0");
    for (const version of ["v1.33.0", KUBE_VERSION_FLAG.replace("--kube-version=", "")])
      await run(helm, ["template", "local-ccm", CHART_DIR, `--kube-version=${version}`, "--show-only=templates/daemonset.yaml"]);
    const older = spawnSync(helm, ["template", "local-ccm", CHART_DIR, "--kube-version=v1.32.9"], { encoding: "utf8" });
    assert.notEqual(older.status, 0);
    assert.match(older.stderr, /chart requires kubeVersion: >=1\.33\.0-0 which is incompatible with Kubernetes v1\.32\.9/);
  });

  test("values.yaml holds each flag's Helm value at the flag's default, and nothing else beside", () => {
    const specs = PROGRAMS.flatMap(helmFlags);
    for (const spec of specs) {
      assert.deepEqual(at(values, spec.helm as string), helmValue(spec, spec.default), spec.helm);
    }
    // Objects that hold flag values hold nothing else but the switches of the controllers they configure.
    const flagValues = specs.map((spec) => spec.helm as string);
    const switches = new Set(CONTROLLERS.flatMap((controller) => controller.helmEnabled ?? []));
    const flagParents = new Set(flagValues.map((value) => value.replace(/\.[^.]+$/, "")));
    const inFlagSections = leafPaths(values).filter(
      (leaf) => flagParents.has(leaf.replace(/\.[^.]+$/, "")) && !(switches.has(leaf) && !flagValues.includes(leaf)),
    );
    // One value may switch flags of both programs (bgp.enabled: --lb-bgp and --bgp-speaker).
    assert.deepEqual(inFlagSections.sort(), [...new Set(flagValues)].sort());
  });

  test("values.schema.json types each flag value as its flag and closes the flag sections", () => {
    const resolve = (node: Values): Values => {
      const ref = node.$ref as string | undefined;
      return ref ? resolve(at(schema, ref.replace(/^#\//, "").replaceAll("/", ".")) as Values) : node;
    };
    const schemaAt = (dotted: string): Values | undefined =>
      dotted.split(".").reduce<Values | undefined>((node, key) => {
        const child = (node?.properties as Values | undefined)?.[key] as Values | undefined;
        return child && resolve(child);
      }, schema);
    // Numbers also as strings (--set makes decimals strings, --set-string everything); lists also as YAML lists.
    const jsonType: Record<FlagSpec["type"], string[]> = {
      bool: ["boolean"],
      int: ["integer", "string"],
      float: ["number", "string"],
      duration: ["string"],
      string: ["string"],
      list: ["string", "array"],
    };
    const types = (spec: FlagSpec) =>
      COMMA_LISTS.has(spec.name)
        ? jsonType.list
        : PORT_LISTS.has(spec.name)
          ? [...jsonType.list, "integer"]
          : jsonType[spec.type];
    for (const program of PROGRAMS) {
      for (const spec of helmFlags(program)) {
        const node = schemaAt(spec.helm as string);
        assert.ok(node, `schema has ${spec.helm}`);
        const found = node.enum ? (node.enum as unknown[]).map((item) => typeof item) : [node.type].flat();
        assert.deepEqual(new Set(found), new Set(types(spec)), spec.helm);
        const parent = schemaAt((spec.helm as string).replace(/\.[^.]+$/, ""));
        assert.equal(parent?.additionalProperties, false, `${spec.helm}: its section rejects unknown keys`);
      }
      const logFormat = helmFlags(program).find((spec) => spec.name === "log-format") as FlagSpec;
      assert.deepEqual(schemaAt(logFormat.helm as string)?.enum, [...LOG_FORMATS]);
    }
  });

  describe("renamed values (renamed.yaml): an old name works as its new one for a release", () => {
    // Per new name, values to set below it ("" for the name itself): the agent's include what templates read
    // directly (the metrics port and its review rules), not only flag args.
    const SAMPLES: Record<string, [string, unknown][]> = {
      agent: [
        ["verbosity", 3],
        ["secureMetrics", false],
        ["metricsBindAddress", ":10263"],
        ["healthBindAddress", ":10263"],
      ],
      "nodeLifecycleController.nodeDeletion.nodes": [["", "node.kubernetes.io/pool=spot"]],
      "loadBalancer.nodeAddress.nodes": [["", "node-role.example.com/edge"]],
      "loadBalancer.l2.announcerNodes": [["", "topology.kubernetes.io/zone in (a,b)"]],
    };
    // The l2 selector is passed only while the agent announces.
    const CONTEXT = ["--set=loadBalancer.l2.enabled=true", "--set=metrics.generateCertificate=false"];
    let renamed: Record<string, string>;
    before(async () => {
      renamed = (parse(await readFile(path.join(CHART_DIR, "renamed.yaml"), "utf8")) as { renamed: Record<string, string> })
        .renamed;
    });

    test("every new name is in values.yaml, no old one is, and each rename has a sample here", () => {
      for (const [old, name] of Object.entries(renamed)) {
        assert.notEqual(at(values, name), undefined, `values.yaml has ${name}`);
        assert.equal(at(values, old), undefined, `values.yaml no longer has ${old}`);
      }
      assert.deepEqual(Object.keys(SAMPLES).sort(), Object.values(renamed).sort());
    });

    test("the manifests rendered with the old name equal those with the new one, which differ from the defaults", async () => {
      const defaults = await render(CONTEXT);
      for (const [old, name] of Object.entries(renamed)) {
        const under = (prefix: string) =>
          Object.fromEntries((SAMPLES[name] ?? []).map(([leaf, value]) => [leaf ? `${prefix}.${leaf}` : prefix, value]));
        const withNew = await render([...CONTEXT, ...setJson(under(name))]);
        assert.notDeepEqual(withNew, defaults, `${name} changes what is rendered`);
        assert.deepEqual(await render([...CONTEXT, ...setJson(under(old))]), withNew, `${old} renders as ${name}`);
      }
    });

    test("the schema still accepts each old name, marked deprecated", async () => {
      const schemaAt = (dotted: string) =>
        dotted.split(".").reduce<Values | undefined>((node, key) => (node?.properties as Values)?.[key] as Values, schema);
      for (const [old, name] of Object.entries(renamed))
        assert.match(String(schemaAt(old)?.description), new RegExp(`^Deprecated: renamed ${name.replaceAll(".", "\\.")} `));
      await assert.rejects(render(["--set=loadBalancer.nodeSelektor=a"]), /at '\/loadBalancer': additional properties 'nodeSelektor' not allowed/);
    });
  });

  test("flags.yaml is generated from the flag tables, controllers.yaml from the controller registry", async () => {
    assert.equal(await readFile(FLAGS_FILE, "utf8"), chartFlagsYaml(), "run `npm run manifests`");
    assert.equal(await readFile(CONTROLLERS_FILE, "utf8"), chartControllersYaml(), "run `npm run manifests`");
  });

  test("deploy/ is the chart rendered with default values", async () => {
    const rendered = await renderDeployFiles(helm);
    assert.deepEqual([...rendered.keys()].sort(), await templateNames());
    for (const [name, content] of rendered) {
      const committed = await readFile(path.join(DEPLOY_DIR, name), "utf8");
      assert.equal(committed, content, `deploy/${name}: run \`npm run manifests\``);
    }
  });

  describe("default values", () => {
    let objects: KubeObject[];
    before(async () => {
      objects = await render();
    });

    test("every object lives in kube-system or is cluster-scoped, but the Events grants in default", () => {
      const namespaced = [
        "ServiceAccount",
        "Secret",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "Deployment",
        "PodDisruptionBudget",
      ];
      const eventsGrant = (obj: KubeObject) => ["Role", "RoleBinding"].includes(obj.kind) && obj.metadata.name.endsWith("-events");
      for (const obj of objects) {
        const expected = eventsGrant(obj) ? "default" : namespaced.includes(obj.kind) ? "kube-system" : undefined;
        assert.equal(obj.metadata.namespace, expected, `${obj.kind} ${obj.metadata.name}`);
      }
    });

    test("no flag is passed but the chart's metrics certificate: every program runs with its own defaults", () => {
      assert.deepEqual(container(objects, "local-ccm").args, CHART_CERTIFICATE_ARGS);
      assert.deepEqual(container(objects, "node-lifecycle-controller").args, CHART_CERTIFICATE_ARGS);
    });

    test("the agent DaemonSet: host network, own node name, every node, hardened, small", () => {
      const daemonSet = find(objects, "DaemonSet", "local-ccm");
      assert.deepEqual(daemonSet.spec?.updateStrategy, {
        type: "RollingUpdate",
        rollingUpdate: { maxUnavailable: "10%" },
      });
      const pod = podSpec(objects, "local-ccm");
      assert.equal(pod.hostNetwork, true);
      assert.equal(pod.serviceAccountName, "local-ccm");
      assert.equal(pod.priorityClassName, "system-node-critical");
      assert.deepEqual(pod.tolerations, [{ operator: "Exists" }]);
      assert.deepEqual(pod.securityContext, {
        runAsNonRoot: true,
        runAsUser: 65532,
        runAsGroup: 65532,
        seccompProfile: { type: "RuntimeDefault" },
      });
      const agent = container(objects, "local-ccm");
      assert.equal(agent.image, `ghcr.io/local-ccm/local-ccm:${appVersion}`);
      assert.deepEqual(agent.command, ["node", "--optimize-for-size", "--jitless", "/app/dist/local-ccm.cjs"]);
      assert.deepEqual(agent.env, [
        { name: "NODE_NAME", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } },
        { name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
        { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
      ]);
      assert.deepEqual(agent.securityContext, {
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        capabilities: { drop: ["ALL"] },
      });
      assert.deepEqual(agent.resources, {
        requests: { cpu: "10m", memory: "32Mi" },
        limits: { memory: "64Mi" },
      });
      assert.deepEqual(agent.ports, [
        { name: "health", containerPort: 10263, protocol: "TCP" },
        { name: "metrics", containerPort: 10265, protocol: "TCP" },
      ]);
      // No host: kubelet probes the pod IP, which on the host network is the node IP the server binds. Liveness
      // restarts a process silent for a minute, not one slow on a loaded node (bench:bgp saw 1 s timeouts restart
      // the agents while 1,000 Services came in).
      assert.deepEqual(agent.livenessProbe, PROBES.liveness);
      assert.deepEqual(agent.readinessProbe, PROBES.readiness);
    });

    test("the controller Deployment: 2 replicas on control-plane nodes, only NET_RAW, pod identity, budget", () => {
      const deployment = find(objects, "Deployment", "node-lifecycle-controller");
      assert.equal(deployment.spec?.replicas, 2);
      assert.deepEqual(deployment.spec?.strategy, {
        type: "RollingUpdate",
        rollingUpdate: { maxSurge: 0, maxUnavailable: 1 },
      });
      const pod = podSpec(objects, "node-lifecycle-controller");
      // Only on control-plane nodes, whatever the label's value, tolerating their taint and uninitialised nodes;
      // one replica per node while nodes allow, also while the others wait for their agent (test/e2e proves it).
      assert.deepEqual(pod.affinity, CONTROL_PLANE_AFFINITY);
      assert.deepEqual(pod.tolerations, [CONTROL_PLANE_TOLERATION, UNINITIALIZED_TOLERATION]);
      assert.deepEqual(pod.nodeSelector, { "kubernetes.io/os": "linux" });
      assert.deepEqual(pod.topologySpreadConstraints, [
        {
          maxSkew: 1,
          topologyKey: "kubernetes.io/hostname",
          whenUnsatisfiable: "DoNotSchedule",
          nodeTaintsPolicy: "Honor",
          labelSelector: { matchLabels: { "app.kubernetes.io/name": "node-lifecycle-controller" } },
        },
      ]);
      assert.equal(pod.serviceAccountName, "node-lifecycle-controller");
      assert.equal(pod.hostNetwork, undefined);
      assert.equal(pod.securityContext?.runAsNonRoot, true);
      assert.equal(pod.securityContext?.runAsUser, 65532);
      assert.deepEqual(pod.securityContext?.seccompProfile, { type: "RuntimeDefault" });
      assert.deepEqual(pod.securityContext?.sysctls, [
        { name: "net.ipv4.ping_group_range", value: "65532 65532" },
      ]);
      const nlc = container(objects, "node-lifecycle-controller");
      assert.deepEqual(nlc.command, ["node", "--optimize-for-size", "--jitless", "/app/dist/node-lifecycle-controller.cjs"]);
      assert.deepEqual(nlc.securityContext, {
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        capabilities: { drop: ["ALL"], add: ["NET_RAW"] },
      });
      assert.deepEqual(nlc.env, [
        { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
        { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
      ]);
      assert.deepEqual(nlc.ports, [
        { name: "health", containerPort: 10264, protocol: "TCP" },
        { name: "metrics", containerPort: 10266, protocol: "TCP" },
      ]);
      assert.deepEqual(nlc.livenessProbe, PROBES.liveness);
      assert.deepEqual(nlc.readinessProbe, PROBES.readiness);
      const budget = find(objects, "PodDisruptionBudget", "node-lifecycle-controller");
      assert.deepEqual(budget.spec, {
        maxUnavailable: 1,
        selector: { matchLabels: { "app.kubernetes.io/name": "node-lifecycle-controller" } },
      });
    });

    test("the environment the pods get is what the flag tables read", () => {
      for (const program of PROGRAMS) {
        const names = (container(objects, program).env ?? []).map((env) => env.name);
        for (const spec of PROGRAM_FLAGS[program] as readonly FlagSpec[]) {
          if (spec.env) assert.ok(names.includes(spec.env), `${program} gets ${spec.env}`);
        }
      }
    });

    test("RBAC: the agent and the controller get exactly their verbs; Events in default, and the Services'", () => {
      const rules = (kind: string, name: string) => find(objects, kind, name).rules;
      // Secure metrics (the default): each program reviews its scrapers' tokens and access.
      const reviews = [
        { apiGroups: ["authentication.k8s.io"], resources: ["tokenreviews"], verbs: ["create"] },
        { apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
      ];
      assert.deepEqual(rules("ClusterRole", "local-ccm"), [
        { apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "patch"] },
        { apiGroups: [""], resources: ["nodes/status"], verbs: ["update"] },
        ...reviews,
      ]);
      // The service controller (on by default) records Events beside the Services, in any namespace.
      assert.deepEqual(rules("ClusterRole", "node-lifecycle-controller"), [
        { apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "delete"] },
        ...SERVICE_CONTROLLER_RULES,
        ...reviews,
      ]);
      // Its own Lease by name; create cannot be limited by name in RBAC (nlc-policy.yaml limits it).
      assert.deepEqual(rules("Role", "node-lifecycle-controller"), [
        {
          apiGroups: ["coordination.k8s.io"],
          resources: ["leases"],
          resourceNames: ["node-lifecycle-controller"],
          verbs: ["get", "update"],
        },
        { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"] },
      ]);
      for (const program of PROGRAMS) {
        const role = find(objects, "Role", `${program}-events`);
        assert.equal(role.metadata.namespace, "default");
        assert.deepEqual(role.rules, [{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }]);
        const binding = find(objects, "RoleBinding", `${program}-events`);
        assert.equal(binding.metadata.namespace, "default");
        assert.deepEqual(binding.roleRef, { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: `${program}-events` });
        assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: program, namespace: "kube-system" }]);
      }
    });
  });

  for (const program of PROGRAMS) {
    test(`${program}: each value reaches the program as its flag`, async () => {
      await Promise.all(
        helmFlags(program).map(async (spec) => {
          const needed = NEEDS[spec.helm as string];
          const beside = needed ? (valueArgs(await render(setJson(needed)), program) ?? []) : [];
          const text = nonDefaultValue(program, spec, beside);
          const objects = await render(setJson({ ...needed, [spec.helm as string]: helmValue(spec, text) }));
          const args = valueArgs(objects, program);
          // A value that also runs a controller (bgp.enabled: the pool controller) brings its --controllers item
          // and the pool controller's Lease namespace.
          const runs = CONTROLLERS.filter(
            (each) => !each.enabledByDefault && each.helmEnabled?.includes(spec.helm as string),
          );
          const switched =
            runs.length && program === "node-lifecycle-controller"
              ? [`--controllers=*,${runs.map(({ name }) => name).join(",")}`, "--lb-l2-lease-namespace=kube-system"]
              : [];
          const expected = [`--${spec.name}=${text}`, ...switched];
          // With values it needs, their own flags come too, in the chart's order: compared as a set there alone.
          if (needed) assert.deepEqual([...(args ?? [])].sort(), [...expected, ...beside].sort(), spec.helm);
          else assert.deepEqual(args, expected, spec.helm);
          const parsed = parseFlags(PROGRAM_FLAGS[program], expand(program, args ?? []), POD_ENV[program]).values as Values;
          const defaults = parseFlags(PROGRAM_FLAGS[program], [], POD_ENV[program]).values as Values;
          assert.notDeepEqual(parsed[spec.name], defaults[spec.name], `${spec.helm} changes --${spec.name}`);
          parseProgram(program, args ?? []);
        }),
      );
    });
  }

  test("docs/security.md states the pods' users and capabilities as the chart renders them", async () => {
    const [defaults, l2] = await Promise.all([render(), render(setJson({ "loadBalancer.l2.enabled": true }))]);
    const caps = (objects: KubeObject[], name: Program) =>
      (container(objects, name).securityContext?.capabilities?.add ?? []).map((cap) => `\`${cap}\``);
    const user = (objects: KubeObject[], name: Program) =>
      container(objects, name).securityContext?.runAsUser ?? podSpec(objects, name).securityContext?.runAsUser;
    assert.deepEqual(caps(defaults, "local-ccm"), []);
    assert.equal(caps(l2, "local-ccm").length, 1);
    assert.equal(caps(defaults, "node-lifecycle-controller").length, 1);
    const claims = [
      `The agent runs as non-root\n  (${user(defaults, "local-ccm")}) with no capabilities`,
      `with \`loadBalancer.l2.enabled\` it runs as uid ${user(l2, "local-ccm")} with ${caps(l2, "local-ccm")} as its only\n  capability`,
      `The controller runs as non-root (${user(defaults, "node-lifecycle-controller")}) and adds only ` +
        `${caps(defaults, "node-lifecycle-controller")}, for ICMP.`,
    ];
    const security = await readFile(path.join(CHART_DIR, "../../docs/security.md"), "utf8");
    for (const claim of claims) assert.ok(security.includes(claim), `docs/security.md says: ${claim}`);
  });

  test("loadBalancer.l2.enabled: the agent announces, with NET_RAW its only capability (uid 0: no ambient caps)", async () => {
    const objects = await render(setJson({ "loadBalancer.l2.enabled": true }));
    const agent = container(objects, "local-ccm");
    assert.deepEqual(valueArgs(objects, "local-ccm"), ["--lb-l2-announce=true"]);
    assert.deepEqual(agent.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: false,
      runAsUser: 0,
      capabilities: { drop: ["ALL"], add: ["NET_RAW"] },
    });
    const announce = parseAgentFlags(expand("local-ccm", agent.args ?? []), POD_ENV["local-ccm"]).announce;
    assert.deepEqual(announce, { leaseNamespace: "kube-system", interfaces: [], nodeSelector: undefined });
  });

  test("loadBalancer.l2.announcerNodes: only the nodes it selects announce, in kubectl's syntax", async () => {
    const selector = "topology.kubernetes.io/zone in (a,b),!node.kubernetes.io/exclude-l2";
    const values = { "loadBalancer.l2.enabled": true, "loadBalancer.l2.announcerNodes": selector };
    const objects = await render(setJson(values));
    const agent = container(objects, "local-ccm");
    assert.deepEqual(valueArgs(objects, "local-ccm"), ["--lb-l2-announce=true", `--lb-l2-node-selector=${selector}`]);
    const announce = parseAgentFlags(expand("local-ccm", agent.args ?? []), POD_ENV["local-ccm"]).announce;
    assert.deepEqual(announce?.nodeSelector?.requirements, [
      { key: "topology.kubernetes.io/zone", operator: "in", values: ["a", "b"] },
      { key: "node.kubernetes.io/exclude-l2", operator: "!", values: [] },
    ]);
  });

  test("nodeDeletion.enabled=false turns off node deletion alone: the program runs what else is on, without DELETE", async () => {
    const values = { "nodeLifecycleController.nodeDeletion.enabled": false, "loadBalancer.l2.enabled": true };
    const objects = await render(setJson(values));
    const program = "node-lifecycle-controller";
    const args = container(objects, program).args ?? [];
    assert.ok(args.includes("--controllers=*,-node-lifecycle,service-l2-pools"), args.join(" "));
    const flags = parseManagerFlags(expand(program, args), POD_ENV[program], () => undefined);
    assert.deepEqual(
      flags.controllers.map(({ name }) => name),
      ["service", "service-l2-pools"],
    );
    const rules = find(objects, "ClusterRole", program).rules as { resources: string[]; verbs: string[] }[];
    assert.ok(rules.length > 0);
    assert.equal(rules.some(({ resources, verbs }) => resources.includes("nodes") && verbs.includes("delete")), false);
    const defaults = find(await render(), "ClusterRole", program).rules as { resources: string[]; verbs: string[] }[];
    assert.equal(defaults.some(({ resources, verbs }) => resources.includes("nodes") && verbs.includes("delete")), true);
  });

  test("csrApproval.enabled runs the approver beside node-lifecycle, with its grants; off, nothing about CSRs", async () => {
    const defaults = await render();
    const certificates = (objects: KubeObject[]) =>
      objects.filter((obj) => JSON.stringify(obj).includes("certificates.k8s.io")).map((obj) => obj.metadata.name);
    assert.deepEqual(certificates(defaults), []);
    const approver = { "csrApproval.enabled": true, "csrApproval.rules.pendingTimeout": "1m" };
    const [objects, withoutService] = await Promise.all([
      render(setJson(approver)),
      render(setJson({ ...approver, "loadBalancer.nodeAddress.enabled": false })),
    ]);
    assert.deepEqual(valueArgs(objects, "node-lifecycle-controller"), [
      "--csr-pending-timeout=1m",
      "--controllers=*,kubelet-serving-csr",
    ]);
    assert.deepEqual(valueArgs(withoutService, "node-lifecycle-controller"), [
      "--csr-pending-timeout=1m",
      "--controllers=*,kubelet-serving-csr,-service",
    ]);
    // The approver's cluster-wide rules join the program's ClusterRole (from controllers.yaml, after the
    // node-lifecycle controller's); its rules in "default" are a Role named after it.
    const approverRules = [
      { apiGroups: [""], resources: ["nodes"], verbs: ["list", "watch"] },
      { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests"], verbs: ["list", "watch"] },
      { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests/approval"], verbs: ["update"] },
      {
        apiGroups: ["certificates.k8s.io"],
        resources: ["signers"],
        resourceNames: ["kubernetes.io/kubelet-serving"],
        verbs: ["approve"],
      },
      { apiGroups: ["networking.k8s.io"], resources: ["servicecidrs"], verbs: ["list", "watch"] },
    ];
    const program = "node-lifecycle-controller";
    for (const rendered of [objects, withoutService]) {
      const programRules = find(rendered, "ClusterRole", program).rules as unknown[];
      assert.deepEqual(programRules.slice(1, 1 + approverRules.length), approverRules);
      assert.deepEqual(certificates(rendered), [program]);
    }
    const name = "node-lifecycle-controller-kubelet-serving-csr";
    // Without the service controller: the cluster's own addresses in "default", the kubernetes Service by name and
    // the EndpointSlices.
    const role = find(withoutService, "Role", name);
    assert.equal(role.metadata.namespace, "default");
    assert.deepEqual(role.rules, [
      { apiGroups: [""], resources: ["services"], resourceNames: ["kubernetes"], verbs: ["list", "watch"] },
      { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
    ]);
    const binding = find(withoutService, "RoleBinding", name);
    assert.equal(binding.metadata.namespace, "default");
    assert.deepEqual(binding.roleRef, { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name });
    assert.deepEqual(binding.subjects, [
      { kind: "ServiceAccount", name: "node-lifecycle-controller", namespace: "kube-system" },
    ]);
    const clusterAddressGrants = (list: KubeObject[]) =>
      list
        .filter((obj) => ["ClusterRole", "Role"].includes(obj.kind))
        .filter((obj) => /servicecidrs|endpointslices|"services"/.test(JSON.stringify(obj)))
        .map((obj) => obj.kind);
    assert.deepEqual(clusterAddressGrants(withoutService), ["ClusterRole", "Role"]);
    // With it (the default), its cluster-wide grant covers the Role, which is left out: one watch serves both.
    assert.deepEqual(clusterAddressGrants(objects), ["ClusterRole"]);
    assert.equal(objects.find((obj) => obj.metadata.name === name), undefined, "no Role or RoleBinding");
    assert.deepEqual(clusterAddressGrants(defaults), ["ClusterRole"], "the service controller's grant");
  });

  test("loadBalancer.l2.enabled: the agent's announcer Lease and Services watch, under a policy; off, none", async () => {
    // The agent's objects (the controller's are node-lifecycle-controller's) that are about Leases or Services.
    const agentGrants = (objects: KubeObject[]) =>
      objects
        .filter((obj) => obj.metadata.name.startsWith("local-ccm") && /"leases"|"services"/.test(JSON.stringify(obj)))
        .map((obj) => `${obj.kind} ${obj.metadata.name}`);
    const [off, on] = await Promise.all([
      render(["--namespace=ops"]),
      render(["--namespace=ops", ...setJson({ "loadBalancer.l2.enabled": true })]),
    ]);
    assert.deepEqual(agentGrants(off), []);
    assert.deepEqual(agentGrants(on).sort(), [
      "ClusterRole local-ccm",
      "Role local-ccm-announcer",
      "ValidatingAdmissionPolicy local-ccm-announcer-lease",
    ]);
    // RBAC cannot select by label or name prefix: the agent may list and watch every Service, and write every Lease
    // of the release namespace, where the policy keeps it to its own node's.
    assert.deepEqual((find(on, "ClusterRole", "local-ccm").rules as unknown[]).slice(2, 3), [
      { apiGroups: [""], resources: ["services"], verbs: ["list", "watch"] },
    ]);
    const role = find(on, "Role", "local-ccm-announcer");
    assert.equal(role.metadata.namespace, "ops");
    assert.deepEqual(role.rules, [
      { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create", "get", "update", "delete"] },
    ]);
    const binding = find(on, "RoleBinding", "local-ccm-announcer");
    assert.equal(binding.metadata.namespace, "ops");
    const roleRef = { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "local-ccm-announcer" };
    assert.deepEqual(binding.roleRef, roleRef);
    assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: "local-ccm", namespace: "ops" }]);
    // The policy: the release's agent, the Lease of src/pools/announcement.ts in the release namespace, its label.
    const policy = find(on, "ValidatingAdmissionPolicy", "local-ccm-announcer-lease").spec as {
      matchConditions: { expression: string }[];
      variables: { name: string; expression: string }[];
      validations: { expression: string }[];
    };
    assert.match(policy.matchConditions[0]?.expression ?? "", /== "system:serviceaccount:ops:local-ccm"$/);
    const ownLease = policy.variables.find((variable) => variable.name === "ownLease")?.expression;
    assert.equal(ownLease, `"ops/${ANNOUNCER_LEASE_PREFIX}" + variables.ownNode`);
    assert.ok(policy.validations.some((rule) => rule.expression.includes(`[?"${ANNOUNCER_LEASE_LABEL}"]`)));
    const policyBinding = find(on, "ValidatingAdmissionPolicyBinding", "local-ccm-announcer-lease");
    assert.deepEqual(policyBinding.spec, { policyName: "local-ccm-announcer-lease", validationActions: ["Deny"] });
  });

  test("the admission policies name the release's ServiceAccounts, the Lease and the protected lists", async () => {
    const objects = await render([
      "--namespace=ops",
      ...setJson({
        "nodeLifecycleController.controller.leaderElection.resourceNamespace": "leases",
        "nodeLifecycleController.controller.leaderElection.resourceName": "nlc-leader",
        "nodeLifecycleController.controller.protectedLabels": " example.com/keep = yes, example.com/pin ",
        "nodeLifecycleController.controller.protectedAnnotations": "example.com/hold=a=b, c",
      }),
    ]);
    const policy = (name: string) => JSON.stringify(find(objects, "ValidatingAdmissionPolicy", name).spec);
    for (const name of ["local-ccm-node-scope", "local-ccm-events"])
      assert.ok(policy(name).includes(String.raw`\"system:serviceaccount:ops:local-ccm\"`), name);
    for (const name of ["node-lifecycle-controller-deletions", "node-lifecycle-controller-lease"])
      assert.ok(policy(name).includes(String.raw`\"system:serviceaccount:ops:node-lifecycle-controller\"`), name);
    const lease = policy("node-lifecycle-controller-lease");
    assert.ok(lease.includes(String.raw`request.namespace == \"leases\" && object.metadata.?name.orValue(\"\") == \"nlc-leader\"`));
    // Read as --protected-labels reads it: items and both sides of the first "=" trimmed.
    const deletions = policy("node-lifecycle-controller-deletions");
    assert.ok(deletions.includes(String.raw`dyn([[\"example.com/keep\",\"yes\"],[\"example.com/pin\"]])`), deletions);
    assert.ok(deletions.includes(String.raw`dyn([[\"example.com/hold\",\"a=b\"],[\"c\"]])`), deletions);
    for (const name of ["node-lifecycle-controller-deletions", "node-lifecycle-controller-lease"])
      assert.equal(find(objects, "ValidatingAdmissionPolicyBinding", name).spec?.policyName, name);
  });

  test("non-default values: namespace, image, security, scheduling, controller off", async () => {
    const objects = await render([
      "--namespace=ops",
      ...setJson({
        "image.repository": "registry.example/ccm",
        "image.tag": "dev",
        "image.pullPolicy": "Always",
        "podSecurity.runAsUser": 1000,
        "podSecurity.runAsGroup": 2000,
        resources: { requests: { cpu: "20m", memory: "40Mi" }, limits: { memory: "80Mi" } },
        tolerations: [{ key: "dedicated", operator: "Equal", value: "edge", effect: "NoSchedule" }],
        nodeSelector: { "node.kubernetes.io/pool": "edge" },
        "nodeLifecycleController.enabled": false,
        nodeFlags: ["--max-old-space-size=64"],
      }),
    ]);
    assert.deepEqual(
      objects.map((obj) => obj.kind),
      [
        "ServiceAccount",
        "Secret", // local-ccm-metrics-tls
        "ClusterRole",
        "ClusterRole", // local-ccm-metrics-reader
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
      ],
    );
    assert.equal(find(objects, "DaemonSet", "local-ccm").metadata.namespace, "ops");
    const pod = podSpec(objects, "local-ccm");
    assert.deepEqual(pod.tolerations, [
      { key: "dedicated", operator: "Equal", value: "edge", effect: "NoSchedule" },
    ]);
    assert.deepEqual(pod.nodeSelector, { "kubernetes.io/os": "linux", "node.kubernetes.io/pool": "edge" });
    assert.equal(pod.securityContext?.runAsUser, 1000);
    assert.equal(pod.securityContext?.runAsGroup, 2000);
    const agent = container(objects, "local-ccm");
    assert.equal(agent.image, "registry.example/ccm:dev");
    assert.deepEqual(agent.command, ["node", "--max-old-space-size=64", "/app/dist/local-ccm.cjs"]);
    assert.equal(agent.imagePullPolicy, "Always");
    assert.deepEqual(agent.resources, {
      requests: { cpu: "20m", memory: "40Mi" },
      limits: { memory: "80Mi" },
    });
    const policy = find(objects, "ValidatingAdmissionPolicy", "local-ccm-node-scope");
    assert.match(JSON.stringify(policy), /system:serviceaccount:ops:local-ccm/);
  });

  test("placement any: no node affinity, control-plane nodes still candidates; user scheduling adds", async () => {
    const edge = { key: "dedicated", operator: "Equal", value: "edge", effect: "NoSchedule" };
    const objects = await render(
      setJson({
        "nodeLifecycleController.placement": "any",
        "nodeLifecycleController.tolerations": [edge],
        "nodeLifecycleController.nodeSelector": { "node.kubernetes.io/pool": "edge" },
      }),
    );
    const pod = podSpec(objects, "node-lifecycle-controller");
    assert.equal(pod.affinity, undefined);
    assert.deepEqual(pod.tolerations, [CONTROL_PLANE_TOLERATION, edge]);
    assert.deepEqual(pod.nodeSelector, { "kubernetes.io/os": "linux", "node.kubernetes.io/pool": "edge" });
    assert.equal(pod.topologySpreadConstraints?.length, 1);
    // The same user scheduling on the default placement keeps the control-plane affinity.
    const onControlPlane = await render(setJson({ "nodeLifecycleController.tolerations": [edge] }));
    assert.deepEqual(podSpec(onControlPlane, "node-lifecycle-controller").affinity, CONTROL_PLANE_AFFINITY);
    assert.deepEqual(podSpec(onControlPlane, "node-lifecycle-controller").tolerations, [CONTROL_PLANE_TOLERATION, edge]);
  });

  test("non-default values: health port, lease namespace, numbers from a values file", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-values-"));
    try {
      const file = path.join(dir, "values.yaml");
      // A values file gives every number as a float: large integers must still print as integers.
      const overrides = {
        podSecurity: { runAsUser: 1000000, runAsGroup: 1000000 },
        agent: { healthBindAddress: "" },
        nodeLifecycleController: {
          replicas: 3,
          controller: {
            maxDeletionsPerMinute: 1000000,
            healthBindAddress: "[::1]:9100",
            leaderElection: { resourceNamespace: "leases", resourceName: "nlc-leader" },
          },
        },
      };
      await writeFile(file, stringify(overrides));
      const objects = await render(["--namespace=ops", "-f", file]);
      const agent = container(objects, "local-ccm");
      assert.deepEqual(valueArgs(objects, "local-ccm"), ["--health-bind-address="]);
      assert.deepEqual(agent.ports, [{ name: "metrics", containerPort: 10265, protocol: "TCP" }]);
      assert.equal(agent.livenessProbe, undefined);
      const nlc = container(objects, "node-lifecycle-controller");
      // In the flag table's order: the program's own flags, then each controller's, then the common ones.
      assert.deepEqual(valueArgs(objects, "node-lifecycle-controller"), [
        "--leader-elect-resource-name=nlc-leader",
        "--leader-elect-resource-namespace=leases",
        "--max-deletions-per-minute=1000000",
        "--health-bind-address=[::1]:9100",
      ]);
      assert.deepEqual(nlc.ports, [
        { name: "health", containerPort: 9100, protocol: "TCP" },
        { name: "metrics", containerPort: 10266, protocol: "TCP" },
      ]);
      assert.equal(find(objects, "Deployment", "node-lifecycle-controller").spec?.replicas, 3);
      const nlcPod = podSpec(objects, "node-lifecycle-controller");
      assert.equal(nlcPod.securityContext?.runAsUser, 1000000);
      assert.deepEqual(nlcPod.securityContext?.sysctls, [
        { name: "net.ipv4.ping_group_range", value: "1000000 1000000" },
      ]);
      assert.equal(find(objects, "Role", "node-lifecycle-controller").metadata.namespace, "leases");
      assert.deepEqual((find(objects, "Role", "node-lifecycle-controller").rules as unknown[])[0], {
        apiGroups: ["coordination.k8s.io"],
        resources: ["leases"],
        resourceNames: ["nlc-leader"],
        verbs: ["get", "update"],
      });
      assert.equal(find(objects, "RoleBinding", "node-lifecycle-controller").metadata.namespace, "leases");
      // Left at its default, the Lease is in the pod's namespace, where the Role then is.
      const defaults = await render(["--namespace=ops"]);
      assert.equal(find(defaults, "Role", "node-lifecycle-controller").metadata.namespace, "ops");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the schema rejects a bad value of every flag, naming each", async () => {
    const bad = Object.fromEntries(
      PROGRAMS.flatMap(helmFlags).map((spec) => [spec.helm as string, badValue(spec)]),
    );
    const failure = await helmFailure(helm, setJson(bad));
    assert.match(failure, /values don't meet the specifications of the schema/);
    for (const [dotted, value] of Object.entries(bad)) {
      const location = `at '/${dotted.replaceAll(".", "/")}'`;
      assert.ok(failure.includes(location), `${dotted}=${JSON.stringify(value)} is named`);
    }
  });

  test("the schema's messages say what is wrong", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ "agent.logFormat": "yaml" }, "at '/agent/logFormat': value must be one of 'text', 'json'"],
      [{ "agent.verbosity": 9 }, "at '/agent/verbosity': maximum: got 9, want 5"],
      [
        { "agent.reconcileIntervall": "5s" },
        "at '/agent': additional properties 'reconcileIntervall' not allowed",
      ],
      [
        { "ipDetection.externalIPTarget": "dns.google" },
        "at '/ipDetection/externalIPTarget': 'dns.google' does not match pattern",
      ],
      [
        { "nodeLifecycleController.controller.unhealthyThreshold": 0 },
        "at '/nodeLifecycleController/controller/unhealthyThreshold': exclusiveMinimum",
      ],
      [
        { "nodeLifecycleController.controller.probes": "icmp,udp" },
        "at '/nodeLifecycleController/controller/probes': 'icmp,udp' does not match pattern",
      ],
      [
        { "image.pullPolicy": "Sometimes" },
        "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
      ],
      [{ "podSecurity.runAsUser": 0 }, "at '/podSecurity/runAsUser': minimum: got 0, want 1"],
      [
        { "nodeLifecycleController.placement": "workers" },
        "at '/nodeLifecycleController/placement': value must be one of 'control-plane', 'any'",
      ],
      [{ nodeFlags: ["jitless"] }, "at '/nodeFlags/0': 'jitless' does not match pattern"],
    ];
    for (const [set, expected] of cases) {
      const message = await helmFailure(helm, setJson(set));
      assert.ok(message.includes(expected), `${JSON.stringify(set)}: ${message}`);
    }
  });

  test("options the programs refuse together fail the render with one line, as the program refuses them", async () => {
    await Promise.all(
      REFUSALS.map(async ({ values: set, line, program, args }) => {
        const stderr = await helmFailure(helm, setJson(set));
        assert.match(errorLine(stderr), /^Error: execution error at \(local-ccm\/templates\/[^)]+\): /);
        assert.ok(errorLine(stderr).endsWith(`: ${line}`), `${JSON.stringify(set)}: ${stderr}`);
        if (program) assert.equal(accepts(program, args ?? []), false, `${program} refuses ${args?.join(" ")}`);
      }),
    );
    // The edges: what the programs accept renders.
    const accepted: Record<string, unknown>[] = [
      { "ipDetection.externalIPTarget": "", "ipDetection.externalIPInterface": "eth0" },
      { "ipDetection.externalIPTarget": "8.8.8.8", "ipDetection.externalIPCIDR": "198.18.0.0/15" },
      { "metadata.timeout": "596h31m23.647s", "csrApproval.rules.maxExpiration": "10m" },
      { "nodeLifecycleController.controller.notReadyTimeout": "0s", "agent.healthBindAddress": ":65535" },
      { "nodeLifecycleController.controller.leaderElection.renewDeadline": "14.999s" },
      { "loadBalancer.reservedPorts": "9000-9000, 1-65535" },
      // Class-less Services claimed by the pools only, the node-address controller off.
      {
        "loadBalancer.l2.enabled": true,
        "loadBalancer.nodeAddress.enabled": false,
        "loadBalancer.l2.pools.claimClassless": true,
        "loadBalancer.claimClassless": true,
      },
      { "nodeLifecycleController.enabled": false, "nodeLifecycleController.controller.leaderElection.renewDeadline": "1h" },
      // Class-less Services over BGP alone.
      { "bgp.enabled": true, "bgp.claimClassless": true, "loadBalancer.nodeAddress.enabled": false },
    ];
    await Promise.all(accepted.map((set) => render(setJson(set))));
  });

  test("the schema refuses a CIDR, IP or number the program refuses, from --set as from a values file", async () => {
    const cases: [string[], string][] = [
      [["--set", "ipDetection.internalIPCIDR=10.0.0.0/33"], "at '/ipDetection/internalIPCIDR': '10.0.0.0/33' does not match"],
      [["--set", "ipDetection.internalIPCIDR={10.0.0.0/8,fd00::/129}"], "at '/ipDetection/internalIPCIDR/1': 'fd00::/129'"],
      [["--set", "ipDetection.externalIPTarget=010.0.0.1"], "at '/ipDetection/externalIPTarget': '010.0.0.1' does not"],
      [["--set", "csrApproval.rules.ipAllowlist={10.0.0.0/8,fe80::1%eth0/64}"], "at '/csrApproval/rules/ipAllowlist/1'"],
      [
        ["--set", "nodeLifecycleController.controller.unhealthyThreshold=1.5"],
        "at '/nodeLifecycleController/controller/unhealthyThreshold': '1.5' does not match",
      ],
      [
        ["--set-json", "nodeLifecycleController.controller.unhealthyThreshold=1.5"],
        "at '/nodeLifecycleController/controller/unhealthyThreshold': maximum: got 1.5, want 1",
      ],
      [
        ["--set-string", "nodeLifecycleController.controller.kubeletPort=65536"],
        "at '/nodeLifecycleController/controller/kubeletPort': '65536' does not match",
      ],
      [["--set-string", "agent.verbosity=6"], "at '/agent/verbosity': '6' does not match"],
      [["--set", "nodeLifecycleController.controller.probes={icmp,udp}"], "at '/nodeLifecycleController/controller/probes/1'"],
      [["--set-string", "nodeLifecycleController.controller.probes=tcp\\,tcp"], "at '/nodeLifecycleController/controller/probes': 'tcp,tcp'"],
      [["--set", "nodeLifecycleController.controller.probes={tcp,tcp}"], "at '/nodeLifecycleController/controller/probes': items at 0 and 1 are equal"],
      [["--set", "metadata.providerID=local://{hostname}"], "at '/metadata/providerID': 'local://{hostname}' does not match"],
      [["--set", "agent.healthBindAddress=999.0.0.1:10263"], "at '/agent/healthBindAddress': '999.0.0.1:10263'"],
      [["--set", "metadata.zoneRules={cidr:10.0.0.0/33=rack-1}"], "at '/metadata/zoneRules/0': 'cidr:10.0.0.0/33=rack-1'"],
      [["--set", "metadata.nodeTaintRules={name:^gpu-=nvidia.com/gpu=present}"], "at '/metadata/nodeTaintRules/0'"],
      // A key the node-scope policy would open to a stolen agent token: refused at render, naming the rule.
      [
        ["--set", "metadata.nodeLabelRules={name:.=node-role.kubernetes.io/control-plane=}"],
        "metadata.nodeLabelRules: name:.=node-role.kubernetes.io/control-plane=: the key node-role.kubernetes.io/control-plane is Kubernetes' own",
      ],
      [
        ["--set", "metadata.nodeTaintRules={name:.=node.kubernetes.io/unreachable=:NoExecute}"],
        "metadata.nodeTaintRules: name:.=node.kubernetes.io/unreachable=:NoExecute: the key node.kubernetes.io/unreachable is Kubernetes' own",
      ],
    ];
    await Promise.all(
      cases.map(async ([args, expected]) => {
        const stderr = await helmFailure(helm, args);
        assert.ok(stderr.includes(expected), `${args.join(" ")}: ${stderr}`);
      }),
    );
    const refusedByProgram: [Program, string][] = [
      ["local-ccm", "--internal-ip-cidr=10.0.0.0/33"],
      ["local-ccm", "--internal-ip-cidr=10.0.0.0/8,fd00::/129"],
      ["local-ccm", "--external-ip-target=010.0.0.1"],
      ["node-lifecycle-controller", "--csr-ip-allowlist=10.0.0.0/8,fe80::1%eth0/64"],
      ["node-lifecycle-controller", "--unhealthy-threshold=1.5"],
      ["node-lifecycle-controller", "--kubelet-port=65536"],
      ["local-ccm", "--v=6"],
      ["node-lifecycle-controller", "--probes=icmp,udp"],
      ["node-lifecycle-controller", "--probes=tcp,tcp"],
      ["local-ccm", "--provider-id=local://{hostname}"],
      ["local-ccm", "--health-bind-address=999.0.0.1:10263"],
      ["local-ccm", "--zone-rules=cidr:10.0.0.0/33=rack-1"],
      ["local-ccm", "--node-taint-rules=name:^gpu-=nvidia.com/gpu=present"],
      ["local-ccm", "--node-label-rules=name:.=node-role.kubernetes.io/control-plane="],
      ["local-ccm", "--node-taint-rules=name:.=node.kubernetes.io/unreachable=:NoExecute"],
    ];
    for (const [program, arg] of refusedByProgram) assert.equal(accepts(program, [arg]), false, arg);
  });

  test("numbers as --set and --set-string give them reach the programs", async () => {
    const objects = await render([
      "--set",
      "nodeLifecycleController.controller.unhealthyThreshold=0.5",
      "--set",
      "nodeLifecycleController.controller.pingCount=4",
      "--set-string",
      "nodeLifecycleController.controller.kubeletPort=10251",
      "--set-string",
      "nodeLifecycleController.controller.maxDeletionsPerMinute=20",
      "--set-string",
      "agent.verbosity=3",
    ]);
    const nlcArgs = valueArgs(objects, "node-lifecycle-controller") ?? [];
    assert.deepEqual(nlcArgs, [
      "--ping-count=4",
      "--kubelet-port=10251",
      "--max-deletions-per-minute=20",
      "--unhealthy-threshold=0.5",
    ]);
    const agentArgs = valueArgs(objects, "local-ccm") ?? [];
    assert.deepEqual(agentArgs, ["--v=3"]);
    const lifecycle = configOf(
      parseManagerFlags(nlcArgs, POD_ENV["node-lifecycle-controller"], () => undefined),
      nodeLifecycle,
    );
    assert.equal(lifecycle.unhealthyThreshold, 0.5);
    assert.equal(parseAgentFlags(expand("local-ccm", agentArgs), POD_ENV["local-ccm"]).verbosity, 3);
  });

  test("lists and comma strings give the same flags, and the same admission policy", async () => {
    for (const program of PROGRAMS) {
      const lists = helmFlags(program).filter((spec) => spec.type === "list" || COMMA_LISTS.has(spec.name));
      await Promise.all(
        lists.map(async (spec) => {
          const text = nonDefaultValue(program, spec);
          const items = text.split(",").map((item) => item.trim());
          const [asText, asList] = await Promise.all([
            render(setJson({ [spec.helm as string]: text })),
            render(setJson({ [spec.helm as string]: items })),
          ]);
          const flags = (objects: KubeObject[]) =>
            parseFlags(PROGRAM_FLAGS[program], expand(program, container(objects, program).args ?? []), POD_ENV[program])
              .values;
          assert.deepEqual(flags(asList), flags(asText), spec.helm);
          const policies = (objects: KubeObject[]) => objects.filter((obj) => obj.kind === "ValidatingAdmissionPolicy");
          assert.deepEqual(policies(asList), policies(asText), spec.helm);
        }),
      );
    }
    // The issue's own example, as --set writes a list.
    const objects = await render(["--set", "metadata.zoneRules={cidr:10.1.0.0/24=rack-1,cidr:10.2.0.0/24=rack-2}"]);
    assert.deepEqual(valueArgs(objects, "local-ccm"), ["--zone-rules=cidr:10.1.0.0/24=rack-1,cidr:10.2.0.0/24=rack-2"]);
  });

  test("knobs: pull secrets, pod labels and annotations, priority class, affinity on each component", async () => {
    const defaults = await render();
    assert.equal(podSpec(defaults, "local-ccm").priorityClassName, "system-node-critical");
    assert.equal(podSpec(defaults, "node-lifecycle-controller").priorityClassName, "system-cluster-critical");
    for (const program of PROGRAMS) {
      assert.equal(podSpec(defaults, program).imagePullSecrets, undefined);
      const { kind, name } = WORKLOAD[program];
      assert.equal(find(defaults, kind, name).spec?.template?.metadata?.annotations, undefined);
    }
    const zone = { key: "topology.kubernetes.io/zone", operator: "In", values: ["a"] };
    const spread = { podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [] } };
    const objects = await render(
      setJson({
        imagePullSecrets: [{ name: "regcred" }],
        podLabels: { team: "net", "app.kubernetes.io/name": "overridden" },
        podAnnotations: { "example.com/scrape": "false" },
        priorityClassName: "node-agents",
        affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [zone] }] } } },
        "nodeLifecycleController.podLabels": { team: "ops" },
        "nodeLifecycleController.podAnnotations": { "example.com/owner": "ops" },
        "nodeLifecycleController.priorityClassName": "",
        "nodeLifecycleController.affinity": {
          ...spread,
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [zone] }, { matchFields: [{ key: "metadata.name", operator: "In", values: ["cp-1"] }] }],
            },
          },
        },
      }),
    );
    const podMetadata = (program: Program) => {
      const { kind, name } = WORKLOAD[program];
      return find(objects, kind, name).spec?.template?.metadata;
    };
    assert.deepEqual(podMetadata("local-ccm")?.labels, {
      "app.kubernetes.io/name": "local-ccm",
      "app.kubernetes.io/part-of": "local-ccm",
      "app.kubernetes.io/version": appVersion,
      team: "net",
    });
    assert.deepEqual(podMetadata("local-ccm")?.annotations, { "example.com/scrape": "false" });
    assert.equal(podMetadata("node-lifecycle-controller")?.labels?.team, "ops");
    assert.deepEqual(podMetadata("node-lifecycle-controller")?.annotations, { "example.com/owner": "ops" });
    const agent = podSpec(objects, "local-ccm");
    const nlc = podSpec(objects, "node-lifecycle-controller");
    for (const pod of [agent, nlc]) assert.deepEqual(pod.imagePullSecrets, [{ name: "regcred" }]);
    assert.equal(agent.priorityClassName, "node-agents");
    assert.equal(nlc.priorityClassName, undefined);
    assert.deepEqual(agent.affinity, {
      nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [zone] }] } },
    });
    // The controller stays on control-plane nodes: the expression is added to each term (terms are ORed).
    const controlPlane = { key: "node-role.kubernetes.io/control-plane", operator: "Exists" };
    assert.deepEqual(nlc.affinity, {
      ...spread,
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [zone, controlPlane] },
            { matchFields: [{ key: "metadata.name", operator: "In", values: ["cp-1"] }], matchExpressions: [controlPlane] },
          ],
        },
      },
    });
    const anywhere = await render(setJson({ "nodeLifecycleController.placement": "any", "nodeLifecycleController.affinity": spread }));
    assert.deepEqual(podSpec(anywhere, "node-lifecycle-controller").affinity, spread);
  });

  describe("metrics", () => {
    const reviewRules = (objects: KubeObject[], role: string) =>
      ((find(objects, "ClusterRole", role).rules ?? []) as { resources?: string[] }[]).flatMap((rule) => rule.resources ?? []);

    test("default: no ServiceMonitor, a reader ClusterRole for Prometheus, the review grants", async () => {
      const objects = await render();
      assert.deepEqual(
        objects.filter((obj) => ["Service", "ServiceMonitor"].includes(obj.kind)),
        [],
        "no Service, no ServiceMonitor unless asked",
      );
      assert.deepEqual(find(objects, "ClusterRole", "local-ccm-metrics-reader").rules, [
        { nonResourceURLs: ["/metrics"], verbs: ["get"] },
      ]);
      for (const role of ["local-ccm", "node-lifecycle-controller"]) {
        assert.deepEqual(reviewRules(objects, role).slice(-2), ["tokenreviews", "subjectaccessreviews"], role);
      }
    });

    test("serviceMonitor.enabled: per program a headless Service and a ServiceMonitor scraping https with the token", async () => {
      const objects = await render(
        setJson({ "metrics.serviceMonitor.enabled": true, "metrics.serviceMonitor.labels": { release: "kps" } }),
      );
      for (const [program, port] of [
        ["local-ccm", 10265],
        ["node-lifecycle-controller", 10266],
      ] as const) {
        const service = find(objects, "Service", `${program}-metrics`);
        assert.equal(service.metadata.namespace, "kube-system");
        assert.deepEqual(service.spec, {
          clusterIP: "None",
          selector: { "app.kubernetes.io/name": program },
          ports: [{ name: "metrics", port, targetPort: "metrics", protocol: "TCP" }],
        });
        const monitor = find(objects, "ServiceMonitor", program);
        assert.equal(monitor.apiVersion, "monitoring.coreos.com/v1");
        assert.equal((monitor.metadata as { labels?: Record<string, string> }).labels?.release, "kps");
        assert.deepEqual(monitor.spec, {
          selector: { matchLabels: { "app.kubernetes.io/name": program, "app.kubernetes.io/component": "metrics" } },
          endpoints: [
            {
              port: "metrics",
              path: "/metrics",
              interval: "30s",
              scheme: "https",
              bearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token",
              // The token goes only to the program: its certificate verified against the chart's CA, for its name.
              tlsConfig: {
                ca: { secret: { name: "local-ccm-metrics-tls", key: "ca.crt" } },
                serverName: `${program}-metrics.kube-system.svc`,
              },
            },
          ],
        });
        assert.doesNotMatch(JSON.stringify(monitor), /insecureSkipVerify/);
        // The Service's selector matches the pods it is for.
        const { kind, name } = WORKLOAD[program];
        const labels = (find(objects, kind, name).spec?.template as unknown as { metadata: { labels: Record<string, string> } })
          .metadata.labels;
        assert.equal(labels["app.kubernetes.io/name"], program);
      }
    });

    test("secureMetrics false on the health address: plain http on the health port, no review grants, no reader role", async () => {
      const objects = await render(
        setJson({
          "metrics.serviceMonitor.enabled": true,
          "agent.secureMetrics": false,
          "agent.metricsBindAddress": ":10263",
          "nodeLifecycleController.controller.secureMetrics": false,
        }),
      );
      assert.deepEqual(container(objects, "local-ccm").ports, [{ name: "health", containerPort: 10263, protocol: "TCP" }]);
      const agentEndpoint = (find(objects, "ServiceMonitor", "local-ccm").spec as { endpoints: unknown[] }).endpoints;
      assert.deepEqual(agentEndpoint, [{ port: "health", path: "/metrics", interval: "30s", scheme: "http" }]);
      const nlcEndpoint = (find(objects, "ServiceMonitor", "node-lifecycle-controller").spec as { endpoints: unknown[] })
        .endpoints;
      assert.deepEqual(nlcEndpoint, [{ port: "metrics", path: "/metrics", interval: "30s", scheme: "http" }]);
      assert.deepEqual(reviewRules(objects, "local-ccm"), ["nodes", "nodes/status"]);
      assert.deepEqual(
        reviewRules(objects, "node-lifecycle-controller"),
        ["nodes", ...SERVICE_CONTROLLER_RULES.flatMap((rule) => rule.resources)],
      );
      assert.equal(objects.find((obj) => obj.metadata.name === "local-ccm-metrics-reader"), undefined);
      // The programs accept what the chart passes.
      parseProgram("local-ccm", container(objects, "local-ccm").args ?? []);
      parseProgram("node-lifecycle-controller", container(objects, "node-lifecycle-controller").args ?? []);
    });

    test("metrics off: no metrics port, no review grants, no ServiceMonitor for that program", async () => {
      const objects = await render(
        setJson({ "metrics.serviceMonitor.enabled": true, "agent.metricsBindAddress": "" }),
      );
      assert.deepEqual(container(objects, "local-ccm").ports, [{ name: "health", containerPort: 10263, protocol: "TCP" }]);
      assert.deepEqual(reviewRules(objects, "local-ccm"), ["nodes", "nodes/status"]);
      assert.equal(objects.find((obj) => obj.kind === "ServiceMonitor" && obj.metadata.name === "local-ccm"), undefined);
      find(objects, "ServiceMonitor", "node-lifecycle-controller");
    });

    test("default: the chart's CA and certificate (both programs' Service names), mounted and passed to both", async () => {
      const objects = await render();
      const secret = find(objects, "Secret", "local-ccm-metrics-tls") as KubeObject & { type: string; data: Record<string, string> };
      assert.equal(secret.type, "kubernetes.io/tls");
      assert.deepEqual(Object.keys(secret.data).sort(), ["ca.crt", "tls.crt", "tls.key"]);
      const decode = (key: string) => Buffer.from(secret.data[key] as string, "base64");
      const ca = new X509Certificate(decode("ca.crt"));
      const cert = new X509Certificate(decode("tls.crt"));
      assert.ok(ca.ca && !cert.ca);
      assert.ok(cert.verify(ca.publicKey), "tls.crt is signed by ca.crt");
      assert.equal(cert.subjectAltName, "DNS:local-ccm-metrics.kube-system.svc, DNS:node-lifecycle-controller-metrics.kube-system.svc");
      assert.ok(cert.checkPrivateKey(createPrivateKey(decode("tls.key"))));
      for (const program of PROGRAMS) {
        const c = container(objects, program);
        assert.deepEqual(c.args?.slice(-2), CHART_CERTIFICATE_ARGS);
        assert.deepEqual(c.volumeMounts, [{ name: "metrics-tls", mountPath: "/etc/local-ccm/metrics-tls", readOnly: true }]);
        assert.deepEqual(podSpec(objects, program).volumes, [{ name: "metrics-tls", secret: { secretName: "local-ccm-metrics-tls" } }]);
        parseProgram(program, c.args ?? []);
      }
    });

    test("tlsSecretName: that Secret instead, mounted in both programs, its ca.crt what the ServiceMonitors trust", async () => {
      const objects = await render(setJson({ "metrics.tlsSecretName": "metrics-tls", "metrics.serviceMonitor.enabled": true }));
      assert.equal(objects.find((obj) => obj.kind === "Secret"), undefined, "no Secret of the chart's");
      for (const program of PROGRAMS) {
        const c = container(objects, program);
        assert.deepEqual(c.args?.slice(-2), CHART_CERTIFICATE_ARGS);
        assert.deepEqual(c.volumeMounts, [{ name: "metrics-tls", mountPath: "/etc/local-ccm/metrics-tls", readOnly: true }]);
        assert.deepEqual(podSpec(objects, program).volumes, [{ name: "metrics-tls", secret: { secretName: "metrics-tls" } }]);
        parseProgram(program, c.args ?? []);
        const [endpoint] = (find(objects, "ServiceMonitor", program).spec as { endpoints: { tlsConfig: unknown }[] }).endpoints;
        assert.deepEqual(endpoint?.tlsConfig, {
          ca: { secret: { name: "metrics-tls", key: "ca.crt" } },
          serverName: `${program}-metrics.kube-system.svc`,
        });
      }
    });

    test("a program without secure metrics gets no certificate; without any, the chart makes none", async () => {
      const objects = await render(setJson({ "agent.secureMetrics": false }));
      const agent = container(objects, "local-ccm");
      assert.equal(agent.volumeMounts, undefined);
      assert.equal(podSpec(objects, "local-ccm").volumes, undefined);
      parseProgram("local-ccm", agent.args ?? []);
      assert.deepEqual(container(objects, "node-lifecycle-controller").args?.slice(-2), CHART_CERTIFICATE_ARGS);
      const none = await render(setJson({ "agent.secureMetrics": false, "nodeLifecycleController.enabled": false }));
      assert.equal(none.find((obj) => obj.kind === "Secret"), undefined);
    });

    test("generateCertificate false: self-signed at each start, and no ServiceMonitor that would trust it blindly", async () => {
      const objects = await render(setJson({ "metrics.generateCertificate": false }));
      assert.equal(objects.find((obj) => obj.kind === "Secret"), undefined);
      for (const program of PROGRAMS) {
        assert.equal(container(objects, program).volumeMounts, undefined, program);
        assert.ok(!(container(objects, program).args ?? []).some((arg) => arg.startsWith("--metrics-cert-file")), program);
      }
      const failure = errorLine(
        await helmFailure(helm, setJson({ "metrics.generateCertificate": false, "metrics.serviceMonitor.enabled": true })),
      );
      assert.ok(failure.endsWith(
        "metrics.serviceMonitor: local-ccm's certificate is self-signed at each start, which no scraper can verify, " +
          "and Prometheus would send its token to whatever answers: keep metrics.generateCertificate, name a Secret " +
          "with ca.crt in metrics.tlsSecretName, or set metrics.serviceMonitor.tlsConfig",
      ), failure);
      // A tlsConfig of the operator's own is theirs to answer for.
      const own = { ca: { configMap: { name: "my-ca", key: "ca.crt" } }, serverName: "metrics.example" };
      const monitors = await render(
        setJson({ "metrics.generateCertificate": false, "metrics.serviceMonitor.enabled": true, "metrics.serviceMonitor.tlsConfig": own }),
      );
      const [endpoint] = (find(monitors, "ServiceMonitor", "local-ccm").spec as { endpoints: { tlsConfig: unknown }[] }).endpoints;
      assert.deepEqual(endpoint?.tlsConfig, own);
    });
  });
});
