// `npm run controlplane -- up|down|status|build`: a local control plane for people, in .controlplane/.
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { sleep } from "../src/time/backoff.ts";
import { KubeClient } from "../src/kube/client.ts";
import { loadClientConfig } from "../src/kube/config.ts";
import { alive } from "./exec.ts";
import { ensureBinaries } from "./build.ts";
import { startControlPlane } from "./controlplane.ts";
import { KUBERNETES_VERSION } from "./versions.ts";

// LOCAL_CCM_CONTROLPLANE_DIR lets the CLI's own test use a temp folder instead.
const DIR = path.resolve(
  process.env.LOCAL_CCM_CONTROLPLANE_DIR ?? path.join(import.meta.dirname, "../.controlplane"),
);
const STATE = path.join(DIR, "state.json");
const KUBECONFIG = path.join(DIR, "kubeconfig");

interface State {
  server: string;
  pids: { etcd: number; apiserver: number };
}

function readState(): State | undefined {
  return existsSync(STATE) ? (JSON.parse(readFileSync(STATE, "utf8")) as State) : undefined;
}

async function up(): Promise<number> {
  const state = readState();
  if (state && Object.values(state.pids).every(alive)) {
    console.log(`already running at ${state.server}\nexport KUBECONFIG=${KUBECONFIG}`);
    return 0;
  }
  rmSync(DIR, { recursive: true, force: true });
  const plane = await startControlPlane({ dir: DIR, detached: true });
  plane.admin.close();
  writeFileSync(STATE, JSON.stringify({ server: plane.server, pids: plane.pids() } satisfies State));
  console.log(
    `kube-apiserver ${KUBERNETES_VERSION} running at ${plane.server} (logs in ${DIR})\nexport KUBECONFIG=${KUBECONFIG}`,
  );
  return 0;
}

async function down(): Promise<number> {
  const state = readState();
  const pids = state ? [state.pids.apiserver, state.pids.etcd] : [];
  for (const pid of pids.filter(alive)) {
    process.kill(pid, "SIGTERM");
    for (let i = 0; i < 80 && alive(pid); i++) await sleep(250);
    if (alive(pid)) process.kill(pid, "SIGKILL");
  }
  rmSync(DIR, { recursive: true, force: true });
  console.log(state ? "stopped" : "not running");
  return 0;
}

async function status(): Promise<number> {
  const state = readState();
  if (!state) {
    console.log("not running");
    return 1;
  }
  const running = Object.entries(state.pids).map(
    ([name, pid]) => `${name} pid ${pid} ${alive(pid) ? "running" : "gone"}`,
  );
  const client = new KubeClient(await loadClientConfig({ kubeconfig: KUBECONFIG }), {
    component: "controlplane-cli",
    maxRetries: 0,
  });
  const ready = await client
    .requestText({ method: "GET", path: "/readyz" })
    .catch((err: Error) => err.message);
  client.close();
  console.log(`${state.server}: ${running.join(", ")}; readyz: ${ready}\nexport KUBECONFIG=${KUBECONFIG}`);
  return ready === "ok" ? 0 : 1;
}

const commands: Record<string, () => Promise<number>> = {
  up,
  down,
  status,
  build: async () => {
    console.log(Object.values(await ensureBinaries()).join("\n"));
    return 0;
  },
};

const command = commands[process.argv[2] ?? ""];
if (!command) {
  console.error("usage: npm run controlplane -- up|down|status|build");
  process.exit(2);
}
try {
  process.exit(await command());
} catch (err) {
  console.error(`controlplane: ${(err as Error).message}`);
  process.exit(1);
}
