// One leader-election candidate in its own process, so a test can kill it. Prints JSON lines
// {event, identity, at, leader}; SIGTERM shuts down gracefully (releasing the lease). With a last argument of N ms,
// the answer to each of its Lease writes comes N ms late (a slow network): the write is made, and a stop meanwhile
// aborts the wait as it would abort a request whose answer is still on its way ("writing" is printed as it is sent).
import { KubeClient, type RequestOptions } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { LeaderElector } from "../../src/kube/leaderelection.ts";
import { sleep } from "../../src/time/backoff.ts";

const [kubeconfig, identity, lease, renew, retry, lateAnswerMs = "0"] = process.argv.slice(2);
const print = (event: string) =>
  process.stdout.write(
    `${JSON.stringify({ event, identity, at: Date.now(), leader: elector.isLeader() })}\n`,
  );

class LateAnswers extends KubeClient {
  override async request<T>(options: RequestOptions): Promise<T> {
    if (options.method === "GET" || lateAnswerMs === "0") return super.request<T>(options);
    print("writing");
    const answer = await super.request<T>({ ...options, signal: undefined });
    await sleep(Number(lateAnswerMs), options.signal);
    options.signal?.throwIfAborted();
    return answer;
  }
}

const client = new LateAnswers(await loadClientConfig({ kubeconfig }), {
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
