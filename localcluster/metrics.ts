// Reading what a program serves on /metrics (Prometheus text format), for tests, benchmarks and the demo.
import https from "node:https";
import { isApiError } from "../src/kube/errors.ts";
import type { ControlPlane } from "./controlplane.ts";

/** The metrics at http://<address>/metrics, as series (name and labels, as printed) → value. */
export async function scrapeMetrics(address: string): Promise<Map<string, number>> {
  const res = await fetch(`http://${address}/metrics`);
  if (!res.ok) throw new Error(`GET http://${address}/metrics: HTTP ${res.status}`);
  return parseMetrics(await res.text());
}

/** Prometheus text format as series (name and labels, as printed) → value. */
export function parseMetrics(text: string): Map<string, number> {
  const samples = text.split("\n").filter((line) => line && !line.startsWith("#"));
  return new Map(
    samples.map((line) => {
      const space = line.lastIndexOf(" ");
      return [line.slice(0, space), Number(line.slice(space + 1))];
    }),
  );
}

/** A Prometheus stand-in's ServiceAccount token, bound (granted) or not to the chart's metrics-reader ClusterRole. */
export async function metricsScraperToken(
  plane: Pick<ControlPlane, "admin" | "kubectl">,
  name: string,
  options: { granted: boolean },
): Promise<string> {
  const namespace = "monitoring";
  const namespaceBody = { metadata: { name: namespace } };
  await plane.admin.request({ method: "POST", path: "/api/v1/namespaces", body: namespaceBody }).catch((err: unknown) => {
    if (!isApiError(err, "AlreadyExists")) throw err;
  });
  await plane.admin.request({
    method: "POST",
    path: `/api/v1/namespaces/${namespace}/serviceaccounts`,
    body: { metadata: { name } },
  });
  if (options.granted) {
    const role = "--clusterrole=local-ccm-metrics-reader";
    await plane.kubectl(["create", "clusterrolebinding", `${name}-metrics`, role, `--serviceaccount=${namespace}:${name}`]);
  }
  const request = await plane.admin.request<{ status: { token: string } }>({
    method: "POST",
    path: `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
    body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 3600 } },
  });
  return request.status.token;
}

/** How a secure scrape trusts the server, and where it comes from. */
export interface ScrapeOptions {
  /** The CA to verify the served certificate with; without it the certificate is accepted unverified. */
  ca?: string;
  /** The name the certificate must hold (default: the URL's host). */
  servername?: string;
  /** The client's source address. */
  localAddress?: string;
}

/**
 * GET a secure /metrics URL with a bearer token (none: no Authorization header). Without `ca` the certificate is
 * accepted unverified (a program's self-signed one): for tests of what the program answers, not of who may trust
 * it; with it, verified as a scraper trusting that CA (the chart's ServiceMonitor) does.
 */
export function scrapeSecure(
  url: string | URL,
  token?: string,
  { ca, servername, localAddress }: ScrapeOptions = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
    const trust = ca === undefined ? { rejectUnauthorized: false } : { ca, ...(servername ? { servername } : {}) };
    https
      .get(url, { headers, ...trust, localAddress, agent: false, timeout: 10_000 }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject);
  });
}
