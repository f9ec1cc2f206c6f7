// LoadBalancer Services in node-address mode as users run them: `helm install` of charts/local-ccm (defaults: the
// service controller on, class-less Services not claimed) on four real kubelets with kube-proxy (localcluster/):
// node-0 the control-plane node (kubeadm's exclusion label, empty), node-1..3 workers, each Node's ExternalIP its
// public address (the agent). Every request comes from the client host, outside the nodes.
//
// In both proxy modes, every case: a Deployment of agnhost netexec (on node-1 and node-2) behind a Service answers on
// every ingress address, and `externalTrafficPolicy: Local` lists only the nodes with an endpoint, whose backend sees
// the client host's own address; the exclusion label (`true` excludes, `false` and absent keep),
// the autoscaler taint, a cordoned node (stays); another class untouched, class-less only once `helm upgrade` claims
// them; a reserved port and a port conflict refused with a Warning naming rule and value, status empty; a namespace
// editor (RBAC `edit`, its own token) asking for another Service's NodePort or a hostNetwork pod's port refused, the
// Warning naming the holder, the NodePort still answering on every node's address and the pod on its node's;
// deletion and a type change release status and finalizer; a controller restart writes nothing; a powered-off node
// leaves the ingress; nothing the controller asked for was refused. The cases of one mode share one cluster and run in
// order, each leaving the nodes as it found them (but the powered-off one).
//
// A change that must leave the ingress as it is cannot be awaited: it is made first, then one that must change the
// ingress (the controller reads both from one watch, in order), and the ingress awaited is the one both give.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Event, Service } from "kubernetes-types/core/v1.js";
import { AGNHOST_IMAGE } from "../../localcluster/agnhost.ts";
import { requestKey, tokenPod } from "../../localcluster/audit.ts";
import { CHART_DIR } from "../../localcluster/chart.ts";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { PROXY_MODES, type ProxyMode } from "../../localcluster/kube-proxy.ts";
import {
  CONTROLLER_APP,
  CONTROLLER_USER,
  helmInstallArgs,
  initialised,
  listNodes,
  listPods,
  NAMESPACE,
  podReady,
  RELEASE,
} from "../../localcluster/project.ts";
import { editorClient, namespaceEditor } from "../../localcluster/editor.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { AUTOSCALER_TAINT, EXCLUDE_LABEL } from "../../src/loadbalancer/nodes.ts";
import { LB_FINALIZER } from "../../src/loadbalancer/service.ts";
import { eventSource } from "../../src/controller/definition.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";
import { serviceLoadBalancer } from "../../src/service/definition.ts";
import { addressesOf, clusterAuditEvents, leaseHolder } from "./cluster-objects.ts";

const WORKERS = ["node-1", "node-2", "node-3"];
/** Where the backends run, one each; node-3 has none. */
const BACKEND_NODES = ["node-1", "node-2"];
const BACKEND_PORT = 8080;
/** A hostNetwork pod's port on node-1, which a namespace editor's Service asks for. */
const HOST_NETWORK_PORT = 18443;
/** Generous: a change reaches the ingress within a second or two here, but the machine runs other tests too. */
const WAIT_MS = 90_000;

const BACKENDS = {
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name: "netexec", namespace: "default" },
  spec: {
    replicas: BACKEND_NODES.length,
    selector: { matchLabels: { app: "netexec" } },
    template: {
      metadata: { labels: { app: "netexec" } },
      spec: {
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: "kubernetes.io/hostname", operator: "In", values: BACKEND_NODES }] },
              ],
            },
          },
        },
        topologySpreadConstraints: [
          {
            maxSkew: 1,
            topologyKey: "kubernetes.io/hostname",
            whenUnsatisfiable: "DoNotSchedule",
            labelSelector: { matchLabels: { app: "netexec" } },
          },
        ],
        // As upstream's e2e tests run it: the image's entrypoint is /agnhost.
        containers: [{ name: "netexec", image: AGNHOST_IMAGE, args: ["netexec", `--http-port=${BACKEND_PORT}`] }],
      },
    },
  },
};

