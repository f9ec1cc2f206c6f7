// A node-address LoadBalancer through a 60 s kube-apiserver outage on the real local cluster (localcluster/: four
// kubelets, kube-proxy in iptables mode, kube-controller-manager, the chart as shipped): node-0 the control-plane
// node (kubeadm's exclusion label), the Service on node-1..3's ExternalIPs, agnhost netexec backends on two of them.
// The client host requests every ingress address once a second from before the API stops until 60 s after it is
// back, while an informer in this process records every ingress the Service had. Once the API is back,
// kube-controller-manager, its own view as stale, may mark the Nodes Ready=Unknown for a few seconds (when its node
// monitor runs before it sees the kubelets' renewals: not in every run, which the diagnostics say, from the Nodes'
// Ready transitions and the controller's log): the service controller takes that for no news (src/service/outage.ts),
// so no node leaves the ingress and kube-proxy keeps every address. A request may fail only while the Service had no
// ready endpoint (ready-endpoints.ts: kube-controller-manager marks the pods NotReady too, until kubelet corrects it).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Event, Service } from "kubernetes-types/core/v1.js";
import { NETEXEC_PORT, netexecBackends } from "../../localcluster/agnhost.ts";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import {
  CONTROLLER_APP,
  helmInstallArgs,
  initialised,
  listNodes,
  listPods,
  NAMESPACE,
} from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { Informer } from "../../src/kube/informer.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { eventSource } from "../../src/controller/definition.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import { serviceLoadBalancer } from "../../src/service/definition.ts";
import { sleep } from "../../src/time/backoff.ts";
import { addressesOf } from "./cluster-objects.ts";
import { sampleReadyEndpoints, startedWhileUnready, unready } from "./ready-endpoints.ts";

const WORKERS = ["node-1", "node-2", "node-3"];
const OUTAGE_MS = 60_000;
/** How long the client goes on after the API is back: kube-controller-manager's marks and their corrections. */
const AFTER_MS = 60_000;
/** Generous: the machine runs other tests too. */
const WAIT_MS = 120_000;

const SERVICE = {
  metadata: { name: "web", namespace: "default" },
  spec: {
    type: "LoadBalancer",
    loadBalancerClass: NODE_ADDRESS_CLASS,
    selector: { app: "netexec" },
    ports: [{ port: 80, targetPort: NETEXEC_PORT }],
  },
};

interface Request {
  ip: string;
  startedMs: number;
  error?: string;
}

