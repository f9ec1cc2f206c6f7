// Upstream's Kubernetes e2e suite (e2e.test, built from the pinned module by localcluster/build.ts) run against a
// local cluster from its client host, outside the nodes: a test that reaches a load balancer's address from the
// suite's own process does so as a user of the cluster would, and the backend sees the client host's address.
//
//   const results = await runE2ESuite(cluster, { labelFilter: "Feature: containsAny LoadBalancer", reportDir });
//
// The suite pulls no image: its pods use registry.k8s.io/e2e-test-images/agnhost at the tag the pinned module
// names, which every node already carries (localcluster/agnhost.ts), and their pull policy is IfNotPresent.
import { spawn } from "node:child_process";
import { createWriteStream, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { ensureBinaries, ensureE2ETest } from "../../localcluster/build.ts";
import type { Cluster } from "../../localcluster/cluster.ts";
import { clientCommand } from "../../localcluster/node-network.ts";
import { run } from "../../localcluster/exec.ts";

export interface E2EOptions {
  /** Ginkgo label filter, e.g. "Feature: containsAny LoadBalancer". */
  labelFilter: string;
  /** Ginkgo focus: a regular expression over the full spec name. */
  focus?: string;
  /** Full spec names not to run (matched literally). */
  skip?: string[];
  /** Where the JUnit and JSON reports and e2e.log go. */
  reportDir: string;
  /** Also stream the suite's output here (people watching a long run); it always goes to e2e.log. */
  echo?: boolean;
}

export interface SpecResult {
  /** As ginkgo prints it: the containers' texts and the spec's own, space-separated. */
  name: string;
  state: string;
  seconds: number;
  /** The failure's message and where it happened, for failed specs. */
  failure?: string;
}

/** A ginkgo JSON report, the fields read here. */
interface GinkgoReport {
  SpecReports?: {
    LeafNodeType: string;
    LeafNodeText: string;
    ContainerHierarchyTexts: string[] | null;
    State: string;
    RunTime: number;
    Failure?: { Message: string; Location: { FileName: string; LineNumber: number } };
  }[];
}

/** The whole suite's bound (ginkgo's default is 1 h; the load-balancer specs alone take longer on 2 cores). */
const SUITE_TIMEOUT = "3h";

/** `text` matched literally inside a ginkgo (Go RE2) regular expression. */
export const literally = (text: string) => text.replace(/[\\^$.|?*+()[\]{}]/g, "\\$&");

/** Runs e2e.test from the cluster's client host; resolves with every selected spec's result, failed ones too. */
export async function runE2ESuite(cluster: Cluster, options: E2EOptions): Promise<SpecResult[]> {
  const e2eTest = await ensureE2ETest();
  const { kubectl } = await ensureBinaries();
  mkdirSync(options.reportDir, { recursive: true });
  const jsonReport = path.join(options.reportDir, "report.json");
  const args = [
    // The framework's provider with no cloud behind it: nothing is created outside the cluster.
    "--provider=skeleton",
    `--kubeconfig=${cluster.kubeconfigPath}`,
    `--report-dir=${options.reportDir}`,
    // Its log dump runs cluster/log-dump/log-dump.sh from a Kubernetes checkout, which is not here.
    "--disable-log-dump",
    `--ginkgo.json-report=${jsonReport}`,
    `--ginkgo.timeout=${SUITE_TIMEOUT}`,
    `--ginkgo.label-filter=${options.labelFilter}`,
    ...(options.focus ? [`--ginkgo.focus=${options.focus}`] : []),
    ...(options.skip?.length ? [`--ginkgo.skip=${options.skip.map(literally).join("|")}`] : []),
    "--ginkgo.no-color",
    "--ginkgo.silence-skips",
    "--ginkgo.v",
  ];
  const { argv, env } = clientCommand(cluster.slot, cluster.dir, kubectl, e2eTest, args);
  const exitCode = await runLogged(argv, env, path.join(options.reportDir, "e2e.log"), options.echo ?? false);
  let report: GinkgoReport[];
  try {
    report = JSON.parse(readFileSync(jsonReport, "utf8")) as GinkgoReport[];
  } catch {
    throw new Error(`e2e.test exited ${exitCode} without a report; see ${path.join(options.reportDir, "e2e.log")}`);
  }
  return specResults(report);
}

/** The names of the specs `labelFilter` selects, from a dry run (no cluster). */
export async function listSpecs(labelFilter: string, reportDir: string): Promise<string[]> {
  mkdirSync(reportDir, { recursive: true });
  const jsonReport = path.join(reportDir, "dry-run.json");
  const args = [
    "--provider=skeleton",
    "--ginkgo.dry-run",
    `--ginkgo.label-filter=${labelFilter}`,
    `--ginkgo.json-report=${jsonReport}`,
    "--ginkgo.silence-skips",
  ];
  await run(await ensureE2ETest(), args);
  return specResults(JSON.parse(readFileSync(jsonReport, "utf8")) as GinkgoReport[]).map((spec) => spec.name);
}

/** Runs argv with its output into `logFile` (and ours too with `echo`); resolves with its exit code. */
function runLogged(argv: string[], env: NodeJS.ProcessEnv, logFile: string, echo: boolean): Promise<number> {
  const log = createWriteStream(logFile);
  // It dies with this process (as the cluster's own processes do), also when a test run is killed.
  const child = spawn("setpriv", ["--pdeathsig", "KILL", "--", ...argv], { env, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout.pipe(log, { end: false });
  child.stderr.pipe(log, { end: false });
  if (echo) {
    child.stdout.pipe(process.stdout, { end: false });
    child.stderr.pipe(process.stderr, { end: false });
  }
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => log.end(() => resolve(code ?? (signal ? 128 : 1))));
  });
}

const where = (location: { FileName: string; LineNumber: number }) =>
  `${path.basename(location.FileName)}:${location.LineNumber}`;

/**
 * The specs the filters selected, in the order they ran: those filtered out are "skipped" too, but without the
 * message a spec that skipped itself (e2eskipper.Skipf) carries.
 */
export function specResults(report: GinkgoReport[]): SpecResult[] {
  return report
    .flatMap((suite) => suite.SpecReports ?? [])
    .filter((spec) => spec.LeafNodeType === "It" && (spec.State !== "skipped" || spec.Failure !== undefined))
    .map((spec) => ({
      name: [...(spec.ContainerHierarchyTexts ?? []), spec.LeafNodeText].join(" "),
      state: spec.State,
      seconds: Math.round(spec.RunTime / 1e9),
      failure: spec.Failure && `${spec.Failure.Message} (${where(spec.Failure.Location)})`,
    }));
}
