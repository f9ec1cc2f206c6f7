// Starts a real control plane (etcd + kube-apiserver with TLS, RBAC and service-account tokens)
// on free loopback ports, for tests, benchmarks and the demo. Opt-in, for tests that need them and
// for the cluster (localcluster/cluster.ts): kube-controller-manager (CSR signing with the cluster
// CA, service-account tokens, node lifecycle, workload controllers), kube-scheduler, and an
// apiserver that serves real kubelets and their pods. Tests that ask for none of them pay nothing.
//
// Everything it starts dies with the process that started it: children run under
// `setpriv --pdeathsig KILL`, so even a SIGKILLed test leaves no etcd or apiserver behind, and the
// temp folder is removed on exit. The `up` CLI is the exception (detached: it outlives its caller).
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import https from "node:https";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { KubeClient } from "../src/kube/client.ts";
import { loadClientConfig } from "../src/kube/config.ts";
import { isApiError } from "../src/kube/errors.ts";
import { onExit } from "./cleanup.ts";
import { run } from "./exec.ts";
import { type Binaries, ensureBinaries } from "./build.ts";
import { type Service, startService, stopService, waitUntil } from "./service.ts";
import {
  type CertificateAuthority,
  createPki,
  FRONT_PROXY_CLIENT,
  issueClientCertificate,
  type KeyPair,
  type Pki,
} from "./pki.ts";

export interface ControlPlaneOptions {
  /** Extra IPs for the serving certificate; the apiserver then listens on all addresses, so a
   * network namespace can reach it over a veth address. */
  extraIPs?: string[];
  /** Write a Metadata-level audit log (one JSON line per request, with the user agent). */
  audit?: boolean;
  /** The Services' cluster IPs without kubelets (with them: `kubelets.serviceNetwork`); default 10.96.0.0/24. */
  serviceCIDR?: string;
  /** State folder; a fresh temp folder by default. */
  dir?: string;
  /** Leave the processes running when this process exits (the `up` command). */
  detached?: boolean;
  /** Run kube-controller-manager (see controllerManagerArgs for what it runs). */
  controllerManager?: boolean | ControllerManagerOptions;
  /** Run kube-scheduler, so pods without a nodeName get one. */
  scheduler?: boolean;
  /** Serve real kubelets and their pods; needs `controllerManager` (pods need their ServiceAccounts). */
  kubelets?: KubeletsOptions;
  /**
   * The NodeRestriction admission plugin, as every real distribution runs it: a kubelet may change only its
   * own Node (not its taints, nor node-role labels) and mint tokens only for pods on its own node. Default: on
   * with `kubelets`. Off on a bare control plane, where a test that plays a kubelet (the CSR approver's)
   * must be able to send what NodeRestriction would refuse first, as on a cluster that runs without it.
   */
  nodeRestriction?: boolean;
}

export interface ControllerManagerOptions {
  /** How long a Node may go without a status update before it is marked NotReady (kcm: 50s). */
  nodeMonitorGracePeriodSeconds?: number;
}

export interface KubeletsOptions {
  /**
   * A /24 for Services, e.g. "198.19.3.0/24"; its first address is the `kubernetes` Service's cluster IP, which
   * kube-proxy on the nodes sends to `address`. ServiceAccount admission is on (pods get projected tokens), and the
   * apiserver reaches kubelets at their InternalIP with a client certificate (`kubectl logs`).
   */
  serviceNetwork: string;
  /**
   * An address of this host the nodes reach, outside `serviceNetwork`: the apiserver listens there on port 443,
   * and advertises it as the `kubernetes` Service's endpoint. Not the cluster IP itself: nftables kube-proxy
   * rejects every packet still addressed to a cluster IP after its DNAT (its cluster-ips-check).
   */
  address: string;
  /** The apiserver verifies kubelets' serving certificates against the cluster CA
   * (--kubelet-certificate-authority): `kubectl logs` then works only on nodes whose certificate the
   * cluster CA signed (serverTLSBootstrap, approved), and fails on self-signed ones. Off by default,
   * as in kubeadm: kubelets sign their own serving certificates unless told otherwise. */
  verifyServingCertificates?: boolean;
}