describe("a node-address LoadBalancer through a 60 s kube-apiserver outage", () => {
  let cluster: Cluster;
  let serviceWatch: Informer<Service> | undefined;
  before(async () => {
    cluster = await startCluster({ nodes: 4 });
    await cluster.helm(helmInstallArgs());
    await waitFor(
      "every Node initialised by its agent, its public address its ExternalIP",
      async () =>
        (await listNodes(cluster)).filter(
          (node) =>
            initialised(node) &&
            addressesOf(node, "ExternalIP")[0] === cluster.node(node.metadata?.name ?? "").publicIP,
        ).length === cluster.nodes.length,
      WAIT_MS,
      500,
    );
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(netexecBackends(2)));
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=180s"]);
  });
  after(async () => {
    await serviceWatch?.stop();
    await cluster?.stop();
  });

  const get = (ip: string) =>
    cluster.client.exec("curl", ["--silent", "--show-error", "--fail", "--max-time", "5", `http://${ip}/hostname`]);

  test("the ingress never changes, and no request fails while the Service has a ready endpoint", async (t) => {
    const publicIPs = WORKERS.map((name) => cluster.node(name).publicIP).sort();
    const services = new Resource<Service>(cluster.admin, { ...SERVICE_RESOURCE, namespace: "default" });
    await services.create(SERVICE);
    const ingressOf = (service: Service) => (service.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ip ?? "");
    const service = await waitFor(
      "the Service on node-1..3's ExternalIPs",
      async () => {
        const service = await services.get("web");
        return JSON.stringify(ingressOf(service).sort()) === JSON.stringify(publicIPs) && service;
      },
      WAIT_MS,
      250,
    );
    for (const ip of publicIPs) await waitFor(`${ip} answering the client host`, () => get(ip), WAIT_MS, 250);

    // Every ingress the watch delivers (it resumes where it stopped, or relists, once the API is back).
    const ingresses: string[][] = [];
    serviceWatch = new Informer(services, { fieldSelector: "metadata.name=web" });
    serviceWatch.addHandlers({ onUpdate: (_, next) => ingresses.push(ingressOf(next)) });
    serviceWatch.start();
    await serviceWatch.waitForSync();

    const requests: Request[] = [];
    const sampling = sampleReadyEndpoints(cluster, "web");
    let on = true;
    const loop = (async () => {
      while (on) {
        const startedMs = Date.now();
        await Promise.all(
          publicIPs.map(async (ip) => {
            const error = await get(ip).then(
              () => undefined,
              (err: unknown) => (err as Error).message.split("\n")[0],
            );
            requests.push({ ip, startedMs, ...(error !== undefined && { error }) });
          }),
        );
        await sleep(Math.max(0, 1000 - (Date.now() - startedMs)));
      }
    })();

    const apiserver = cluster.controlPlane.pids().apiserver;
    const stoppedAt = Date.now();
    try {
      process.kill(apiserver, "SIGSTOP");
      try {
        await sleep(OUTAGE_MS); // the outage itself: what is measured is that nothing changes through it
      } finally {
        process.kill(apiserver, "SIGCONT");
      }
      await sleep(AFTER_MS); // after it: kube-controller-manager's marks come and go within this
    } finally {
      on = false;
      await loop;
    }
    const samples = await sampling.stop();
    const resumedAt = stoppedAt + OUTAGE_MS;

    const failed = requests.filter((request) => request.error !== undefined);
    const afterReturn = (atMs: number) => `${((atMs - resumedAt) / 1000).toFixed(1)} s after the API's return`;
    for (const { ip, startedMs, error } of failed) t.diagnostic(`${ip} failed ${afterReturn(startedMs)}: ${error}`);
    // A Node marked Unknown and corrected since has a Ready transition after the outage began (whole seconds).
    const transitions = (await listNodes(cluster)).flatMap((node) => {
      const ready = node.status?.conditions?.find((condition) => condition.type === "Ready");
      const atMs = Date.parse(ready?.lastTransitionTime ?? "");
      return atMs >= Math.floor(stoppedAt / 1000) * 1000 ? [`${node.metadata?.name} ${afterReturn(atMs)}`] : [];
    });
    t.diagnostic(`Ready transitions since the outage began: ${transitions.join(", ") || "none"}`);
    for (const pod of await listPods(cluster, CONTROLLER_APP)) {
      const log = await cluster.kubectl(["logs", "-n", NAMESPACE, pod.metadata?.name ?? ""]).catch(() => "");
      for (const line of log.split("\n").filter((line) => line.includes("Unknown"))) t.diagnostic(line);
    }
    const [firstUnready, lastUnready] = [unready(samples)[0], unready(samples).at(-1)];
    if (firstUnready && lastUnready)
      t.diagnostic(`no ready endpoint from ${afterReturn(firstUnready.atMs)} to ${afterReturn(lastUnready.atMs)}`);
    t.diagnostic(`${requests.length} requests, ${failed.length} failed`);
    // Rounds of three requests take a second or more on a loaded machine: at least one each 4 s.
    assert.ok(requests.length >= ((OUTAGE_MS + AFTER_MS) / 4000) * publicIPs.length, "too few requests");
    const whileReady = failed.filter(({ startedMs }) => !startedWhileUnready(samples, startedMs));
    assert.deepEqual(whileReady, [], "failed while endpoints were ready");
    const changed = ingresses.filter((ingress) => JSON.stringify([...ingress].sort()) !== JSON.stringify(publicIPs));
    assert.deepEqual(changed, [], "the ingress changed");
    // The controller wrote no new ingress either: it Events each (UpdatedLoadBalancer).
    const uid = service.metadata?.uid;
    const selector = encodeURIComponent(`involvedObject.uid=${uid},source=${eventSource(serviceLoadBalancer)}`);
    const events = await cluster.admin.request<{ items: Event[] }>({
      method: "GET",
      path: `/api/v1/namespaces/default/events?fieldSelector=${selector}`,
    });
    const reasons = events.items.map((event) => event.reason);
    assert.deepEqual(reasons.filter((reason) => reason === "UpdatedLoadBalancer"), [], "a new ingress was written");
  });
});
