// Where the API server is and how to authenticate: in-cluster service account or kubeconfig.
// Credentials are a function, not a value, because bound tokens rotate and exec plugins expire.
import { execFile } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { hostPort } from "../net/ip.ts";

export interface Credentials {
  token?: string;
  cert?: string;
  key?: string;
}

export interface ClientConfig {
  /** Base URL, possibly with a path prefix (https://host:6443/prefix). */
  server: string;
  ca?: string;
  insecureSkipTLSVerify: boolean;
  tlsServerName?: string;
  /** Current credentials; cheap when nothing changed. */
  credentials(): Promise<Credentials>;
  /** Forget cached credentials (after a 401): the next call re-reads files or re-runs exec. */
  invalidate(): void;
  /** Namespace of the context or the pod, for namespaced defaults. */
  namespace?: string;
  /** What this config came from, for error messages. */
  source: string;
}

/** A configuration problem the user must fix; the CLI prints its message on one line and exits 2. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

export interface LoadOptions {
  kubeconfig?: string;
  context?: string;
  env?: NodeJS.ProcessEnv;
  /** Service-account mount (tests point it at a temp dir). */
  serviceAccountDir?: string;
}

/**
 * Resolution order, as client-go's: an explicit --kubeconfig, then in-cluster when
 * KUBERNETES_SERVICE_HOST is set, then $KUBECONFIG, then ~/.kube/config.
 */
export async function loadClientConfig(options: LoadOptions = {}): Promise<ClientConfig> {
  const env = options.env ?? process.env;
  if (options.kubeconfig)
    return loadKubeconfig(options.kubeconfig.split(path.delimiter), options.context, env);
  if (env.KUBERNETES_SERVICE_HOST)
    return loadInCluster(env, options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR);
  if (env.KUBECONFIG)
    return loadKubeconfig(env.KUBECONFIG.split(path.delimiter).filter(Boolean), options.context, env);
  const home = path.join(env.HOME ?? os.homedir(), ".kube", "config");
  return loadKubeconfig([home], options.context, env);
}

function readText(file: string, what: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError(
      `cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
    );
  }
}

/** A token file re-read whenever its modification time changes (kubelet rotates bound tokens). */
function tokenFileReader(file: string): { read(): string; invalidate(): void } {
  let cached: { mtimeMs: number; token: string } | undefined;
  return {
    read() {
      let mtimeMs: number;
      try {
        mtimeMs = statSync(file).mtimeMs;
      } catch (err) {
        throw new ConfigError(
          `cannot read token file ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
        );
      }
      if (cached?.mtimeMs !== mtimeMs) cached = { mtimeMs, token: readText(file, "token file").trim() };
      return cached.token;
    },
    invalidate() {
      cached = undefined;
    },
  };
}

