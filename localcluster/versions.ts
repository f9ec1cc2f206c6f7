// The one place where the upstream test binaries are pinned. Changing a version here rebuilds
// that component (the cache is keyed by it).

/** Newest patch of the newest Kubernetes minor on the Go module proxy; every Kubernetes binary and the pause image. */
export const KUBERNETES_VERSION = "v1.36.3";
/** etcd server, built in its own wrapper module so its dependencies cannot raise the apiserver's. */
export const ETCD_VERSION = "v3.6.16";
/** Helm v3, newest on the module proxy. */
export const HELM_VERSION = "v3.22.0";
/** metrics-server, newest on the module proxy: `kubectl top` on the local cluster (localcluster/metrics-server.ts). */
export const METRICS_SERVER_VERSION = "v0.9.0";
/** actionlint, newest on the module proxy: lints .github/workflows/ (test/ci/workflows.test.ts). */
export const ACTIONLINT_VERSION = "v1.7.12";
/** The OCI registry (distribution's `registry` command), newest on the module proxy: the release path's test pushes
 * the chart and the image to it and the local cluster pulls from it (localcluster/registry.ts). */
export const DISTRIBUTION_VERSION = "v3.1.2";
/** The agnhost image's tag: test/images/agnhost/VERSION of the pinned Kubernetes module (agnhost.ts checks it). */
export const AGNHOST_VERSION = "2.63.0";
/** CoreDNS as kubeadm of the pinned Kubernetes installs it (cmd/kubeadm/app/constants CoreDNSVersion): cluster DNS
 * on the local cluster (coredns.ts). */
export const COREDNS_VERSION = "v1.14.2";
/** MetalLB, the anchor the L2 announcement benchmark runs side by side with ours (metallb.ts; built on demand).
 * It requires github.com/metallb/frr-k8s v0.0.27, whose zip the module proxy refuses ("403 Forbidden … This module
 * version is not available", as every frr-k8s after v0.0.26; tried again on 2026-11-24): metallb.ts builds it
 * against v0.0.26 given the two names of v0.0.27's API that MetalLB's BGP-only frr-k8s package uses. */
export const METALLB_VERSION = "v0.16.2";
