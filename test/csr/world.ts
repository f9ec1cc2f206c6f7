// A world for the CSR approver's tests and benchmark: a real control plane with the shipped RBAC of the
// approver (the chart rendered with csrApproval.enabled), and node identities as kubelets have them: client
// certificates for system:node:<name> in system:nodes, signed by the cluster CA. Nodes ask for serving
// certificates with real openssl-made requests, through the API, as kubelets do.
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Event, Node, NodeAddress, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { helmTemplate } from "../../scripts/render-manifests.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { UNINITIALIZED_TAINT } from "../../src/kube/nodes.ts";
import { NODE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { KUBELET_SERVING_SIGNER } from "../../src/csr/decide.ts";
import { opensslCsr } from "../../src/csr/csr.fixture.ts";
import { CSR_RESOURCE } from "../../src/csr/controller.ts";
import {
  API_SERVER_SLICES,
  KUBERNETES_SERVICE,
  SERVICE_CIDR_RESOURCE,
  type ServiceCidr,
} from "../../src/csr/cluster.ts";
import {
  type ControlPlane,
  clientCertificateUser,
  kubeconfigJson,
  startControlPlane,
} from "../../localcluster/controlplane.ts";
import { issueClientCertificate } from "../../localcluster/pki.ts";
import { SERVICE_ACCOUNT } from "../lifecycle/world.ts";

/** deploy/nlc-rbac.yaml as the chart renders it with the approver on. */
export async function approverRbac(helm: string): Promise<string> {
  return helmTemplate(helm, ["--set", "csrApproval.enabled=true", "--show-only", "templates/nlc-rbac.yaml"]);
}

export interface CertificateRequest {
  /** openssl subjectAltName text, e.g. "DNS:n1,IP:198.18.0.1". */
  sans: string;
  /** openssl -subj text; default the node's own (O=system:nodes, CN=system:node:<name>). */
  subject?: string;
  usages?: string[];
  expirationSeconds?: number;
  signerName?: string;
}

export interface CsrWorld {
  plane: ControlPlane;
  /** A kubeconfig for the shipped service account. */
  kubeconfig: string;
  /** The approver's RBAC as applied. */
  rbac: string;
  nodes: Resource<Node>;
  csrs: Resource<CertificateSigningRequest>;
  events: Resource<Event>;
  serviceCidrs: Resource<ServiceCidr>;
  /** Creates a Node with these addresses (InternalIP for IPs, Hostname for names), optionally uninitialized. */
  addNode(name: string, addresses: string[], options?: { uninitialized?: boolean }): Promise<void>;
  /** The node `name` itself writes these into its own status.addresses, as its kubelet or agent may. */
  writeOwnAddresses(name: string, addresses: NodeAddress[]): Promise<void>;
  /** The kubernetes Service's first ClusterIP. */
  kubernetesClusterIP(): Promise<string>;
  /**
   * Lists `ip` as an API server's in an EndpointSlice of the kubernetes Service, as in a cluster with several
   * API servers, and returns the slice's name. The test control plane lists none of its own: it advertises
   * 127.0.0.1, which the apiserver's endpoint reconciler may not write into Endpoints or EndpointSlices.
   */
  addApiServerEndpoint(ip: string): Promise<string>;
  /** A client that is the node `name` (cached per name). */
  nodeClient(name: string): Promise<KubeClient>;
  /** Creates a CSR as `as` (a node name, or the admin) and returns its name. */
  requestCertificate(as: string | "admin", request: CertificateRequest): Promise<string>;
  stop(): Promise<void>;
}

let created = 0;

/** `controllerManager`: kube-controller-manager signs approved CSRs with the cluster CA. */
export async function startCsrWorld(options: { audit?: boolean; controllerManager?: boolean } = {}): Promise<CsrWorld> {
  const plane = await startControlPlane(options);
  try {
    const rbac = await approverRbac(plane.binaries.helm);
    await plane.kubectl(["apply", "-f", "-"], rbac);
    const kubeconfig = await plane.serviceAccountKubeconfig(SERVICE_ACCOUNT);
    // Promises, not clients: requests made at once as one node share one certificate and kubeconfig file.
    const clients = new Map<string, Promise<KubeClient>>();
    const nodes = new Resource<Node>(plane.admin, NODE_RESOURCE);
    const clientOf = (name: string) => {
      let client = clients.get(name);
      if (!client) {
        client = nodeClient(plane, name);
        clients.set(name, client);
      }
      return client;
    };
    return {
      plane,
      kubeconfig,
      rbac,
      nodes,
      csrs: new Resource(plane.admin, CSR_RESOURCE),
      events: new Resource<Event>(plane.admin, { group: "", version: "v1", plural: "events", namespace: "default" }),
      serviceCidrs: new Resource<ServiceCidr>(plane.admin, SERVICE_CIDR_RESOURCE),
      async addNode(name, addresses, { uninitialized = false } = {}) {
        const node = await nodes.create({
          metadata: { name },
          spec: { taints: uninitialized ? [{ key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" }] : [] },
        });
        const status = {
          addresses: addresses.map((address) => ({
            type: /^[0-9.]+$|:/.test(address) ? "InternalIP" : "Hostname",
            address,
          })),
        };
        // A patch: kube-controller-manager, when it runs, changes new Nodes meanwhile.
        await nodes.patch(node.metadata?.name as string, "merge", { status }, { subresource: "status" });
      },
      async writeOwnAddresses(name, addresses) {
        const own = new Resource<Node>(await clientOf(name), NODE_RESOURCE);
        await own.patch(name, "merge", { status: { addresses } }, { subresource: "status" });
      },
      async kubernetesClusterIP() {
        const service = await new Resource<Service>(plane.admin, KUBERNETES_SERVICE.resource).get("kubernetes");
        const [clusterIP] = service.spec?.clusterIPs ?? [];
        if (!clusterIP) throw new Error("the kubernetes Service has no ClusterIP");
        return clusterIP;
      },
      async addApiServerEndpoint(ip) {
        const name = `kubernetes-${ip.replace(/[.:]/g, "-")}`;
        await new Resource<EndpointSlice>(plane.admin, API_SERVER_SLICES.resource).create({
          metadata: {
            name,
            labels: { "kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "test" },
          },
          addressType: ip.includes(":") ? "IPv6" : "IPv4",
          endpoints: [{ addresses: [ip] }],
          ports: [{ name: "https", port: 443, protocol: "TCP" }],
        });
        return name;
      },
      nodeClient: clientOf,
      async requestCertificate(as, request) {
        return requestCertificate(as === "admin" ? plane.admin : await clientOf(as), as, request);
      },
      async stop() {
        for (const client of await Promise.allSettled(clients.values()))
          if (client.status === "fulfilled") client.value.close();
        await plane.stop();
      },
    };
  } catch (err) {
    await plane.stop();
    throw err;
  }
}

/** Creates a CSR with `client` (whose user is `as`) and returns its name. */
export async function requestCertificate(client: KubeClient, as: string, request: CertificateRequest): Promise<string> {
  const subject = request.subject ?? `/O=system:nodes/CN=system:node:${as}`;
  const pem = opensslCsr({ subject, sans: request.sans });
  const name = `csr-${as}-${++created}`;
  await new Resource<CertificateSigningRequest>(client, CSR_RESOURCE).create({
    metadata: { name },
    spec: {
      request: Buffer.from(pem).toString("base64"),
      signerName: request.signerName ?? KUBELET_SERVING_SIGNER,
      usages: request.usages ?? ["digital signature", "server auth"],
      expirationSeconds: request.expirationSeconds,
    },
  });
  return name;
}

/** A client that is the node `name`: a client certificate for system:node:<name> in system:nodes, as a kubelet's. */
export async function nodeClient(plane: ControlPlane, name: string): Promise<KubeClient> {
  const config = await loadClientConfig({ kubeconfig: await nodeKubeconfig(plane, name) });
  return new KubeClient(config, { component: `node ${name}`, maxRetries: 0 });
}

/** The node's client certificate from the cluster CA (the control plane's folder holds it). */
async function nodeKubeconfig(plane: ControlPlane, name: string): Promise<string> {
  const ca = { dir: plane.dir, caCert: plane.caPath, caKey: path.join(plane.dir, "ca.key") };
  const pair = await issueClientCertificate(ca, `node-${name}`, `/O=system:nodes/CN=system:node:${name}`);
  const file = path.join(plane.dir, `node-${name}.kubeconfig`);
  await writeFile(file, kubeconfigJson(plane.server, await readFile(plane.caPath, "utf8"), clientCertificateUser(pair)));
  return file;
}
