// `helm upgrade` from the previous release to this tree, as users run it: the previous commit's chart and image
// (localcluster/previous.ts: `git archive` of PREVIOUS, its image built by its own code under a tag of its own),
// installed with node-address and layer-2 pool Services serving, then upgraded to charts/local-ccm and this tree's
// image. Sampled five times a second throughout: no Service's address ever changes or goes, no moment has two
// held controller Leases (a renamed Lease would let the old and the new program lead at once), and each pool
// Service's announcer changes at most once (todo: it may move twice, depending on the agents' rollout order).
//
// PREVIOUS: the chart's version has never been bumped (0.1.0) and the repository has no tags, so the previous
// release is the last commit on main before the work of issue 26 part D (234f1f4; CI checks out the whole history
// for it). Set UPGRADE_FROM to a commit to test another.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Service } from "kubernetes-types/core/v1.js";
import { NETEXEC_PORT, netexecBackends } from "../../localcluster/agnhost.ts";
import { CHART_DIR } from "../../localcluster/chart.ts";
import { type Cluster, startCluster } from "../../localcluster/cluster.ts";
import { type PreviousRelease, previousRelease } from "../../localcluster/previous.ts";
import { CONTROLLER_APP, allInitialised, listPods, NAMESPACE, publicPool, RELEASE } from "../../localcluster/project.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { L2_CLASS } from "../../src/pools/allocate.ts";
import { ANNOUNCER_ANNOTATION, ANNOUNCER_LEASE_LABEL } from "../../src/pools/announcement.ts";
import { NODE_ADDRESS_CLASS } from "../../src/service/decide.ts";

const PREVIOUS = process.env.UPGRADE_FROM || "234f1f450bf1d40d20b7f725032b20541b99124c";
/** Generous: the machine runs other tests too. */
const WAIT_MS = 180_000;
const SAMPLE_MS = 200;
const SERVICES = [
  { name: "node-address", lbClass: NODE_ADDRESS_CLASS },
  { name: "pool-a", lbClass: L2_CLASS },
  { name: "pool-b", lbClass: L2_CLASS },
];
const VALUES = ["--set", "loadBalancer.l2.enabled=true"];

let cluster: Cluster;
let previous: PreviousRelease;
before(async () => {
  previous = await previousRelease(PREVIOUS);
  cluster = await startCluster({ nodes: 3 });
  for (const node of cluster.nodes) await node.ctr(["images", "import", previous.image.tarball]);
  await cluster.helm(["install", RELEASE, previous.chartDir, "--namespace", NAMESPACE, ...VALUES]);
  await allInitialised(cluster, WAIT_MS);
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(publicPool(cluster.slot)));
  await cluster.kubectl(["apply", "-f", "-"], JSON.stringify(netexecBackends(2)));
  for (const { name, lbClass } of SERVICES) {
    const spec = { type: "LoadBalancer", loadBalancerClass: lbClass, selector: { app: "netexec" },
      ports: [{ port: 80, targetPort: NETEXEC_PORT }] };
    await cluster.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "Service",
      metadata: { name, namespace: "default" }, spec }));
  }
});
after(async () => {
  await cluster?.stop();
  previous?.remove();
});

interface Sample {
  at: number;
  /** Service → its ingress IPs, joined. */
  addresses: Map<string, string>;
  /** Pool Service → its announcer ("" for none). */
  announcers: Map<string, string>;
  /** Controller Leases held at that moment: name=holder. */
  held: string[];
}

async function sample(): Promise<Sample> {
  const at = Date.now();
  const services = await cluster.admin.request<{ items: Service[] }>({
    method: "GET",
    path: "/api/v1/namespaces/default/services",
  });
  const ours = services.items.filter(({ metadata }) => SERVICES.some(({ name }) => name === metadata?.name));
  const leases = await cluster.admin.request<{ items: Lease[] }>({
    method: "GET",
    path: `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases`,
    // Not the agents' announcer Leases, nor kube-apiserver's identity Lease.
    query: { labelSelector: `!${ANNOUNCER_LEASE_LABEL},!apiserver.kubernetes.io/identity` },
  });
  const held = leases.items.filter(({ spec = {} }) => {
    const renewed = Date.parse(spec.renewTime ?? "");
    return spec.holderIdentity && renewed + (spec.leaseDurationSeconds ?? 0) * 1000 > at;
  });
  return {
    at,
    addresses: new Map(ours.map((s) => [s.metadata?.name ?? "", (s.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ip).join(",")])),
    announcers: new Map(ours.filter((s) => s.spec?.loadBalancerClass === L2_CLASS)
      .map((s) => [s.metadata?.name ?? "", s.metadata?.annotations?.[ANNOUNCER_ANNOTATION] ?? ""])),
    held: held.map(({ metadata, spec }) => `${metadata?.name}=${spec?.holderIdentity}`),
  };
}

