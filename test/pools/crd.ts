// The LoadBalancerIPPool CRD as the chart ships it (charts/local-ccm/crds/), installed into a test control plane.
import path from "node:path";
import type { ControlPlane } from "../../localcluster/controlplane.ts";
import { CHART_DIR } from "../../localcluster/chart.ts";

export const POOL_CRD_FILE = path.join(CHART_DIR, "crds", "loadbalancerippools.yaml");

/** Applies the chart's CRD and waits until the apiserver serves it. */
export async function installPoolCrd(plane: ControlPlane): Promise<void> {
  await plane.kubectl(["apply", "-f", POOL_CRD_FILE]);
  const crd = "crd/loadbalancerippools.local-ccm.io";
  await plane.kubectl(["wait", "--for=condition=Established", "--timeout=120s", crd]);
}
