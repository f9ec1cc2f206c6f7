// Certificates for the test control plane, made with the openssl CLI: a CA (its key stays beside
// it: kube-controller-manager signs CSRs with it, and the cluster issues kubelet certificates), the
// apiserver's serving certificate, the admin client certificate and the service-account signing key
// pair; client certificates for other components on demand (issueClientCertificate). For the
// aggregation layer, as kubeadm makes it: a front-proxy CA of its own (extension apiservers trust
// what it signs to name the user in request headers, so it must not be the cluster CA) and the
// apiserver's front-proxy-client certificate.
// EC P-256 keys throughout: generated in milliseconds, accepted everywhere we need them.
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { run } from "./exec.ts";

/** The CA's certificate and key, and the folder where certificates it issues are written. */
export interface CertificateAuthority {
  dir: string;
  caCert: string;
  caKey: string;
}

export interface Pki extends CertificateAuthority {
  servingCert: string;
  servingKey: string;
  adminCert: string;
  adminKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
  frontProxyCaCert: string;
  frontProxyClientCert: string;
  frontProxyClientKey: string;
}

export interface KeyPair {
  cert: string;
  key: string;
}

// An empty config, so that `req -x509` adds only the extensions we ask for (the default config
// would mark every certificate as a CA).
const MINIMAL_CONFIG = "[req]\ndistinguished_name = dn\n[dn]\n";

async function certificate(
  dir: string,
  name: string,
  subject: string,
  extensions: string[],
  signer?: { cert: string; key: string },
) {
  const cert = path.join(dir, `${name}.crt`);
  const key = path.join(dir, `${name}.key`);
  const args = [
    "req",
    "-x509",
    "-config",
    path.join(dir, "openssl.cnf"),
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
  ];
  args.push("-nodes", "-keyout", key, "-out", cert, "-days", "3650", "-subj", subject);
  if (signer) args.push("-CA", signer.cert, "-CAkey", signer.key);
  for (const ext of extensions) args.push("-addext", ext);
  await run("openssl", args);
  return { cert, key };
}

/** The apiserver's name towards extension apiservers (--requestheader-allowed-names), kubeadm's. */
export const FRONT_PROXY_CLIENT = "front-proxy-client";

const leaf = (usage: string) => [
  "basicConstraints=critical,CA:FALSE",
  "keyUsage=critical,digitalSignature",
  `extendedKeyUsage=${usage}`,
];

/**
 * A client certificate from the CA, as `<name>.crt`/`<name>.key` beside it. Kubernetes reads
 * the user from the CN and the groups from the O entries (e.g. "/O=system:nodes/CN=system:node:a").
 */
export function issueClientCertificate(ca: CertificateAuthority, name: string, subject: string): Promise<KeyPair> {
  return certificate(ca.dir, name, subject, leaf("clientAuth"), { cert: ca.caCert, key: ca.caKey });
}

const authority = (dir: string, name: string, subject: string) =>
  certificate(dir, name, subject, ["basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign"]);

/** A fresh CA in `dir` as ca.crt/ca.key (a test registry's: registry.ts). */
export async function createAuthority(dir: string, subject: string): Promise<CertificateAuthority> {
  await writeFile(path.join(dir, "openssl.cnf"), MINIMAL_CONFIG);
  const ca = await authority(dir, "ca", subject);
  return { dir, caCert: ca.cert, caKey: ca.key };
}

/** A serving certificate from the CA for `names` (subjectAltName entries: "IP:198.19.128.1", "DNS:localhost"). */
export function issueServingCertificate(
  ca: CertificateAuthority,
  name: string,
  subject: string,
  names: string[],
): Promise<KeyPair> {
  const extensions = [...leaf("serverAuth"), `subjectAltName=${names.join(",")}`];
  return certificate(ca.dir, name, subject, extensions, { cert: ca.caCert, key: ca.caKey });
}

/** Writes a fresh PKI into `dir`. `sans` are added to the serving certificate (e.g. veth addresses). */
export async function createPki(dir: string, sans: string[]): Promise<Pki> {
  const cluster = await createAuthority(dir, "/CN=local-ccm-test-ca");
  const names = [
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "IP:127.0.0.1",
    "IP:::1",
  ];
  for (const ip of sans) names.push(`IP:${ip}`);
  const serving = await issueServingCertificate(cluster, "apiserver", "/CN=kube-apiserver", names);
  const serviceAccountKey = path.join(dir, "sa.key");
  const serviceAccountPub = path.join(dir, "sa.pub");
  await run("openssl", [
    "genpkey",
    "-algorithm",
    "EC",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-out",
    serviceAccountKey,
  ]);
  await run("openssl", ["pkey", "-in", serviceAccountKey, "-pubout", "-out", serviceAccountPub]);
  const admin = await issueClientCertificate(cluster, "admin", "/O=system:masters/CN=admin");
  const frontProxyCa = await authority(dir, "front-proxy-ca", "/CN=front-proxy-ca");
  const frontProxyClient = await issueClientCertificate(
    { dir, caCert: frontProxyCa.cert, caKey: frontProxyCa.key },
    "front-proxy-client",
    `/CN=${FRONT_PROXY_CLIENT}`,
  );
  return {
    ...cluster,
    servingCert: serving.cert,
    servingKey: serving.key,
    adminCert: admin.cert,
    adminKey: admin.key,
    serviceAccountKey,
    serviceAccountPub,
    frontProxyCaCert: frontProxyCa.cert,
    frontProxyClientCert: frontProxyClient.cert,
    frontProxyClientKey: frontProxyClient.key,
  };
}
