// A tenant joining another namespace's sharing key, as itself: namespace B's editor (RBAC `edit`, through its own
// token) creates Services with the sharing key (local-ccm.io/allow-shared-ip) of namespace A's Service, on a pool
// that admits both namespaces. Services sharing an address have one announcer, eligible for all of them
// (src/pools/announcers.ts), so a sharer whose externalTrafficPolicy Local has no endpoint, or whose node selector
// matches no node, would leave the whole address without an announcer. A's Service must keep its address and its
// announcer through each attempt: a Service joins only an address held by Services of its own namespace.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Service } from "kubernetes-types/core/v1.js";
import type { KubeClient } from "../../src/kube/client.ts";
import { Resource, SERVICE_RESOURCE } from "../../src/kube/resource.ts";
import { NODE_SELECTOR_ANNOTATION } from "../../src/loadbalancer/service.ts";
import { L2_CLASS, REQUESTED_IPS_ANNOTATION, SHARING_ANNOTATION } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION } from "../../src/pools/announcement.ts";
import { editorClient, namespaceEditor } from "../../localcluster/editor.ts";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { type AnnouncerLease, type PoolWorld, type RunningController, startPoolWorld } from "./world.ts";

const WAIT_MS = 60_000;
const KEY = "front";
const SEGMENT = "10.79.0.0/24";
const NODES = ["share-n1", "share-n2"];

let world: PoolWorld;
let running: RunningController;
let tenant: KubeClient;
let mine: Resource<Service>;
let theirs: Resource<Service>;
let tenantNamespace: string;
let heartbeat: NodeJS.Timeout | undefined;
const agents: AnnouncerLease[] = [];

before(async () => {
  world = await startPoolWorld({ controllerManager: true }); // for the namespace editor's `edit` ClusterRole
  const namespace = await world.namespace();
  tenantNamespace = `${namespace}-tenant`;
  const editor = await namespaceEditor(world.plane, tenantNamespace);
  tenant = await editorClient(editor, { maxRetries: 0 });
  mine = world.services(namespace);
  theirs = new Resource<Service>(tenant, { ...SERVICE_RESOURCE, namespace: tenantNamespace });
  await world.createPool("shared", { addresses: ["10.79.0.10-10.79.0.20"], namespaces: [namespace, tenantNamespace] });
  for (const [i, node] of NODES.entries()) {
    await world.addNode(node, [{ type: "InternalIP", address: `10.79.0.${i + 1}` }]);
    agents.push(await world.announce(node, [SEGMENT]));
  }
  // kube-controller-manager runs (for `edit`): its node lifecycle controller marks a Node without a kubelet's
  // heartbeat Unknown after 50 s, so the test heartbeats as kubelet would.
  heartbeat = setInterval(() => {
    for (const node of NODES) world.setReady(node, "True").catch(() => {});
  }, 10_000);
  running = await world.startController();
});
after(async () => {
  clearInterval(heartbeat);
  tenant?.close();
  await running?.stop();
  await world?.stop();
});

/** A LoadBalancer Service of class local-ccm.io/l2 with the sharing key, on `port`. */
function shared(name: string, port: number, spec: Partial<Service["spec"]> = {}, annotations = {}): Service {
  return {
    metadata: { name, annotations: { [SHARING_ANNOTATION]: KEY, ...annotations } },
    spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port, protocol: "TCP" }], ...spec },
  };
}

const state = async (services: Resource<Service>, name: string) => {
  const { metadata, status } = await services.get(name);
  const ingress = (status?.loadBalancer?.ingress ?? []).flatMap(({ ip }) => (ip ? [ip] : []));
  return { ingress, announcer: metadata?.annotations?.[ANNOUNCER_ANNOTATION] };
};

const warnings = async (namespace: string, name: string) =>
  (await world.events(namespace, name)).filter(({ type }) => type === "Warning").map((e) => `${e.reason}: ${e.message}`);

describe("a tenant joining another namespace's sharing key", () => {
  let held: { ingress: string[]; announcer: string | undefined };

  before(async () => {
    await mine.create(shared("web", 80));
    held = await waitFor(
      "web allocated and announced",
      async () => {
        const now = await state(mine, "web");
        return now.ingress.length === 1 && now.announcer !== undefined && now;
      },
      WAIT_MS,
    );
  });

  // What the tenant's Service gets: an announcer, or (it joins the tenant's own address, and no node may announce
  // for all of that address's Services) a NoAnnouncer Warning.
  const cases: [string, Service, "announcer" | "NoAnnouncer"][] = [
    ["an overlapping port", shared("same-port", 80), "announcer"],
    ["other ports, externalTrafficPolicy Local, no endpoint", shared("local", 81, { externalTrafficPolicy: "Local" }), "NoAnnouncer"],
    ["other ports, a node selector no node matches", shared("nowhere", 82, {}, { [NODE_SELECTOR_ANNOTATION]: "x=y" }), "NoAnnouncer"],
  ];
  for (const [what, service, outcome] of cases) {
    test(`${what}: the tenant's Service gets an address of its own; web keeps its address and announcer`, async () => {
      const name = service.metadata?.name as string;
      await theirs.create(service);
      const got = await waitFor(
        `${name} allocated`,
        async () => {
          const { ingress } = await state(theirs, name);
          return ingress.length === 1 && ingress;
        },
        WAIT_MS,
      );
      assert.notDeepEqual(got, held.ingress, `${name} got web's address`);
      // The tenant's Service had its allocation and announcer decision in the same plan as web's next one. It may
      // join the tenant's own earlier Service and release that one's announcer: the next waits until the released
      // node acknowledges, so the agents here acknowledge what their Service watch would have reached by now.
      await waitFor(`${name} decided`, async () => {
        const { metadata } = await theirs.listPage({ limit: 1 });
        for (const agent of agents) agent.acknowledge(metadata?.resourceVersion);
        const { announcer } = await state(theirs, name);
        const told = await warnings(tenantNamespace, name);
        return outcome === "announcer" ? announcer !== undefined : told.some((w) => w.startsWith(`${outcome}: `));
      });
      assert.deepEqual(await state(mine, "web"), held);
      assert.deepEqual(await warnings(mine.ref.namespace as string, "web"), []);
    });
  }

  test("requesting web's address by its key is refused, naming the rule and the holder's namespace", async () => {
    const [ip] = held.ingress;
    await theirs.create(shared("asks", 83, {}, { [REQUESTED_IPS_ANNOTATION]: ip }));
    const expected =
      `AllocationFailed: refused (sharing-namespace): ${ip} is shared under key ${KEY} by Services of namespace ` +
      `${mine.ref.namespace} only, not ${tenantNamespace}`;
    await waitForEqual("asks refused", () => warnings(tenantNamespace, "asks"), [expected], WAIT_MS);
    assert.deepEqual(await state(theirs, "asks"), { ingress: [], announcer: undefined });
    assert.deepEqual(await state(mine, "web"), held);
    assert.deepEqual(await warnings(mine.ref.namespace as string, "web"), []);
  });
});
