// One leader-election candidate in its own process, so a test can kill it. Prints JSON lines
// {event, identity, at, leader}; SIGTERM shuts down gracefully (releasing the lease).
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { LeaderElector } from "../../src/kube/leaderelection.ts";

const [kubeconfig, identity, lease, renew, retry] = process.argv.slice(2);
const print = (event: string) =>
  process.stdout.write(
    `${JSON.stringify({ event, identity, at: Date.now(), leader: elector.isLeader() })}\n`,
  );
const client = new KubeClient(await loadClientConfig({ kubeconfig }), {
  component: "elector-fixture",
  timeoutMs: 2_000,
});
const elector: LeaderElector = new LeaderElector(client, {
  lease: { name: "fixture", namespace: "default" },
  identity: identity as string,
  leaseDurationMs: Number(lease),
  renewDeadlineMs: Number(renew),
  retryPeriodMs: Number(retry),
  onStartedLeading: () => print("started"),
  onStoppedLeading: () => print("stopped"),
});
const shutdown = new AbortController();
process.once("SIGTERM", () => shutdown.abort());
await elector.run(shutdown.signal);
print("released");
client.close();
