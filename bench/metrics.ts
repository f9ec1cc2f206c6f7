// `npm run bench:metrics`: what serving /metrics costs the agent. The bundled agent, with the DaemonSet's Node flags,
// in a network namespace against the real control plane, run three ways one after the other: no /metrics (health
// only); plain HTTP /metrics at the health address (the layout before secure metrics); secure metrics (HTTPS with
// a self-signed certificate, TokenReview + SubjectAccessReview). Each is scraped every BENCH_SCRAPE_MS (2 s) for
// BENCH_SECONDS (60 s) by a scraper granted get /metrics; printed: RSS / anonymous memory at the end, peak RSS, and
// the reviews per scrape from the audit log.
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { bundleProgram } from "../localcluster/bundle.ts";
import { registerNode, startAgent, startWorld } from "../test/agent/harness.ts";
import { shippedCommand } from "../test/deploy/shipped.ts";
import { auditedRequests } from "../localcluster/audit.ts";
import { metricsScraperToken, scrapeSecure } from "../localcluster/metrics.ts";
import { waitFor } from "../localcluster/wait.ts";
import { processMemory } from "./proc.ts";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const SCRAPE_MS = Number(process.env.BENCH_SCRAPE_MS ?? 2000);
const MiB = 2 ** 20;
const entry = await bundleProgram("local-ccm", path.join(import.meta.dirname, "../.cache/bench"));
const nodeArgs = shippedCommand("local-ccm").nodeArgs;

const world = await startWorld();
try {
  const node = await world.nodeHost(0);
  await registerNode(world.nodes, "bench-node", "198.18.100.10");
  await world.plane.kubectl(["apply", "-f", path.join(import.meta.dirname, "../deploy/metrics.yaml")]);
  const token = await metricsScraperToken(world.plane, "bench-prometheus", { granted: true });
  const at = node.reachableAt;
  const health = `${at}:10263`;
  const layouts: { name: string; args: string[]; url?: string }[] = [
    { name: "no /metrics (health only)", args: ["--metrics-bind-address="] },
    {
      name: "plain /metrics at the health address",
      args: [`--metrics-bind-address=${health}`, "--secure-metrics=false"],
      url: `http://${health}/metrics`,
    },
    {
      name: "secure /metrics (HTTPS, reviews)",
      args: [`--metrics-bind-address=${at}:10265`],
      url: `https://${at}:10265/metrics`,
    },
  ];
  const user = "system:serviceaccount:kube-system:local-ccm";
  for (const layout of layouts) {
    const since = new Date();
    const agent = startAgent(node, ["--node-name=bench-node", `--health-bind-address=${health}`, ...layout.args], {
      entry,
      nodeArgs,
    });
    try {
      await waitFor("the agent ready", async () => (await fetch(`http://${health}/readyz`)).ok, 30_000);
      let scrapes = 0;
      for (const end = Date.now() + SECONDS * 1000; Date.now() < end; scrapes++) {
        if (layout.url) {
          const reply = layout.url.startsWith("https:")
            ? await scrapeSecure(layout.url, token)
            : { status: (await fetch(layout.url)).status };
          if (reply.status !== 200) throw new Error(`${layout.url}: HTTP ${reply.status}`);
        }
        await delay(SCRAPE_MS);
      }
      const memory = processMemory(agent.child.pid as number);
      const counts = await auditedRequests(world.plane.auditLogPath as string, { user, since });
      const reviews = (counts.get("create tokenreviews") ?? 0) + (counts.get("create subjectaccessreviews") ?? 0);
      const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
      const scraped = layout.url ? `${scrapes} scrapes, ${reviews} reviews` : "not scraped";
      console.log(
        `${layout.name.padEnd(40)} RSS ${mib(memory.rss)} / anonymous ${mib(memory.anon)}, peak ${mib(memory.peak)}; ${scraped}`,
      );
    } finally {
      await agent.stop();
    }
  }
} finally {
  await world.stop();
}
