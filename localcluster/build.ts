// Builds the pinned upstream binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy, kubectl, agnhost, etcd, helm, metrics-server, coredns, actionlint, registry) from their Go modules into a
// git-ignored cache keyed by version; a binary that is already there is not rebuilt. Upstream's e2e suite
// (e2e.test) is built the same way but apart (ensureE2ETest): only the peer suite needs it, not every cluster;
// so are components only a benchmark's anchor needs (ensureComponent, e.g. metallb.ts).
//
// Each component gets a small wrapper module whose go.mod requires the upstream module and lists
// the commands as `tool` directives: `go install pkg@version` cannot build k8s.io/kubernetes,
// whose go.mod requires its staging modules at v0.0.0 and replaces them with local folders.
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { formatDuration } from "../src/cli/duration.ts";
import { run } from "./exec.ts";
import {
  ACTIONLINT_VERSION,
  COREDNS_VERSION,
  DISTRIBUTION_VERSION,
  ETCD_VERSION,
  HELM_VERSION,
  KUBERNETES_VERSION,
  METRICS_SERVER_VERSION,
} from "./versions.ts";

export const CACHE_DIR = path.resolve(import.meta.dirname, "../.cache/controlplane");

export interface Binaries {
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  kubelet: string;
  kubeProxy: string;
  kubectl: string;
  /** The e2e test server behind registry.k8s.io/e2e-test-images/agnhost (agnhost.ts makes the image). */
  agnhost: string;
  etcd: string;
  helm: string;
  metricsServer: string;
  coredns: string;
  actionlint: string;
  /** An OCI registry (distribution), for the release path's test (registry.ts). */
  registry: string;
}

export interface Component {
  name: string;
  version: string;
  module: string;
  /** Binary name → Go package of its main. */
  commands: Record<string, string>;
  ldflags: string[];
  /** Extra go.mod lines (replace blocks). */
  goModExtra?: () => Promise<string>;
}

const kubernetesMinor = KUBERNETES_VERSION.split(".")[1];

/** `-X` flags that make `/version` and `kubectl version` report the pinned release. */
function kubernetesVersionFlags(): string[] {
  return ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"].flatMap((pkg) => [
    `-X ${pkg}.gitVersion=${KUBERNETES_VERSION}`,
    `-X ${pkg}.gitMajor=1`,
    `-X ${pkg}.gitMinor=${kubernetesMinor}`,
    `-X ${pkg}.gitTreeState=clean`,
    `-X ${pkg}.buildDate=1970-01-01T00:00:00Z`,
  ]);
}

/** The pinned k8s.io/kubernetes module in Go's module cache (downloaded if needed): its folder and go.mod. */
export async function kubernetesModule(): Promise<{ Dir: string; GoMod: string }> {
  const out = await run("go", ["mod", "download", "-json", `k8s.io/kubernetes@${KUBERNETES_VERSION}`]);
  return JSON.parse(out) as { Dir: string; GoMod: string };
}

/**
 * k8s.io/kubernetes replaces every staging module with a folder of its own repo; a module that
 * depends on it must replace them with the published v0.<minor>.<patch> instead. The list comes
 * from the pinned go.mod itself, so a version bump needs no edit here.
 */