/** The controller pods' images. */
const controllerImages = async () =>
  (await listPods(cluster, CONTROLLER_APP))
    .filter(({ metadata }) => !metadata?.deletionTimestamp)
    .map(({ spec }) => spec?.containers[0]?.image ?? "");

test(`upgrade from ${PREVIOUS.slice(0, 7)}: every address kept, one Lease holder at a time`, async (t) => {
  let last: Sample | undefined;
  const first = await waitFor(
    "every Service with an address, every pool Service with an announcer, and a leader",
    async () => {
      const s = (last = await sample());
      const served = SERVICES.every(({ name }) => s.addresses.get(name));
      return served && [...s.announcers.values()].every(Boolean) && s.held.length === 1 && s;
    },
    WAIT_MS,
    250,
  ).catch((err: unknown) => {
    const shown = last && { ...last, addresses: [...last.addresses], announcers: [...last.announcers] };
    throw new Error(`${(err as Error).message}; last seen: ${JSON.stringify(shown)}`, { cause: err });
  });
  assert.deepEqual([...new Set(await controllerImages())], [previous.image.reference]);
  const samples: Sample[] = [first];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      samples.push(await sample());
      await new Promise((resolve) => setTimeout(resolve, SAMPLE_MS));
    }
  })();
  try {
    const upgraded = Date.now();
    await cluster.helm(["upgrade", RELEASE, CHART_DIR, "--namespace", NAMESPACE, ...VALUES, "--wait", "--timeout=5m"]);
    t.diagnostic(`helm upgrade --wait took ${((Date.now() - upgraded) / 1000).toFixed(1)} s`);
    assert.deepEqual([...new Set(await controllerImages())], [cluster.projectImage]);
    // Until a replica of this tree leads (the Lease's holder is one of its pods), and a few samples more.
    await waitFor(
      "a new replica holding the Lease",
      async () => {
        const names = (await listPods(cluster, CONTROLLER_APP)).map(({ metadata }) => metadata?.name ?? "");
        const holder = samples.at(-1)?.held[0]?.split("=")[1] ?? "";
        return names.some((name) => holder.startsWith(`${name}_`));
      },
      WAIT_MS,
      250,
    );
    const until = samples.length + 10;
    await waitFor("ten more samples", () => samples.length >= until, WAIT_MS, SAMPLE_MS);
  } finally {
    sampling = false;
    await sampler;
  }
  t.diagnostic(`${samples.length} samples over ${((samples.at(-1)!.at - first.at) / 1000).toFixed(1)} s`);

  for (const { name } of SERVICES) {
    const changed = samples.filter((s) => s.addresses.get(name) !== first.addresses.get(name));
    assert.deepEqual(changed.map((s) => s.addresses.get(name)), [], `${name} kept ${first.addresses.get(name)}`);
  }
  const twoLeaders = samples.filter((s) => s.held.length > 1).map((s) => s.held.join(" "));
  assert.deepEqual(twoLeaders, [], "never two held controller Leases");
  const holders = samples.map((s) => s.held[0]?.split("=")[1] ?? "").filter((h, i, all) => h && h !== all[i - 1]);
  t.diagnostic(`Lease holders in turn: ${holders.join(" → ")}`);
  // Todo (runs and reports, does not fail the suite): the agents roll one node at a time and a stopping agent's
  // Services move away, so with the announcer's node rolled first a Service moves there and back (seen: node-1 →
  // node-2 → node-1 with two workers), depending on the rollout's order.
  const todo = "an announcer may move twice when the agents roll (issue 26 part D, left open)";
  await t.test("each pool Service's announcer moves at most once", { todo }, () => {
    for (const name of first.announcers.keys()) {
      const moves = samples.map((s) => s.announcers.get(name)).filter((a, i, all) => i > 0 && a !== all[i - 1]);
      t.diagnostic(`${name}: announced by ${first.announcers.get(name)}, then ${moves.join(" → ") || "no change"}`);
      assert.ok(moves.length <= 1, `${name}'s announcer changed ${moves.length} times: ${moves.join(" → ")}`);
    }
  });
});
