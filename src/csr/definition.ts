// The kubelet-serving CSR approver as node-lifecycle-controller hosts it (manager/registry.ts): its flags,
// metrics, RBAC, the watches it reads (CSRs of its signer, Nodes, and the cluster's own addresses) and how it is
// created from the program's shared parts.
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import { EACH } from "../kube/fields.ts";
import { NODE_RESOURCE, Resource } from "../kube/resource.ts";
import { watch } from "../kube/sharedinformers.ts";
import { defineController } from "../controller/definition.ts";
import {
  API_SERVER_SLICES,
  ENDPOINT_SLICE_FIELDS,
  KUBERNETES_SERVICE,
  KUBERNETES_SERVICE_FIELDS,
  SERVICE_CIDR_FIELDS,
  SERVICE_CIDR_RESOURCE,
  type ServiceCidr,
} from "./cluster.ts";
import { CSR_RESOURCE, CsrController, csrTransform, KUBELET_SERVING_SELECTOR } from "./controller.ts";
import { KUBELET_SERVING_SIGNER } from "./decide.ts";
import { csrConfig, csrFlagTable } from "./flags.ts";
import { createCsrApproverMetrics } from "./metrics.ts";

const WATCHES = {
  csrs: watch<CertificateSigningRequest>({
    resource: CSR_RESOURCE,
    fieldSelector: KUBELET_SERVING_SELECTOR,
    keep: csrTransform,
  }),
  // A Node's names and IPs (nodes.ts), and whether it is initialised (its taints' keys).
  nodes: watch<Node>({
    resource: NODE_RESOURCE,
    keep: [
      ["spec", "taints", EACH, "key"],
      ["status", "addresses", EACH, "type"],
      ["status", "addresses", EACH, "address"],
    ],
  }),
  serviceCidrs: watch<ServiceCidr>({ resource: SERVICE_CIDR_RESOURCE, keep: SERVICE_CIDR_FIELDS }),
  services: watch<Service>({ ...KUBERNETES_SERVICE, keep: KUBERNETES_SERVICE_FIELDS }),
  endpointSlices: watch<EndpointSlice>({ ...API_SERVER_SLICES, keep: ENDPOINT_SLICE_FIELDS }),
};

export const kubeletServingCsr = defineController({
  name: "kubelet-serving-csr",
  // Approving certificates is a security decision the operator opts into, and a cluster without
  // serverTLSBootstrap kubelets has nothing for it to do.
  enabledByDefault: false,
  helmEnabled: ["csrApproval.enabled"],
  summary: "Approves kubelet serving certificates whose names and addresses are the Node's own, and denies others.",
  flags: csrFlagTable,
  dryRun: '"would approve", "would deny"',
  parse: csrConfig,
  metricsSubsystem: "csr_",
  createMetrics: createCsrApproverMetrics,
  rbac: {
    // The apiserver's CertificateApproval admission checks "approve" on signers/<signerName> for every approval
    // and denial. Its Events, about cluster-scoped CSRs, go to "default".
    cluster: [
      { apiGroups: [""], resources: ["nodes"], verbs: ["list", "watch"] },
      { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests"], verbs: ["list", "watch"] },
      { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests/approval"], verbs: ["update"] },
      {
        apiGroups: ["certificates.k8s.io"],
        resources: ["signers"],
        resourceNames: [KUBELET_SERVING_SIGNER],
        verbs: ["approve"],
      },
      { apiGroups: ["networking.k8s.io"], resources: ["servicecidrs"], verbs: ["list", "watch"] },
    ],
    // The kubernetes Service only (its watch's field selector names it, which RBAC matches against
    // resourceNames), and the EndpointSlices of "default" (selected by a label, which RBAC cannot name).
    namespaced: {
      default: [
        { apiGroups: [""], resources: ["services"], resourceNames: ["kubernetes"], verbs: ["list", "watch"] },
        { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
      ],
    },
  },
  // The same whatever its config: the watches name no rule-dependent field.
  watches: () => WATCHES,
  create(context, config) {
    const { csrs, nodes, serviceCidrs, services, endpointSlices } = context.caches;
    const approver = new CsrController({
      config,
      dryRun: context.dryRun,
      cache: csrs,
      cluster: { serviceCidrs, services, endpointSlices },
      csrs: new Resource<CertificateSigningRequest>(context.client, CSR_RESOURCE),
      isLeader: context.isLeader,
      events: context.events,
      log: context.log,
      metrics: context.metrics,
    });
    csrs.addHandlers(approver.csrHandlers);
    nodes.addHandlers(approver.nodeHandlers);
    for (const cache of [serviceCidrs, services, endpointSlices]) cache.addHandlers(approver.clusterHandlers);
    return approver;
  },
});