interface LoadBalancerSpec {
  port: number;
  /** Default: ours. null: none. */
  lbClass?: string | null;
  local?: boolean;
}

/** A LoadBalancer Service of the backends, in "default". */
function loadBalancer(name: string, { port, lbClass = NODE_ADDRESS_CLASS, local = false }: LoadBalancerSpec) {
  return {
    metadata: { name },
    spec: {
      type: "LoadBalancer",
      ...(lbClass === null ? {} : { loadBalancerClass: lbClass }),
      externalTrafficPolicy: local ? "Local" : "Cluster",
      selector: { app: "netexec" },
      ports: [{ port, targetPort: BACKEND_PORT }],
    },
  };
}

const ingressIps = (service: Service) => (service.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ip ?? "");
const hasFinalizer = (service: Service) => (service.metadata?.finalizers ?? []).includes(LB_FINALIZER);

/** The cluster with the chart installed, every Node initialised with its ExternalIP, and the backends running. */
async function startWorld(proxyMode: ProxyMode): Promise<Cluster> {
  const cluster = await startCluster({ nodes: 4, audit: true, proxyMode });
  try {
    await cluster.helm(helmInstallArgs());
    await waitFor(
      "every Node initialised by its agent, its public address its ExternalIP",
      async () => {
        const nodes = await listNodes(cluster);
        const done = nodes.filter((node) => {
          const publicIP = cluster.node(node.metadata?.name ?? "").publicIP;
          return initialised(node) && addressesOf(node, "ExternalIP")[0] === publicIP;
        });
        return done.length === cluster.nodes.length;
      },
      120_000,
      500,
    );
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(BACKENDS));
    await cluster.kubectl(["rollout", "status", "deployment/netexec", "--timeout=180s"]);
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

function loadBalancerSuite(mode: ProxyMode): void {
  describe(`node-address LoadBalancers, kube-proxy in ${mode} mode`, () => {
    let cluster: Cluster;
    before(async () => {
      cluster = await startWorld(mode);
    });
    after(async () => {
      await cluster?.stop();
    });

    const servicePath = (name = "") => `/api/v1/namespaces/default/services${name && `/${name}`}`;
    const create = (name: string, spec: LoadBalancerSpec) =>
      cluster.admin.request<Service>({ method: "POST", path: servicePath(), body: loadBalancer(name, spec) });
    const getService = (name: string) => cluster.admin.request<Service>({ method: "GET", path: servicePath(name) });
    const publicIPs = (nodes: string[]) => nodes.map((name) => cluster.node(name).publicIP).sort();

    /** Until the Service's ingress holds exactly these nodes' public addresses. */
    const waitForIngress = (name: string, nodes: string[], timeoutMs = WAIT_MS) =>
      waitFor(
        `${name}'s ingress to be ${nodes.join(", ")}`,
        async () => {
          const service = await getService(name);
          return JSON.stringify(ingressIps(service).sort()) === JSON.stringify(publicIPs(nodes)) && service;
        },
        timeoutMs,
        250,
      );

    /**
     * The controller's Events about the Service, by its uid (a deleted Service's Events outlive it). Others report
     * about Services too (kube-apiserver's ClusterIP repair, when it sees a Service before its IPAddress).
     */
    const eventsAbout = async (service: Service, client = cluster.admin) => {
      const selector = encodeURIComponent(`involvedObject.uid=${service.metadata?.uid},source=${eventSource(serviceLoadBalancer)}`);
      const path = `/api/v1/namespaces/${service.metadata?.namespace}/events?fieldSelector=${selector}`;
      return (await client.request<{ items: Event[] }>({ method: "GET", path })).items;
    };
    /** Until the Events about the Service are exactly these "type reason" (recorded a moment after the writes). */
    const waitForReasons = (service: Service, wanted: string[]) =>
      waitFor(
        `Events ${wanted.join(", ")} about ${service.metadata?.name}`,
        async () => {
          const reasons = (await eventsAbout(service)).map((event) => `${event.type} ${event.reason}`).sort();
          return JSON.stringify(reasons) === JSON.stringify([...wanted].sort());
        },
        WAIT_MS,
        250,
      );

    /** An HTTP GET from the client host: the body of a 2xx answer (curl fails on anything else). */
    const getFromClient = (ip: string, port: number, path: string) =>
      cluster.client.exec("curl", ["--silent", "--show-error", "--fail", "--max-time", "5",
        `http://${ip}:${port}${path}`]);

    /** Until every replica of the controller's Deployment runs its current template, and no other is left. */
    async function controllerRolledOut(): Promise<void> {
      await cluster.kubectl(["rollout", "status", `deployment/${CONTROLLER_APP}`, "--namespace", NAMESPACE,
        "--timeout=180s"]);
      // The rollout counts a deleted pod gone at once; its process runs until its containers stop.
      await waitFor("the controller's old replicas to be gone", async () =>
        (await listPods(cluster, CONTROLLER_APP)).every((pod) => !pod.metadata?.deletionTimestamp), 120_000, 250);
    }

    /** The backends' pod names → their nodes. */
    const backendPods = async () => {
      const list = JSON.parse(await cluster.kubectl(["get", "pods", "-l", "app=netexec", "-o", "json"])) as {
        items: { metadata: { name: string }; spec: { nodeName: string } }[];
      };
      return new Map(list.items.map((pod) => [pod.metadata.name, pod.spec.nodeName]));
    };

    /** Until each node's public address answers /hostname from the client host: the answering pod's node, each. */
    async function answeringNodes(nodes: string[], port: number): Promise<Map<string, string>> {
      const pods = await backendPods();
      const answers = new Map<string, string>();
      for (const node of nodes) {
        const ip = cluster.node(node).publicIP;
        // kube-proxy programs the ingress address a moment after the status is written.
        const pod = await waitFor(`${ip}:${port} answering the client host`, () => getFromClient(ip, port, "/hostname"),
          WAIT_MS, 250);
        assert.ok(pods.has(pod), `${ip}:${port} answered ${pod}, not one of ${[...pods.keys()].join(", ")}`);
        answers.set(node, pods.get(pod) as string);
      }
      return answers;
    }

    test("a Service of the class answers on every ingress address, every eligible node's public address", async () => {
      await create("web", { port: 80 });
      // node-0 carries kubeadm's exclusion label, empty: not a boolean, so excluded (as cloud-provider reads it).
      // The workers carry none: absent keeps.
      const web = await waitForIngress("web", WORKERS);
      assert.ok(hasFinalizer(web), "the standard finalizer");
      assert.deepEqual(web.status?.loadBalancer?.ingress?.map((entry) => entry.ipMode), ["VIP", "VIP", "VIP"]);
      const answers = await answeringNodes(WORKERS, 80);
      // Cluster: node-3, without a backend, forwards to one on another node.
      assert.ok(BACKEND_NODES.includes(answers.get("node-3") as string));
      await waitForReasons(web, ["Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"]);
    });

    test("Local: only the nodes with an endpoint, and the backend sees the client host's own address", async () => {
      await create("web-local", { port: 81, local: true });
      await waitForIngress("web-local", BACKEND_NODES);
      // Each node forwards to its own endpoint only.
      const answers = await answeringNodes(BACKEND_NODES, 81);
      for (const [node, backendNode] of answers) assert.equal(backendNode, node, `${node} answered from elsewhere`);
      for (const ip of publicIPs(BACKEND_NODES)) {
        const seen = (await getFromClient(ip, 81, "/clientip")).replace(/:\d+$/, "");
        assert.equal(seen, cluster.client.ip, `${ip}: the backend saw ${seen}, not the client host`);
      }
    });

    test("the exclusion label (true excludes; false, absent keep), the autoscaler taint, a cordoned node", async () => {
      const kubectl = (...args: string[]) => cluster.kubectl(args);
      await kubectl("label", "node", "node-3", `${EXCLUDE_LABEL}=true`);
      await waitForIngress("web", ["node-1", "node-2"]);
      await kubectl("label", "node", "node-3", `${EXCLUDE_LABEL}=false`, "--overwrite");
      await waitForIngress("web", WORKERS);
      // Absent and cordoned keep node-3; the autoscaler's taint, set after, takes node-2 away.
      await kubectl("label", "node", "node-3", `${EXCLUDE_LABEL}-`);
      await kubectl("cordon", "node-3");
      await kubectl("taint", "node", "node-2", `${AUTOSCALER_TAINT}=${Math.floor(Date.now() / 1000)}:NoSchedule`);
      await waitForIngress("web", ["node-1", "node-3"]);
      await kubectl("taint", "node", "node-2", `${AUTOSCALER_TAINT}-`);
      await kubectl("uncordon", "node-3");
      await waitForIngress("web", WORKERS);
    });

    test("another class is never touched; class-less Services only once helm upgrade claims them", async () => {
      const since = new Date(Date.now() - 1000);
      const other = await create("other", { port: 82, lbClass: "example.com/other" });
      const plain = await create("plain", { port: 83, lbClass: null });
      // Created after them: once it has its ingress, the controller has seen both.
      await create("marker", { port: 84 });
      await waitForIngress("marker", WORKERS);
      const untouched = async (service: Service) => {
        const now = await getService(service.metadata?.name as string);
        assert.deepEqual(now.metadata?.finalizers ?? [], [], `${service.metadata?.name}: no finalizer`);
        assert.deepEqual(now.status?.loadBalancer ?? {}, {}, `${service.metadata?.name}: no status`);
        assert.deepEqual(await eventsAbout(service), [], `${service.metadata?.name}: no Events`);
      };
      await untouched(other);
      await untouched(plain);

      await cluster.helm(["upgrade", RELEASE, CHART_DIR, "--namespace", NAMESPACE, "--reuse-values",
        "--set", "loadBalancer.claimClassless=true"]);
      // The new replicas start, one leads, and claims it. The rollout is awaited too: a new replica may lead before
      // its readiness probe (every 10 s) lets the rollout remove the last old one, and that one, left running,
      // would lead again when the next case restarts the new ones, and release the Service, as its flags say.
      await controllerRolledOut();
      assert.ok(hasFinalizer(await waitForIngress("plain", WORKERS, 240_000)));
      await untouched(other);
      const written = serviceWrites(await clusterAuditEvents(cluster, since)).map((event) => event.objectRef?.name);
      assert.ok(!written.includes("other"), `writes to other: ${written.join(", ")}`);
    });

    test("a reserved port and a port conflict are refused: a Warning names rule and value, status empty", async () => {
      const ssh = await create("ssh", { port: 22 });
      const conflict = await create("conflict", { port: 80 });
      const warning = (service: Service, message: RegExp) =>
        waitFor(
          `a Warning about ${service.metadata?.name} matching ${message}`,
          async () => (await eventsAbout(service)).find((e) => e.type === "Warning" && message.test(e.message ?? "")),
          WAIT_MS,
          250,
        );
      const refusal = await warning(ssh, /^refused \(reserved-port\): port TCP\/22 .*\(reserved: 22\)$/);
      assert.equal(refusal.reason, "SyncLoadBalancerFailed");
      const worker = cluster.node("node-1").publicIP.replace(/\.\d+$/, "");
      await warning(conflict, new RegExp(`^refused \\(port-conflict\\): TCP/80 on ${worker}\\.\\d+ is held by the ` +
        "older Service default/web$"));
      for (const service of [ssh, conflict]) {
        const now = await getService(service.metadata?.name as string);
        assert.deepEqual(ingressIps(now), [], service.metadata?.name);
        assert.ok(!hasFinalizer(now), service.metadata?.name);
      }
    });

    test("a namespace editor takes no port another holds: a NodePort, a hostNetwork pod's; both still answer", async () => {
      // The holders: a NodePort Service of the backends, and a hostNetwork pod on node-1 (a node agent's kind).
      const victim = await cluster.admin.request<Service>({
        method: "POST",
        path: servicePath(),
        body: {
          metadata: { name: "victim" },
          spec: { type: "NodePort", selector: { app: "netexec" }, ports: [{ port: 80, targetPort: BACKEND_PORT }] },
        },
      });
      const nodePort = victim.spec?.ports?.[0]?.nodePort as number;
      const holder = {
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: "host-agent", namespace: "kube-system" },
        spec: {
          nodeName: "node-1",
          hostNetwork: true,
          containers: [{
            name: "netexec",
            image: AGNHOST_IMAGE,
            args: ["netexec", `--http-port=${HOST_NETWORK_PORT}`, "--udp-port=-1"],
            ports: [{ containerPort: HOST_NETWORK_PORT }],
          }],
        },
      };
      await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(holder));
      const node1 = cluster.node("node-1").publicIP;
      // What each answers before the editor acts: any backend on the NodePort, the pod's node on its port.
      const pods = await backendPods();
      await waitFor(`${node1}:${nodePort} answering`, () => getFromClient(node1, nodePort, "/hostname"), WAIT_MS, 250);
      const hostAgent = await waitFor(`${node1}:${HOST_NETWORK_PORT} answering`,
        () => getFromClient(node1, HOST_NETWORK_PORT, "/hostname"), WAIT_MS, 250);

      const tenant = await namespaceEditor(cluster.controlPlane, "tenant");
      const editor = await editorClient(tenant);
      try {
        const path = `/api/v1/namespaces/${tenant.namespace}/services`;
        // As the editor itself, through its `edit` grant: Services of the class on both ports, no backends needed.
        const steal = (name: string, port: number) =>
          editor.request<Service>({
            method: "POST",
            path,
            body: {
              metadata: { name },
              spec: {
                type: "LoadBalancer",
                loadBalancerClass: NODE_ADDRESS_CLASS,
                selector: { app: "tenant" },
                ports: [{ port, targetPort: BACKEND_PORT }],
              },
            },
          });
        const onNodePort = await steal("on-node-port", nodePort);
        const onHostNetwork = await steal("on-host-network", HOST_NETWORK_PORT);
        // The editor reads the Warnings itself, naming whose port it is.
        const warning = (service: Service, message: string) =>
          waitFor(`a Warning about ${service.metadata?.name}: ${message}`, async () =>
            (await eventsAbout(service, editor)).find((e) => e.type === "Warning" && e.message === message),
            WAIT_MS, 250);
        await warning(onNodePort, `refused (node-port): port TCP/${nodePort} is the NodePort of the older ` +
          "Service/default/victim, open on every node");
        await warning(onHostNetwork, `refused (host-network-port): port TCP/${HOST_NETWORK_PORT} on node node-1 is ` +
          "a port of the older Pod/kube-system/host-agent, which uses the node's network");
        for (const name of ["on-node-port", "on-host-network"]) {
          const now = await editor.request<Service>({ method: "GET", path: `${path}/${name}` });
          assert.deepEqual(now.status?.loadBalancer ?? {}, {}, `${name}: no status at all`);
        }
        // Had the ports been taken, kube-proxy would send these to the editor's Services (no endpoints: refused).
        for (const node of WORKERS) {
          const ip = cluster.node(node).publicIP;
          const answer = await getFromClient(ip, nodePort, "/hostname");
          assert.ok(pods.has(answer), `${ip}:${nodePort} answered ${answer}, not a backend of the victim`);
        }
        assert.equal(await getFromClient(node1, HOST_NETWORK_PORT, "/hostname"), hostAgent);
        await editor.request({ method: "DELETE", path: `${path}/on-node-port` });
        await editor.request({ method: "DELETE", path: `${path}/on-host-network` });
      } finally {
        editor.close();
        await cluster.kubectl(["delete", "pod", "host-agent", "--namespace", "kube-system", "--wait=false"]);
        await cluster.kubectl(["delete", "service", "victim", "--wait=false"]);
      }
    });

    test("deleting a Service, or changing its type, removes its status and finalizer", async () => {
      const gone = await create("gone", { port: 85 });
      await create("retyped", { port: 86 });
      await waitForIngress("gone", WORKERS);
      await waitForIngress("retyped", WORKERS);

      await cluster.kubectl(["delete", "service", "gone", "--wait=false"]);
      await waitFor("gone to be deleted (its finalizer removed)", async () => {
        try {
          await getService("gone");
          return false;
        } catch (err) {
          return isApiError(err, "NotFound");
        }
      }, WAIT_MS, 250);
      await waitForReasons(gone, [
        "Normal EnsuringLoadBalancer",
        "Normal EnsuredLoadBalancer",
        "Normal DeletingLoadBalancer",
        "Normal DeletedLoadBalancer",
      ]);

      await cluster.kubectl(["patch", "service", "retyped", "--type=merge", "-p", '{"spec":{"type":"ClusterIP"}}']);
      const released = await waitFor(
        "retyped without finalizer and status",
        async () => {
          const service = await getService("retyped");
          return !hasFinalizer(service) && ingressIps(service).length === 0 && service;
        },
        WAIT_MS,
        250,
      );
      assert.equal(released.spec?.type, "ClusterIP");
    });

    test("a controller restart writes nothing: no Service is patched but a new one", async (t) => {
      const before = new Set((await listPods(cluster, CONTROLLER_APP)).map((pod) => pod.metadata?.name));
      const restarted = new Date();
      await cluster.kubectl(["rollout", "restart", `deployment/${CONTROLLER_APP}`, "--namespace", NAMESPACE]);
      await controllerRolledOut();
      const leader = await waitFor(
        "a new replica leading",
        async () => {
          const ready = (await listPods(cluster, CONTROLLER_APP)).filter(podReady).map((pod) => pod.metadata?.name);
          const holder = await leaseHolder(cluster);
          return holder !== undefined && !before.has(holder) && ready.includes(holder) && holder;
        },
        120_000,
        250,
      );
      t.diagnostic(`${leader} leads ${((Date.now() - restarted.getTime()) / 1000).toFixed(1)} s after the restart`);
      // The new leader synced every Service when it started leading; one created after is synced after them.
      await create("after-restart", { port: 87 });
      await waitForIngress("after-restart", WORKERS);
      const writes = serviceWrites(await clusterAuditEvents(cluster, restarted));
      const written = writes.map((event) => `${requestKey(event)} ${event.objectRef?.name} by ${event.user.username}`);
      const byController = (key: string) => `${key} after-restart by ${CONTROLLER_USER}`;
      // On failure, which pod wrote what, and when: a write is explained by that pod's flags and lease.
      const byPod = writes.map((event) => `${event.requestReceivedTimestamp} ${requestKey(event)} ` +
        `${event.objectRef?.name} by pod ${tokenPod(event).pod}`);
      assert.deepEqual(written.sort(), [byController("patch services"), byController("patch services/status")],
        byPod.join("\n"));
    });

    test("a powered-off node leaves the ingress", async (t) => {
      const killed = Date.now();
      await cluster.killNode("node-3");
      // kube-controller-manager marks it NotReady after its 20 s grace period; the controller drops it then.
      await waitForIngress("web", BACKEND_NODES, 120_000);
      t.diagnostic(`node-3 left web's ingress ${((Date.now() - killed) / 1000).toFixed(1)} s after its power loss`);
      assert.deepEqual(ingressIps(await getService("web-local")).sort(), publicIPs(BACKEND_NODES));
      await answeringNodes(BACKEND_NODES, 80);
    });

    test("everything the controller's account asked for in this run was granted (audit log: no 403)", async (t) => {
      const requests = (await clusterAuditEvents(cluster, new Date(0))).filter(
        (event) => event.user.username === CONTROLLER_USER,
      );
      const services = requests.filter((event) => event.objectRef?.resource === "services");
      assert.ok(services.length > 0, "the audit log holds the controller's requests");
      const refused = requests.filter((event) => event.responseStatus?.code === 403).map(requestKey);
      assert.deepEqual(refused, []);
      t.diagnostic(`asked: ${[...new Set(requests.map(requestKey))].sort().join(", ")}`);
    });
  });
}

/** Successful writes to Services (the object or its status) in the audit log. */
const serviceWrites = (events: Awaited<ReturnType<typeof clusterAuditEvents>>) =>
  events.filter(
    (event) =>
      ["patch", "update"].includes(event.verb) &&
      event.objectRef?.resource === "services" &&
      (event.responseStatus?.code ?? 0) < 300,
  );

for (const mode of PROXY_MODES) loadBalancerSuite(mode);