/** The namespace of the mounted service account, if there is one. */
export function serviceAccountNamespace(dir = SERVICE_ACCOUNT_DIR): string | undefined {
  try {
    return readFileSync(path.join(dir, "namespace"), "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

function loadInCluster(env: NodeJS.ProcessEnv, dir: string): ClientConfig {
  const host = env.KUBERNETES_SERVICE_HOST as string;
  const port = env.KUBERNETES_SERVICE_PORT || "443";
  const token = tokenFileReader(path.join(dir, "token"));
  token.read(); // fail now, with a clear message, if the mount is missing
  return {
    server: `https://${hostPort(host, port)}`,
    ca: readText(path.join(dir, "ca.crt"), "service-account CA"),
    insecureSkipTLSVerify: false,
    credentials: async () => ({ token: token.read() }),
    invalidate: token.invalidate,
    namespace: serviceAccountNamespace(dir),
    source: "in-cluster service account",
  };
}

// --- kubeconfig -------------------------------------------------------------------------------

interface Named {
  name: string;
  value: Record<string, unknown>;
}

interface KubeconfigFile {
  dir: string;
  file: string;
  currentContext?: string;
  clusters: Named[];
  users: Named[];
  contexts: Named[];
}

async function readKubeconfig(file: string): Promise<KubeconfigFile> {
  const text = readText(file, "kubeconfig");
  const { parse } = await import("yaml"); // only kubeconfig users pay for the YAML parser
  let doc: Record<string, unknown>;
  try {
    doc = (parse(text) ?? {}) as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError(`kubeconfig ${file} is not valid YAML: ${(err as Error).message.split("\n")[0]}`);
  }
  const named = (key: string, field: string) =>
    ((doc[key] as Record<string, unknown>[] | undefined) ?? []).map((entry) => ({
      name: String(entry.name),
      value: (entry[field] ?? {}) as Record<string, unknown>,
    }));
  return {
    dir: path.dirname(path.resolve(file)),
    file,
    currentContext: doc["current-context"] as string | undefined,
    clusters: named("clusters", "cluster"),
    users: named("users", "user"),
    contexts: named("contexts", "context"),
  };
}

/** First definition of a name wins across the merged files, like kubectl. */
function lookup(files: KubeconfigFile[], pick: (f: KubeconfigFile) => Named[], name: string) {
  for (const file of files) {
    const entry = pick(file).find((e) => e.name === name);
    if (entry) return { value: entry.value, dir: file.dir };
  }
  return undefined;
}

async function loadKubeconfig(
  files: string[],
  contextName: string | undefined,
  env: NodeJS.ProcessEnv,
): Promise<ClientConfig> {
  if (files.length === 0) throw new ConfigError("no kubeconfig given");
  const docs = await Promise.all(files.map(readKubeconfig));
  const source = `kubeconfig ${files.join(path.delimiter)}`;
  const name = contextName ?? docs.find((d) => d.currentContext)?.currentContext;
  if (!name) throw new ConfigError(`${source} has no current-context; pass a context`);
  const context = lookup(docs, (d) => d.contexts, name)?.value;
  if (!context) throw new ConfigError(`${source} has no context "${name}"`);
  const cluster = lookup(docs, (d) => d.clusters, String(context.cluster));
  if (!cluster)
    throw new ConfigError(
      `${source}: context "${name}" names cluster "${context.cluster}", which is not defined`,
    );
  const user =
    context.user === undefined
      ? { value: {}, dir: docs[0]?.dir ?? "." }
      : lookup(docs, (d) => d.users, String(context.user));
  if (!user)
    throw new ConfigError(`${source}: context "${name}" names user "${context.user}", which is not defined`);

  const c = cluster.value;
  if (typeof c.server !== "string" || !/^https?:\/\//.test(c.server)) {
    throw new ConfigError(`${source}: cluster "${context.cluster}" has no https:// server`);
  }
  if (c["proxy-url"]) throw new ConfigError(`${source}: cluster proxy-url is not supported`);
  const ca = dataOrFile(c, "certificate-authority", cluster.dir);
  const auth = userCredentials(user.value, user.dir, `${source} user "${context.user}"`, c, env);
  return {
    server: c.server.replace(/\/+$/, ""),
    ca,
    insecureSkipTLSVerify: c["insecure-skip-tls-verify"] === true,
    tlsServerName: c["tls-server-name"] as string | undefined,
    ...auth,
    namespace: context.namespace as string | undefined,
    source,
  };
}

/** `<field>-data` (base64) or `<field>` (a path relative to the kubeconfig's folder). */
function dataOrFile(obj: Record<string, unknown>, field: string, dir: string): string | undefined {
  const data = obj[`${field}-data`];
  if (typeof data === "string" && data) return Buffer.from(data, "base64").toString("utf8");
  const file = obj[field];
  if (typeof file === "string" && file) return readText(path.resolve(dir, file), field);
  return undefined;
}

const UNSUPPORTED_USER_FIELDS = [
  "auth-provider",
  "username",
  "password",
  "as",
  "as-groups",
  "as-uid",
  "as-user-extra",
];

function userCredentials(
  user: Record<string, unknown>,
  dir: string,
  where: string,
  cluster: Record<string, unknown>,
  env: NodeJS.ProcessEnv,
): Pick<ClientConfig, "credentials" | "invalidate"> {
  const unsupported = UNSUPPORTED_USER_FIELDS.find((field) => user[field] !== undefined);
  if (unsupported)
    throw new ConfigError(
      `${where}: authentication by "${unsupported}" is not supported ` +
        "(use a client certificate, token, tokenFile or exec)",
    );
  const cert = dataOrFile(user, "client-certificate", dir);
  const key = dataOrFile(user, "client-key", dir);
  if (Boolean(cert) !== Boolean(key))
    throw new ConfigError(`${where}: a client certificate needs both certificate and key`);
  const staticCreds: Credentials = { cert, key };
  if (typeof user.token === "string" && user.token) {
    const creds = { ...staticCreds, token: user.token };
    return { credentials: async () => creds, invalidate: () => {} };
  }
  if (typeof user.tokenFile === "string" && user.tokenFile) {
    const reader = tokenFileReader(path.resolve(dir, user.tokenFile));
    reader.read();
    return {
      credentials: async () => ({ ...staticCreds, token: reader.read() }),
      invalidate: reader.invalidate,
    };
  }
  if (user.exec)
    return execCredentials(user.exec as Record<string, unknown>, dir, where, cluster, env, staticCreds);
  return { credentials: async () => staticCreds, invalidate: () => {} };
}

// --- exec credential plugins (client.authentication.k8s.io/v1) ---------------------------------

interface ExecStatus {
  token?: string;
  clientCertificateData?: string;
  clientKeyData?: string;
  expirationTimestamp?: string;
}

const EXEC_API_VERSIONS = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"];

function execCredentials(
  exec: Record<string, unknown>,
  dir: string,
  where: string,
  cluster: Record<string, unknown>,
  env: NodeJS.ProcessEnv,
  staticCreds: Credentials,
): Pick<ClientConfig, "credentials" | "invalidate"> {
  const apiVersion = String(exec.apiVersion ?? "");
  if (!EXEC_API_VERSIONS.includes(apiVersion))
    throw new ConfigError(
      `${where}: exec apiVersion "${apiVersion}" is not supported (use ${EXEC_API_VERSIONS[0]})`,
    );
  if (exec.interactiveMode === "Always")
    throw new ConfigError(`${where}: exec plugin requires interactive mode, which a controller cannot offer`);
  const commandName = String(exec.command ?? "");
  if (!commandName) throw new ConfigError(`${where}: exec has no command`);
  // A command with a path separator is relative to the kubeconfig, as in client-go; a bare name is looked up on PATH.
  const command = commandName.includes("/") ? path.resolve(dir, commandName) : commandName;
  const args = ((exec.args as unknown[] | undefined) ?? []).map(String);
  const extraEnv = Object.fromEntries(
    ((exec.env as { name: string; value: string }[] | undefined) ?? []).map((e) => [e.name, e.value]),
  );
  const spec: Record<string, unknown> = { interactive: false };
  if (exec.provideClusterInfo === true) {
    spec.cluster = {
      server: cluster.server,
      "certificate-authority-data": cluster["certificate-authority-data"],
      "insecure-skip-tls-verify": cluster["insecure-skip-tls-verify"],
    };
  }
  const execInfo = JSON.stringify({ apiVersion, kind: "ExecCredential", spec });

  let cached: { creds: Credentials; expires: number } | undefined;
  let pending: Promise<Credentials> | undefined;
  const runPlugin = () =>
    new Promise<Credentials>((resolve, reject) => {
      execFile(
        command,
        args,
        { env: { ...env, ...extraEnv, KUBERNETES_EXEC_INFO: execInfo }, timeout: 60_000 },
        (err, stdout, stderr) => {
          if (err)
            return reject(
              new ConfigError(
                `${where}: exec plugin ${commandName} failed: ${(stderr || err.message).trim().split("\n")[0]}`,
              ),
            );
          let status: ExecStatus;
          try {
            status = (JSON.parse(stdout) as { status?: ExecStatus }).status ?? {};
          } catch {
            return reject(
              new ConfigError(`${where}: exec plugin ${commandName} printed no ExecCredential JSON`),
            );
          }
          const creds: Credentials = {
            token: status.token ?? staticCreds.token,
            cert: status.clientCertificateData ?? staticCreds.cert,
            key: status.clientKeyData ?? staticCreds.key,
          };
          if (!creds.token && !creds.cert)
            return reject(
              new ConfigError(
                `${where}: exec plugin ${commandName} returned neither token nor client certificate`,
              ),
            );
          const expires = status.expirationTimestamp
            ? Date.parse(status.expirationTimestamp)
            : Number.POSITIVE_INFINITY;
          cached = { creds, expires };
          resolve(creds);
        },
      );
    });
  return {
    credentials: async () => {
      if (cached && Date.now() < cached.expires) return cached.creds;
      // One plugin run at a time, however many requests are waiting for it.
      pending ??= runPlugin().finally(() => {
        pending = undefined;
      });
      return pending;
    },
    invalidate: () => {
      cached = undefined;
    },
  };
}
