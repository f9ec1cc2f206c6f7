// `npm start`: the demo. Starts a local control plane, registers a Node the way kubelet
// --cloud-provider=external does, shows it, and stops everything again.
import { startControlPlane } from "../test/controlplane/controlplane.ts";
import { KUBERNETES_VERSION } from "../test/controlplane/versions.ts";

const plane = await startControlPlane();
try {
  console.log(`control plane up: kube-apiserver ${KUBERNETES_VERSION} at ${plane.server}\n`);
  await plane.admin.request({
    method: "POST",
    path: "/api/v1/nodes",
    body: {
      metadata: { name: "demo-node", annotations: { "alpha.kubernetes.io/provided-node-ip": "10.0.0.10" } },
      spec: {
        taints: [
          { key: "node.cloudprovider.kubernetes.io/uninitialized", value: "true", effect: "NoSchedule" },
        ],
      },
    },
  });
  console.log(await plane.kubectl(["get", "nodes", "-o", "wide"]));
  console.log(await plane.kubectl(["get", "node", "demo-node", "-o", 'jsonpath={.spec.taints}{"\\n"}']));
} finally {
  await plane.stop();
  console.log("control plane stopped; nothing left running");
}