async function stagingReplaces(): Promise<string> {
  const goMod = await readFile((await kubernetesModule()).GoMod, "utf8");
  const staging = [...goMod.matchAll(/^\s*(k8s\.io\/[\w.-]+) => \.\/staging\//gm)].map((m) => m[1]);
  if (staging.length === 0)
    throw new Error(`no staging replaces found in k8s.io/kubernetes ${KUBERNETES_VERSION}`);
  const published = `v0${KUBERNETES_VERSION.slice(2)}`;
  return `replace (\n${staging.map((mod) => `\t${mod} => ${mod} ${published}`).join("\n")}\n)\n`;
}

const COMPONENTS: Component[] = [
  {
    name: "kubernetes",
    version: KUBERNETES_VERSION,
    module: "k8s.io/kubernetes",
    commands: {
      "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
      "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
      "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
      kubelet: "k8s.io/kubernetes/cmd/kubelet",
      "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
      kubectl: "k8s.io/kubernetes/cmd/kubectl",
      agnhost: "k8s.io/kubernetes/test/images/agnhost",
    },
    ldflags: kubernetesVersionFlags(),
    goModExtra: stagingReplaces,
  },
  {
    name: "etcd",
    version: ETCD_VERSION,
    module: "go.etcd.io/etcd/server/v3",
    commands: { etcd: "go.etcd.io/etcd/server/v3" },
    ldflags: [],
  },
  {
    name: "helm",
    version: HELM_VERSION,
    module: "helm.sh/helm/v3",
    commands: { helm: "helm.sh/helm/v3/cmd/helm" },
    ldflags: [
      `-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}`,
      "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    ],
  },
  {
    // Its own wrapper module too: it requires k8s.io/* v0.36.2 and newer libraries than the Kubernetes binaries.
    name: "metrics-server",
    version: METRICS_SERVER_VERSION,
    module: "sigs.k8s.io/metrics-server",
    commands: { "metrics-server": "sigs.k8s.io/metrics-server/cmd/metrics-server" },
    // As its Makefile does: the version is client-go's.
    ldflags: [`-X k8s.io/client-go/pkg/version.gitVersion=${METRICS_SERVER_VERSION}`],
  },
  {
    name: "coredns",
    version: COREDNS_VERSION,
    module: "github.com/coredns/coredns",
    commands: { coredns: "github.com/coredns/coredns" },
    ldflags: [],
  },
  {
    name: "actionlint",
    version: ACTIONLINT_VERSION,
    module: "github.com/rhysd/actionlint",
    commands: { actionlint: "github.com/rhysd/actionlint/cmd/actionlint" },
    ldflags: [`-X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION}`],
  },
  {
    // Only the registry command: its storage drivers bring the cloud SDKs (about a minute of the cold build).
    name: "distribution",
    version: DISTRIBUTION_VERSION,
    module: "github.com/distribution/distribution/v3",
    commands: { registry: "github.com/distribution/distribution/v3/cmd/registry" },
    ldflags: [`-X github.com/distribution/distribution/v3/version.version=${DISTRIBUTION_VERSION}`],
  },
];

function componentDir(component: Component): string {
  return path.join(CACHE_DIR, `${component.name}-${component.version}`);
}

function binaryPath(component: Component, binary: string): string {
  return path.join(componentDir(component), "bin", binary);
}

function missingBinaries(component: Component): string[] {
  return Object.keys(component.commands).filter((binary) => !existsSync(binaryPath(component, binary)));
}

/** Progress lines on stderr: a cold build is minutes of silence from Go, so say what and how far. */
class BuildProgress {
  private readonly started = Date.now();
  private done = 0;
  private readonly total: number;

  constructor(total: number) {
    this.total = total;
  }

  elapsed(): string {
    return formatDuration(Math.round((Date.now() - this.started) / 1000) * 1000);
  }

  say(line: string): void {
    console.error(`localcluster: ${line} [${this.elapsed()}]`);
  }

  /** Runs `work` as the next binary, repeating its line every HEARTBEAT_MS while it runs. */
  async binary(name: string, work: () => Promise<unknown>): Promise<void> {
    const line = () => `building ${name} (${this.done + 1}/${this.total})…`;
    this.say(line());
    const heartbeat = setInterval(() => this.say(line()), HEARTBEAT_MS);
    try {
      await work();
    } finally {
      clearInterval(heartbeat);
    }
    this.done++;
  }
}

/** How often a running build says it is still at it. */
const HEARTBEAT_MS = 30_000;

async function buildComponent(component: Component, progress: BuildProgress): Promise<void> {
  const dir = componentDir(component);
  const missing = missingBinaries(component);
  if (missing.length === 0) return;
  const tools = `tool (\n${Object.values(component.commands)
    .map((pkg) => `\t${pkg}`)
    .join("\n")}\n)`;
  await writeWrapperModule(component, tools);
  progress.say(`downloading the Go modules of ${component.name} ${component.version}`);
  await run("go", ["mod", "tidy"], { cwd: dir, env: GO_ENV });
  const ldflags = ["-s", "-w", ...component.ldflags].join(" ");
  for (const binary of missing) {
    const args = [
      "build",
      "-trimpath",
      "-ldflags",
      ldflags,
      "-o",
      binaryPath(component, binary),
      component.commands[binary] as string,
    ];
    await progress.binary(`${binary} ${component.version}`, () =>
      run("go", args, { cwd: dir, env: GO_ENV, inherit: true }),
    );
  }
}

const GO_ENV = { ...process.env, CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" };

/** The component's wrapper module (go.mod requiring the upstream module) in a fresh bin/ folder. */
async function writeWrapperModule(component: Component, extra: string): Promise<void> {
  const dir = componentDir(component);
  await mkdir(path.join(dir, "bin"), { recursive: true });
  const goMod = [
    `module localccm.test/${component.name}`,
    "",
    "go 1.26",
    "",
    `require ${component.module} ${component.version}`,
    "",
    (await component.goModExtra?.()) ?? "",
    extra,
    "",
  ].join("\n");
  await writeFile(path.join(dir, "go.mod"), goMod);
}

/** Builds whatever is missing (sequentially: two cores are better spent on one link at a time). */
export async function ensureBinaries(): Promise<Binaries> {
  const total = COMPONENTS.reduce((sum, component) => sum + missingBinaries(component).length, 0);
  if (total > 0) {
    const progress = new BuildProgress(total);
    progress.say(`building ${total} pinned binaries with Go into ${CACHE_DIR} (cold: about 10 minutes on 2 cores)`);
    for (const component of COMPONENTS) await buildComponent(component, progress);
    progress.say(`built ${total} binaries`);
  }
  const [kubernetes, etcd, helm, metricsServer, coredns, actionlint, distribution] = COMPONENTS as [
    Component,
    Component,
    Component,
    Component,
    Component,
    Component,
    Component,
  ];
  return {
    kubeApiserver: binaryPath(kubernetes, "kube-apiserver"),
    kubeControllerManager: binaryPath(kubernetes, "kube-controller-manager"),
    kubeScheduler: binaryPath(kubernetes, "kube-scheduler"),
    kubelet: binaryPath(kubernetes, "kubelet"),
    kubeProxy: binaryPath(kubernetes, "kube-proxy"),
    kubectl: binaryPath(kubernetes, "kubectl"),
    agnhost: binaryPath(kubernetes, "agnhost"),
    etcd: binaryPath(etcd, "etcd"),
    helm: binaryPath(helm, "helm"),
    metricsServer: binaryPath(metricsServer, "metrics-server"),
    coredns: binaryPath(coredns, "coredns"),
    actionlint: binaryPath(actionlint, "actionlint"),
    registry: binaryPath(distribution, "registry"),
  };
}

/**
 * The binaries of a component that ensureBinaries() leaves out (built only when something asks for it, e.g. a
 * benchmark's anchor): binary name → path, built first if missing.
 */
export async function ensureComponent(component: Component): Promise<Record<string, string>> {
  const missing = missingBinaries(component).length;
  if (missing > 0) {
    const progress = new BuildProgress(missing);
    progress.say(`building ${component.name} ${component.version} with Go into ${componentDir(component)}`);
    await buildComponent(component, progress);
    progress.say(`built ${component.name} ${component.version}`);
  }
  return Object.fromEntries(Object.keys(component.commands).map((binary) => [binary, binaryPath(component, binary)]));
}

/**
 * Upstream's e2e suite, the package k8s.io/kubernetes/test/e2e compiled as its test binary (as `make
 * WHAT=test/e2e/e2e.test` does): the tests live in its _test.go file, so `go test -c`, after `go get -t` has
 * required what the tests import (`go mod tidy` in a wrapper module keeps no dependency's test imports). It takes
 * --ginkgo.* flags itself: no ginkgo CLI. Cold, on 2 cores and after ensureBinaries(): about 3 minutes.
 */
const E2E_SUITE: Component = {
  name: "e2e",
  version: KUBERNETES_VERSION,
  module: "k8s.io/kubernetes",
  commands: { "e2e.test": "k8s.io/kubernetes/test/e2e" },
  ldflags: kubernetesVersionFlags(),
  goModExtra: stagingReplaces,
};

/** Path of e2e.test (E2E_SUITE), built first if missing. */
export async function ensureE2ETest(): Promise<string> {
  const binary = binaryPath(E2E_SUITE, "e2e.test");
  if (existsSync(binary)) return binary;
  const pkg = E2E_SUITE.commands["e2e.test"] as string;
  const progress = new BuildProgress(1);
  const dir = componentDir(E2E_SUITE);
  await writeWrapperModule(E2E_SUITE, "");
  progress.say(`downloading the Go modules of upstream's e2e suite ${E2E_SUITE.version}`);
  await run("go", ["get", "-t", `${pkg}@${E2E_SUITE.version}`], { cwd: dir, env: GO_ENV });
  const ldflags = ["-s", "-w", ...E2E_SUITE.ldflags].join(" ");
  const args = ["test", "-c", "-trimpath", "-ldflags", ldflags, "-o", binary, pkg];
  await progress.binary(`e2e.test ${E2E_SUITE.version}`, () =>
    run("go", args, { cwd: dir, env: GO_ENV, inherit: true }),
  );
  return binary;
}