export interface ServiceAccountKubeconfigOptions {
  namespace: string;
  name: string;
  /** Bind the token to this Pod; if it runs on a node, the token carries the node-name claim. */
  boundPod?: { name: string; uid: string };
  expirationSeconds?: number;
  /** Server URL to write (e.g. over a veth address); the admin server URL by default. */
  server?: string;
  /** Write the token to a file and reference it with tokenFile (for rotation tests). */
  tokenFile?: boolean;
}

export interface ControlPlane {
  dir: string;
  server: string;
  /** The apiserver's URL at another of its addresses (one of `extraIPs`, e.g. from a namespace). */
  serverAt(ip: string): string;
  kubeconfigPath: string;
  caPath: string;
  /** The cluster CA with its key, to issue more client certificates (e.g. kubelets'). */
  certificateAuthority: CertificateAuthority;
  binaries: Binaries;
  admin: KubeClient;
  auditLogPath: string | undefined;
  pids(): ControlPlanePids;
  kubectl(args: string[], input?: string): Promise<string>;
  serviceAccountKubeconfig(options: ServiceAccountKubeconfigOptions): Promise<string>;
  restartApiserver(): Promise<void>;
  /** Compacts etcd up to its current revision; watches older than that then answer 410 Gone. */
  compactEtcd(): Promise<number>;
  stop(): Promise<void>;
}

export interface ControlPlanePids {
  etcd: number;
  apiserver: number;
  controllerManager?: number;
  scheduler?: number;
}

const SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local";

const handedOut = new Set<number>();

/**
 * Where freePort() draws: from 20000 up to the first port of the kernel's ephemeral range (this network
 * namespace's), as [first, end).
 */
export async function childPortRange(): Promise<{ first: number; end: number }> {
  const first = 20000;
  const end = Number((await readFile("/proc/sys/net/ipv4/ip_local_port_range", "utf8")).trim().split(/\s+/)[0]);
  if (!(end > first + 1000))
    throw new Error(`net.ipv4.ip_local_port_range starts at ${end}: the local cluster needs ports ${first}-${first + 1000} outside it`);
  return { first, end };
}

/**
 * A port on 127.0.0.1 for a child process to bind, free when drawn. It lies below the kernel's
 * ephemeral range: a port from listen(0) lies inside it, where any test's outgoing connection may
 * take it as a source port before the child binds it (etcd then failed in CI: "bind: address
 * already in use"). Drawn at random and never twice in a process, so that concurrent test files
 * do not meet either.
 */
