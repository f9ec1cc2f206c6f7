// The chart's CRDs (charts/local-ccm/crds/), installed into a test control plane.
import path from "node:path";
import type { ControlPlane } from "../../localcluster/controlplane.ts";
import { CHART_DIR } from "../../localcluster/chart.ts";

export const POOL_CRD_FILE = path.join(CHART_DIR, "crds", "loadbalancerippools.yaml");
export const BGP_PEER_CRD_FILE = path.join(CHART_DIR, "crds", "bgppeers.yaml");

/** Applies a CRD file of the chart and waits until the apiserver serves it (`name`: plural.group). */
export async function installCrd(plane: ControlPlane, file: string, name: string): Promise<void> {
  await plane.kubectl(["apply", "-f", file]);
  await plane.kubectl(["wait", "--for=condition=Established", "--timeout=120s", `crd/${name}`]);
}

export const installPoolCrd = (plane: ControlPlane) =>
  installCrd(plane, POOL_CRD_FILE, "loadbalancerippools.local-ccm.io");
export const installBgpPeerCrd = (plane: ControlPlane) => installCrd(plane, BGP_PEER_CRD_FILE, "bgppeers.local-ccm.io");
