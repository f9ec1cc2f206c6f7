// What both programs serve beside their work: health for kubelet's probes (plain HTTP, no auth: probes carry no
// credentials) and /metrics for Prometheus (by default HTTPS to authorized scrapers only), started from the common
// flags. Each endpoint returns a stop the program registers for shutdown.
import { readFile } from "node:fs/promises";
import os from "node:os";
import type { KubeClient } from "../kube/client.ts";
import type { CommonFlags } from "./common.ts";
import { type HealthServer, type Readiness, startHealthServer, startMetricsServer } from "./health.ts";
import type { Logger } from "./log.ts";
import { apiReviewer, MetricsAuthorizer } from "./metricsauth.ts";
import type { Counter, Registry } from "./metrics.ts";
import { selfSignedCertificate } from "./selfsigned.ts";

/** A self-signed certificate is made anew at each start; a year outlasts any process. */
const SELF_SIGNED_VALIDITY_MS = 365 * 86_400_000;

export interface Endpoints {
  /** "host:port", or "off". */
  health: string;
  metrics: string;
  close(): Promise<void>;
}

export async function startEndpoints(
  flags: Pick<CommonFlags, "healthBindAddress" | "metrics">,
  parts: {
    program: string;
    registry: Registry;
    /** createProgramMetrics()'s metricsRefusals. */
    refusals: Counter<"code" | "rule">;
    ready: () => Readiness | Promise<Readiness>;
    client: KubeClient;
    log: Logger;
  },
): Promise<Endpoints> {
  const { metrics } = flags;
  const started: HealthServer[] = [];
  const close = () => Promise.all(started.map((server) => server.close())).then(() => undefined);
  try {
    const health = flags.healthBindAddress
      ? await startHealthServer({
          address: flags.healthBindAddress,
          ready: parts.ready,
          ...(metrics?.withHealth ? { metrics: parts.registry } : {}),
        })
      : undefined;
    if (health) started.push(health);
    let served = metrics?.withHealth && health ? health : undefined;
    if (metrics && !served) {
      const tls = metrics.secure ? await certificate(metrics, parts.program) : undefined;
      const audiences = metrics.tokenAudiences;
      const authorizer = metrics.secure ? new MetricsAuthorizer(apiReviewer(parts.client), { audiences }) : undefined;
      served = await startMetricsServer({
        address: metrics.address,
        metrics: parts.registry,
        ...(tls ? { tls } : {}),
        ...(authorizer ? { authorize: (header, path, source) => authorizer.decide(header, path, source) } : {}),
        onRefused: ({ status, rule, reason }) => {
          parts.refusals.with({ code: String(status), rule }).inc();
          parts.log.v(2)?.("metrics request refused", { status, rule, reason });
        },
      });
      started.push(served);
    }
    const scheme = metrics?.secure ? "https" : "http";
    return {
      health: health?.address ?? "off",
      metrics: served ? `${scheme}://${served.address}/metrics` : "off",
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** The given certificate and key, or a self-signed pair for this host. */
async function certificate(
  metrics: NonNullable<CommonFlags["metrics"]>,
  program: string,
): Promise<{ cert: string | Buffer; key: string | Buffer }> {
  if (metrics.certFile && metrics.keyFile) {
    return { cert: await readFile(metrics.certFile), key: await readFile(metrics.keyFile) };
  }
  const { certPem, keyPem } = selfSignedCertificate({
    commonName: program,
    dnsNames: ["localhost", os.hostname()],
    ips: ["127.0.0.1", "::1", ...(metrics.address.host ? [metrics.address.host] : [])],
    validForMs: SELF_SIGNED_VALIDITY_MS,
  });
  return { cert: certPem, key: keyPem };
}