export async function freePort(): Promise<number> {
  const { first, end } = await childPortRange();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = first + Math.floor(Math.random() * (end - first));
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port on 127.0.0.1 in ${first}-${end - 1} after 100 draws`);
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.on("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A kubeconfig user that authenticates with a client certificate (embedded: the file stands alone). */
export function clientCertificateUser(pair: KeyPair): Record<string, string> {
  return {
    "client-certificate-data": readFileSync(pair.cert).toString("base64"),
    "client-key-data": readFileSync(pair.key).toString("base64"),
  };
}

export function kubeconfigJson(server: string, caPem: string, user: Record<string, string>): string {
  // JSON is YAML: kubectl and our loader read it, and it needs no serializer.
  return `${JSON.stringify(
    {
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        {
          name: "local",
          cluster: { server, "certificate-authority-data": Buffer.from(caPem).toString("base64") },
        },
      ],
      users: [{ name: "user", user }],
      contexts: [{ name: "local", context: { cluster: "local", user: "user" } }],
      "current-context": "local",
    },
    null,
    2,
  )}\n`;
}

/** Where the apiserver listens, and the address it advertises as the `kubernetes` Service's endpoint. */
interface Listen {
  bind: string;
  port: number;
  advertise: string;
}

/** The first address of a /24 such as "198.19.3.0/24": the `kubernetes` Service's cluster IP. */
export function serviceIP(serviceNetwork: string): string {
  const match = /^(\d+\.\d+\.\d+)\.0\/24$/.exec(serviceNetwork);
  if (!match) throw new Error(`service network ${serviceNetwork}: expected an IPv4 /24 such as 198.19.3.0/24`);
  return `${match[1]}.1`;
}

async function listenAt(options: ControlPlaneOptions): Promise<Listen> {
  if (options.kubelets) {
    const { address } = options.kubelets;
    return { bind: address, port: 443, advertise: address };
  }
  const bind = options.extraIPs?.length ? "0.0.0.0" : "127.0.0.1";
  return { bind, port: await freePort(), advertise: "127.0.0.1" };
}

function apiserverArgs(
  pki: Pki,
  etcdPort: number,
  listen: Listen,
  options: ControlPlaneOptions,
  dir: string,
  auditLogPath?: string,
): string[] {
  const args = [
    `--etcd-servers=http://127.0.0.1:${etcdPort}`,
    `--bind-address=${listen.bind}`,
    `--secure-port=${listen.port}`,
    `--advertise-address=${listen.advertise}`,
    `--cert-dir=${path.join(dir, "apiserver-certs")}`,
    `--tls-cert-file=${pki.servingCert}`,
    `--tls-private-key-file=${pki.servingKey}`,
    `--client-ca-file=${pki.caCert}`,
    "--authorization-mode=Node,RBAC",
    `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
    `--api-audiences=${SERVICE_ACCOUNT_ISSUER}`,
    `--service-account-key-file=${pki.serviceAccountPub}`,
    `--service-account-signing-key-file=${pki.serviceAccountKey}`,
    `--service-cluster-ip-range=${options.kubelets?.serviceNetwork ?? options.serviceCIDR ?? "10.96.0.0/24"}`,
    "--allow-privileged=true",
    // The aggregation layer (APIServices such as metrics-server's v1beta1.metrics.k8s.io), as kubeadm sets it up:
    // the apiserver proxies with the front-proxy client certificate and names the user in these headers.
    `--requestheader-client-ca-file=${pki.frontProxyCaCert}`,
    `--requestheader-allowed-names=${FRONT_PROXY_CLIENT}`,
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    `--proxy-client-cert-file=${pki.frontProxyClientCert}`,
    `--proxy-client-key-file=${pki.frontProxyClientKey}`,
  ];
  // Without kubelets no pod ever runs, and without kube-controller-manager no ServiceAccount exists for
  // the admission plugin to find: tests that write Pods as plain objects get them admitted as written.
  if (!options.kubelets) args.push("--disable-admission-plugins=ServiceAccount");
  if (options.nodeRestriction ?? options.kubelets !== undefined) args.push("--enable-admission-plugins=NodeRestriction");
  if (auditLogPath) {
    args.push(
      `--audit-policy-file=${path.join(dir, "audit-policy.json")}`,
      `--audit-log-path=${auditLogPath}`,
      "--audit-log-mode=blocking",
    );
  }
  return args;
}

/** The apiserver's client certificate towards kubelets (logs, exec), and how it finds them. */
async function kubeletClientArgs(pki: Pki, options: KubeletsOptions): Promise<string[]> {
  const subject = "/O=system:masters/CN=kube-apiserver";
  const client = await issueClientCertificate(pki, "apiserver-kubelet-client", subject);
  const args = [
    `--kubelet-client-certificate=${client.cert}`,
    `--kubelet-client-key=${client.key}`,
    // Nodes here have no DNS names; their InternalIP (kubelet's --node-ip) is where kubelet listens.
    "--kubelet-preferred-address-types=InternalIP,Hostname",
  ];
  if (options.verifyServingCertificates) args.push(`--kubelet-certificate-authority=${pki.caCert}`);
  // An APIService's backend is reached at its endpoints' pod (or node) IPs, which the host routes to: no
  // kube-proxy runs on the host for the Service's cluster IP.
  args.push("--enable-aggregator-routing=true");
  return args;
}

/**
 * kube-controller-manager as a cluster needs it. Every default controller runs (Deployments,
 * DaemonSets, garbage collection, node lifecycle, ServiceAccounts and their tokens, the
 * kube-root-ca.crt ConfigMap) except the CSR approver: every approval here is explicit (the admin's,
 * or a controller's under test), while signing approved CSRs with the cluster CA is on.
 */
function controllerManagerArgs(pki: Pki, options: ControllerManagerOptions): string[] {
  const args = [
    "--controllers=*,-certificatesigningrequest-approving-controller",
    `--cluster-signing-cert-file=${pki.caCert}`,
    `--cluster-signing-key-file=${pki.caKey}`,
    `--root-ca-file=${pki.caCert}`,
    `--service-account-private-key-file=${pki.serviceAccountKey}`,
    "--use-service-account-credentials=true",
  ];
  if (options.nodeMonitorGracePeriodSeconds !== undefined)
    args.push(`--node-monitor-grace-period=${options.nodeMonitorGracePeriodSeconds}s`);
  return args;
}

function controllerManagerOptions(options: ControlPlaneOptions): ControllerManagerOptions {
  return typeof options.controllerManager === "object" ? options.controllerManager : {};
}

/** What kube-controller-manager and kube-scheduler share: one identity, health on a loopback port. */
function componentArgs(kubeconfig: string, port: number): string[] {
  return [
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    "--bind-address=127.0.0.1",
    `--secure-port=${port}`,
    "--leader-elect=false",
  ];
}

/** GET https://127.0.0.1:<port>/healthz of a component serving a self-signed certificate. */
function healthz(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = https.get({ host: "127.0.0.1", port, path: "/healthz", rejectUnauthorized: false }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
  });
}

export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  if (options.kubelets && !options.controllerManager)
    throw new Error("a control plane for kubelets needs the controller manager (pods need ServiceAccounts)");
  const binaries = await ensureBinaries();
  const dir = options.dir ?? mkdtempSync(path.join(os.tmpdir(), "local-ccm-controlplane-"));
  mkdirSync(dir, { recursive: true });
  const detached = options.detached ?? false;
  const services: Service[] = [];
  const forget = detached
    ? () => {}
    : onExit(() => {
        for (const s of services) s.child.kill("SIGKILL");
        if (!options.dir) rmSync(dir, { recursive: true, force: true });
      });

  try {
    const listen = await listenAt(options);
    // Pods reach the apiserver at the cluster IP: the certificate names it too.
    const kubeletSans = options.kubelets ? [listen.bind, serviceIP(options.kubelets.serviceNetwork)] : [];
    const pki = await createPki(dir, [...(options.extraIPs ?? []), ...kubeletSans]);
    const [etcdPort, etcdPeerPort] = [await freePort(), await freePort()];
    const etcdUrl = `http://127.0.0.1:${etcdPort}`;
    const etcd = startService(
      "etcd",
      binaries.etcd,
      [
        "--name=local-ccm-test",
        `--data-dir=${path.join(dir, "etcd")}`,
        `--listen-client-urls=${etcdUrl}`,
        `--advertise-client-urls=${etcdUrl}`,
        `--listen-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
        `--initial-cluster=local-ccm-test=http://127.0.0.1:${etcdPeerPort}`,
        "--unsafe-no-fsync",
        "--log-level=warn",
      ],
      { dir, detached },
    );
    services.push(etcd);
    await waitUntil(etcd, "healthy", async () => {
      const res = await fetch(`${etcdUrl}/health`);
      return res.ok && ((await res.json()) as { health: string }).health === "true";
    });

    const auditLogPath = options.audit ? path.join(dir, "audit.log") : undefined;
    if (auditLogPath) {
      const policy = {
        apiVersion: "audit.k8s.io/v1",
        kind: "Policy",
        omitStages: ["RequestReceived"],
        rules: [{ level: "Metadata" }],
      };
      await writeFile(path.join(dir, "audit-policy.json"), JSON.stringify(policy));
    }
    const server = `https://${listen.bind === "0.0.0.0" ? "127.0.0.1" : listen.bind}:${listen.port}`;
    const caPem = await readFile(pki.caCert, "utf8");
    const kubeconfigPath = path.join(dir, "kubeconfig");
    await writeFile(
      kubeconfigPath,
      kubeconfigJson(server, caPem, clientCertificateUser({ cert: pki.adminCert, key: pki.adminKey })),
    );
    const admin = new KubeClient(await loadClientConfig({ kubeconfig: kubeconfigPath }), {
      component: "test-admin",
      maxRetries: 0,
    });

    const args = apiserverArgs(pki, etcdPort, listen, options, dir, auditLogPath);
    if (options.kubelets) args.push(...(await kubeletClientArgs(pki, options.kubelets)));
    const startApiserver = async (): Promise<Service> => {
      const apiserver = startService("kube-apiserver", binaries.kubeApiserver, args, { dir, detached });
      await waitUntil(
        apiserver,
        "ready",
        async () => (await admin.requestText({ method: "GET", path: "/readyz" })) === "ok",
      );
      return apiserver;
    };
    let apiserver = await startApiserver();
    services.push(apiserver);
    const component = async (name: string, binary: string, subject: string, args: string[]) => {
      const cert = await issueClientCertificate(pki, name, subject);
      const kubeconfig = path.join(dir, `${name}.kubeconfig`);
      await writeFile(kubeconfig, kubeconfigJson(server, caPem, clientCertificateUser(cert)));
      const port = await freePort();
      const service = startService(name, binary, [...componentArgs(kubeconfig, port), ...args], { dir, detached });
      services.push(service);
      await waitUntil(service, "healthy", () => healthz(port));
      return service;
    };
    const controllerManager = options.controllerManager
      ? await component(
          "kube-controller-manager",
          binaries.kubeControllerManager,
          "/CN=system:kube-controller-manager",
          controllerManagerArgs(pki, controllerManagerOptions(options)),
        )
      : undefined;
    const scheduler = options.scheduler
      ? await component("kube-scheduler", binaries.kubeScheduler, "/CN=system:kube-scheduler", [])
      : undefined;

    const plane: ControlPlane = {
      dir,
      server,
      kubeconfigPath,
      caPath: pki.caCert,
      certificateAuthority: { dir: pki.dir, caCert: pki.caCert, caKey: pki.caKey },
      binaries,
      admin,
      auditLogPath,
      pids: () => ({
        etcd: etcd.child.pid as number,
        apiserver: apiserver.child.pid as number,
        ...(controllerManager && { controllerManager: controllerManager.child.pid as number }),
        ...(scheduler && { scheduler: scheduler.child.pid as number }),
      }),
      kubectl: (kubectlArgs, input) =>
        run(binaries.kubectl, [`--kubeconfig=${kubeconfigPath}`, ...kubectlArgs], { input }),
      serverAt: (ip) => `https://${ip.includes(":") ? `[${ip}]` : ip}:${listen.port}`,
      serviceAccountKubeconfig: (saOptions) => serviceAccountKubeconfig(admin, dir, server, caPem, saOptions),
      async restartApiserver() {
        admin.close();
        await stopService(apiserver);
        services.splice(services.indexOf(apiserver), 1);
        apiserver = await startApiserver();
        services.push(apiserver);
      },
      compactEtcd: () => compactEtcd(etcdUrl),
      async stop() {
        admin.close();
        for (const service of [...services].reverse()) await stopService(service);
        forget();
        if (!options.dir) rmSync(dir, { recursive: true, force: true });
      },
    };
    return plane;
  } catch (err) {
    for (const service of services) service.child.kill("SIGKILL");
    forget();
    if (!options.dir) rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

let minted = 0;

async function serviceAccountKubeconfig(
  admin: KubeClient,
  dir: string,
  defaultServer: string,
  caPem: string,
  options: ServiceAccountKubeconfigOptions,
): Promise<string> {
  const { namespace, name } = options;
  const base = `/api/v1/namespaces/${namespace}/serviceaccounts`;
  await admin.request({ method: "POST", path: base, body: { metadata: { name } } }).catch((err) => {
    if (!isApiError(err, "AlreadyExists")) throw err;
  });
  const request = await admin.request<{ status: { token: string } }>({
    method: "POST",
    path: `${base}/${name}/token`,
    body: {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: {
        audiences: [SERVICE_ACCOUNT_ISSUER],
        expirationSeconds: options.expirationSeconds ?? 3600,
        boundObjectRef: options.boundPod ? { apiVersion: "v1", kind: "Pod", ...options.boundPod } : undefined,
      },
    },
  });
  // Each call gets its own file: one account may be minted for several servers (veth addresses).
  const file = path.join(dir, `sa-${namespace}-${name}-${++minted}`);
  let user: Record<string, string> = { token: request.status.token };
  if (options.tokenFile) {
    await writeFile(`${file}.token`, request.status.token);
    user = { tokenFile: `${file}.token` };
  }
  await writeFile(`${file}.kubeconfig`, kubeconfigJson(options.server ?? defaultServer, caPem, user));
  return `${file}.kubeconfig`;
}

/** Compaction through etcd's JSON gateway: read the current revision, compact everything before it. */
async function compactEtcd(etcdUrl: string): Promise<number> {
  const post = async (rpc: string, body: unknown) => {
    const res = await fetch(`${etcdUrl}/v3/kv/${rpc}`, { method: "POST", body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`etcd ${rpc}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<{ header: { revision: string } }>;
  };
  const { header } = await post("range", { key: Buffer.from("/").toString("base64"), limit: 1 });
  const revision = Number(header.revision);
  await post("compaction", { revision, physical: true });
  return revision;
}
