// An OCI registry on this machine: distribution's `registry` command (pinned in versions.ts, built with the other
// binaries), for the release path's test (test/deploy/release.test.ts): the release script pushes the chart and the
// image to it as the release workflow pushes them to ghcr.io, and a local cluster's containerd pulls from it.
// - TLS from a CA of its own, made per registry: whoever talks to it trusts that CA and nothing is "insecure"
//   (helm and skopeo through SSL_CERT_FILE, Go's standard way; a node's containerd through its certs.d, as
//   an operator configures a private registry: ClusterNode.trustRegistry).
// - It listens on the one address it is given. The nodes' containerd runs in their network namespaces, where the
//   machine's loopback is not theirs: a cluster's bridge gateway (the root namespace's address on a bridge that
//   only that cluster's namespaces are on, behind its blackhole rule) is what both the host and the nodes reach,
//   and nothing outside this machine does.
// - No authentication (ghcr.io's login is the workflow's own step); a JSON log line per request, which tests read.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { run } from "./exec.ts";
import { createAuthority, issueServingCertificate } from "./pki.ts";
import { logTail, type Service, startService, stopService, waitUntil } from "./service.ts";

export interface RegistryOptions {
  /** Holds config.yml, the CA, the certificate, data/ and registry.log. */
  dir: string;
  /** The pinned `registry` binary (ensureBinaries().registry). */
  binary: string;
  /** The IPv4 address to listen on, and the one name in its certificate. */
  address: string;
  port?: number;
}

export interface Registry {
  /** host:port, the registry part of references to it. */
  host: string;
  /** The CA that signed its certificate (PEM file). */
  caCert: string;
  service: Service;
  /** Its requests so far, as distribution logs them. */
  requests(): RegistryRequest[];
  stop(): Promise<void>;
}

/** One request the registry answered (the fields of its access log line that tests look at). */
export interface RegistryRequest {
  method: string;
  uri: string;
  status: number;
  remoteAddr: string;
  userAgent: string;
}

export const REGISTRY_PORT = 5000;

export async function startRegistry(options: RegistryOptions): Promise<Registry> {
  const dir = path.resolve(options.dir);
  mkdirSync(path.join(dir, "data"), { recursive: true });
  const host = `${options.address}:${options.port ?? REGISTRY_PORT}`;
  const ca = await createAuthority(dir, "/CN=local-ccm-test-registry-ca");
  const serving = await issueServingCertificate(ca, "registry", "/CN=registry", [`IP:${options.address}`]);
  const config = {
    version: 0.1,
    log: { level: "info", formatter: "json", accesslog: { disabled: true } },
    storage: { filesystem: { rootdirectory: path.join(dir, "data") } },
    http: { addr: host, tls: { certificate: serving.cert, key: serving.key } },
  };
  writeFileSync(path.join(dir, "config.yml"), JSON.stringify(config, null, 2)); // YAML reads JSON
  // OTEL_TRACES_EXPORTER: distribution exports its traces over OTLP unless told not to (its docs say so).
  const service = startService("registry", "env", ["OTEL_TRACES_EXPORTER=none", options.binary, "serve", "config.yml"], {
    dir,
  });
  const stop = () => stopService(service, 10_000);
  try {
    await waitUntil(service, `answering on https://${host}/v2/`, async () => {
      await run("curl", ["-sSf", "--cacert", ca.caCert, "-o", "/dev/null", `https://${host}/v2/`]);
      return true;
    });
  } catch (err) {
    await stop();
    throw new Error(`${(err as Error).message}\n${await logTail(service)}`, { cause: err });
  }
  return { host, caCert: ca.caCert, service, requests: () => registryRequests(service.logPath), stop };
}

/** The "response completed" lines of distribution's JSON log. */
export function registryRequests(logPath: string): RegistryRequest[] {
  return readFileSync(logPath, "utf8")
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((entry) => entry.msg === "response completed")
    .map((entry) => ({
      method: String(entry["http.request.method"]),
      uri: String(entry["http.request.uri"]),
      status: Number(entry["http.response.status"]),
      remoteAddr: String(entry["http.request.remoteaddr"]),
      userAgent: String(entry["http.request.useragent"]),
    }));
}
