// MetalLB on the local cluster, in L2 mode or BGP mode (native, or FRR): the anchor our announcements are measured
// against, installed as its users install it. Its controller and speaker are built from the pinned module go.universe.tf/metallb like the
// other upstream binaries (build.ts: static, CGO off, cached), but only on demand (ensureMetallbImages), not by
// ensureBinaries: only the anchor's benchmark and test need them. Each goes into a single-layer image laid out as
// upstream's Dockerfiles lay it out (the binary at /, LICENSE; the speaker's with its FRR mode's helpers), without
// their distroless base. FRR mode's FRR image is made from Debian's packages (frr-image.ts).
//
// The objects are MetalLB's own: its Helm chart from the same module, rendered by the pinned helm with the values
// that leave frr-k8s out (its images are not built here), add the speaker's FRR containers for FRR mode, and point it
// at these images (metallbObjects), then a pool and its L2Advertisement (l2PoolObjects), or a pool, its
// BGPAdvertisement, the BGPPeers and BFD profiles (bgpPoolObjects, metallbBgpPeer, metallbBfdProfile).
// installMetallb does all of it.
import { existsSync } from "node:fs";
import { chmod, cp, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { parse, parseAllDocuments } from "yaml";
import { CACHE_DIR, type Component, ensureBinaries, ensureComponent } from "./build.ts";
import type { Cluster } from "./cluster.ts";
import { run } from "./exec.ts";
import { ensureFrrImage } from "./frr-image.ts";
import { type ImageFile, writeImageTarball } from "./oci-image.ts";
import { METALLB_VERSION } from "./versions.ts";
import { waitFor } from "./wait.ts";

const MODULE = "go.universe.tf/metallb";

const COMPONENT: Component = {
  name: "metallb",
  version: METALLB_VERSION,
  module: MODULE,
  commands: {
    controller: `${MODULE}/controller`,
    speaker: `${MODULE}/speaker`,
    // In the speaker's image too, as upstream's Dockerfile puts them: its FRR mode's init containers copy them out.
    "cp-tool": `${MODULE}/frr-tools/cp-tool`,
    "frr-metrics": `${MODULE}/frr-tools/metrics`,
  },
  ldflags: [],
  goModExtra: frrK8sReplace,
};

/**
 * MetalLB v0.16.2 requires github.com/metallb/frr-k8s v0.0.27, whose zip the module proxy refuses (versions.ts).
 * The served v0.0.26 lacks only two names of its API that v0.16.2's internal/bgp/frrk8s uses (BGP through frr-k8s,
 * which L2 mode never runs): the type AsPathPrependPrefixes and Advertise's field PrefixesWithAsPathPrepend. The
 * build replaces frr-k8s with a copy of v0.0.26 given those two, so MetalLB's own code is v0.16.2's, unchanged.
 */
const FRR_K8S = { module: "github.com/metallb/frr-k8s", served: "v0.0.26" };

async function frrK8sReplace(): Promise<string> {
  const dir = path.join(CACHE_DIR, `frr-k8s-${FRR_K8S.served}-for-metallb-${METALLB_VERSION}`);
  if (!existsSync(dir)) {
    const out = await run("go", ["mod", "download", "-json", `${FRR_K8S.module}@${FRR_K8S.served}`]);
    const copy = `${dir}.partial`;
    await rm(copy, { recursive: true, force: true });
    await cp((JSON.parse(out) as { Dir: string }).Dir, copy, { recursive: true });
    // The module cache is read-only: only the API folder and the file edited are made writable.
    const api = path.join(copy, "api/v1beta1");
    const types = path.join(api, "frrconfiguration_types.go");
    await chmod(api, 0o755);
    await chmod(types, 0o644);
    const field = "\tPrefixesWithCommunity []CommunityPrefixes `json:\"withCommunity,omitempty\"`\n";
    const text = await readFile(types, "utf8");
    if (!text.includes(field)) throw new Error(`${types}: Advertise's PrefixesWithCommunity not found`);
    const added = "\tPrefixesWithAsPathPrepend []AsPathPrependPrefixes `json:\"withAsPathPrepend,omitempty\"`\n";
    await writeFile(types, text.replace(field, field + added));
    await writeFile(
      path.join(api, "aspathprepend_localccm.go"),
      "package v1beta1\n\n// Added by local-ccm's build of MetalLB (localcluster/metallb.ts): named by MetalLB " +
        `${METALLB_VERSION}, new in frr-k8s v0.0.27.\n` +
        "type AsPathPrependPrefixes struct {\n\tPrefixes      []string `json:\"prefixes,omitempty\"`\n" +
        "\tAsPathPrepend uint8    `json:\"asPathPrepend,omitempty\"`\n}\n",
    );
    await rename(copy, dir);
  }
  return `replace ${FRR_K8S.module} => ${dir}`;
}

/** localhost/ says they come from no registry. */
const REPOSITORIES = { controller: "localhost/metallb-controller", speaker: "localhost/metallb-speaker" } as const;

export type MetallbProgram = keyof typeof REPOSITORIES;

export const METALLB_IMAGES = {
  controller: `${REPOSITORIES.controller}:${METALLB_VERSION}`,
  speaker: `${REPOSITORIES.speaker}:${METALLB_VERSION}`,
} as const satisfies Record<MetallbProgram, string>;

export const METALLB_NAMESPACE = "metallb-system";
const RELEASE = "metallb";

export interface MetallbImage {
  tarball: string;
  reference: string;
}

/** The pinned module in Go's module cache (downloaded if needed). */
async function metallbModuleDir(): Promise<string> {
  const out = await run("go", ["mod", "download", "-json", `${MODULE}@${METALLB_VERSION}`]);
  return (JSON.parse(out) as { Dir: string }).Dir;
}

/** The controller's and the speaker's image tarballs for `ctr images import`, built once per version. */
export async function ensureMetallbImages(): Promise<Record<MetallbProgram, MetallbImage>> {
  const dir = path.join(CACHE_DIR, `metallb-images-${METALLB_VERSION}-frr-tools`);
  const tarball = (program: MetallbProgram) => path.join(dir, `${program}.tar`);
  const programs = Object.keys(METALLB_IMAGES) as MetallbProgram[];
  if (programs.some((program) => !existsSync(tarball(program)))) {
    const binaries = await ensureComponent(COMPONENT);
    const module = await metallbModuleDir();
    const binary = (name: string) => ({ path: `/${name}`, source: binaries[name] as string, mode: 0o755 });
    const besides: Record<MetallbProgram, ImageFile[]> = {
      controller: [],
      speaker: [
        binary("cp-tool"),
        binary("frr-metrics"),
        { path: "/frr-reloader.sh", source: path.join(module, "frr-tools/reloader/frr-reloader.sh"), mode: 0o755 },
      ],
    };
    await mkdir(dir, { recursive: true });
    for (const program of programs) {
      await writeImageTarball(
        {
          reference: METALLB_IMAGES[program],
          files: [
            binary(program),
            ...besides[program],
            { path: "/LICENSE", source: path.join(module, "LICENSE"), mode: 0o644 },
            // From the distroless base, what they use: /tmp, where the webhook's certificates are mounted.
            { path: "/tmp", directory: true, mode: 0o1777 },
          ],
          config: { Entrypoint: [`/${program}`] },
        },
        tarball(program),
      );
    }
  }
  return Object.fromEntries(
    programs.map((program) => [program, { tarball: tarball(program), reference: METALLB_IMAGES[program] }]),
  ) as Record<MetallbProgram, MetallbImage>;
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: unknown;
}

export interface MetallbOptions {
  /** MetalLB then serves only Services of this class (its --lb-class); default: class-less ones, as it ships. */
  loadBalancerClass?: string;
  /** BGP through FRR in each speaker's pod (its FRR mode, which has BFD), not its own Go speaker (native mode). */
  frr?: boolean;
}

/**
 * What `helm install metallb charts/metallb` of the pinned module installs without FRR, with these images:
 * its namespace (config/native/ns.yaml: privileged, for the speaker's host network and NET_RAW), CRDs, RBAC,
 * the webhook, the controller Deployment and the speaker DaemonSet (host network, NET_RAW only; memberlist on,
 * its secret made by the controller). frr-k8s is off (the chart installs it by default, for BGP): without it and
 * without the speaker's FRR containers (off by default), BGP is MetalLB's native speaker. With `frr`, the speaker's
 * pod has them (FRR mode): FRR's daemons, MetalLB's reloader and frr-metrics, in FRR's image (frr-image.ts).
 */
export async function metallbObjects(options: MetallbOptions = {}): Promise<KubeObject[]> {
  const { helm } = await ensureBinaries();
  const module = await metallbModuleDir();
  const values: Record<string, string> = {
    "frrk8s.enabled": "false",
    ...(options.loadBalancerClass ? { loadBalancerClass: options.loadBalancerClass } : {}),
  };
  if (options.frr) {
    const frr = await ensureFrrImage();
    values["speaker.frr.enabled"] = "true";
    values["speaker.frr.image.repository"] = frr.repository;
    values["speaker.frr.image.tag"] = frr.tag;
    values["speaker.frr.image.pullPolicy"] = "Never";
  }
  for (const program of Object.keys(REPOSITORIES) as MetallbProgram[]) {
    values[`${program}.image.repository`] = REPOSITORIES[program];
    values[`${program}.image.tag`] = METALLB_VERSION;
    // Imported on every node: nothing is pulled, and a missing import shows as ErrImageNeverPull.
    values[`${program}.image.pullPolicy`] = "Never";
  }
  const sets = Object.entries(values).flatMap(([key, value]) => ["--set", `${key}=${value}`]);
  const rendered = await run(helm, [
    "template", RELEASE, path.join(module, "charts/metallb"), "--namespace", METALLB_NAMESPACE, ...sets,
  ]);
  const namespace = parse(await readFile(path.join(module, "config/native/ns.yaml"), "utf8")) as KubeObject;
  const objects = parseAllDocuments(rendered)
    .map((doc) => doc.toJS() as KubeObject | null)
    .filter((object) => object !== null);
  return [namespace, ...objects];
}

/** A pool of `addresses` (ranges first-last or CIDRs) and the L2Advertisement that announces it from every node. */
export function l2PoolObjects(name: string, addresses: string[]): KubeObject[] {
  const metadata = { name, namespace: METALLB_NAMESPACE };
  return [
    { apiVersion: "metallb.io/v1beta1", kind: "IPAddressPool", metadata, spec: { addresses } },
    { apiVersion: "metallb.io/v1beta1", kind: "L2Advertisement", metadata, spec: { ipAddressPools: [name] } },
  ];
}

/** A pool of `addresses` and the BGPAdvertisement that announces it (from every node) to every BGPPeer. */
export function bgpPoolObjects(name: string, addresses: string[]): KubeObject[] {
  const metadata = { name, namespace: METALLB_NAMESPACE };
  return [
    { apiVersion: "metallb.io/v1beta1", kind: "IPAddressPool", metadata, spec: { addresses } },
    { apiVersion: "metallb.io/v1beta1", kind: "BGPAdvertisement", metadata, spec: { ipAddressPools: [name] } },
  ];
}

/** A MetalLB BGPPeer; a BFD profile (metallbBfdProfile) takes its FRR mode. */
export function metallbBgpPeer(
  name: string,
  spec: { myASN: number; peerASN: number; peerAddress: string; holdTime: string; connectTime?: string; bfdProfile?: string },
): KubeObject {
  return { apiVersion: "metallb.io/v1beta2", kind: "BGPPeer", metadata: { name, namespace: METALLB_NAMESPACE }, spec };
}

/** A MetalLB BFDProfile, intervals in milliseconds. */
export function metallbBfdProfile(
  name: string,
  spec: { receiveInterval: number; transmitInterval: number; detectMultiplier: number },
): KubeObject {
  return { apiVersion: "metallb.io/v1beta1", kind: "BFDProfile", metadata: { name, namespace: METALLB_NAMESPACE }, spec };
}

const ROLLOUT_TIMEOUT = "300s";
/** The pool is refused until the controller's webhook serves (its certificate made, its endpoint ready). */
const WEBHOOK_WAIT_MS = 180_000;

/**
 * Imports the images on every node, applies metallbObjects and waits for the controller and every speaker to be
 * ready, then applies `config` (a pool and its advertisement: l2PoolObjects, bgpPoolObjects; peers). Speakers run
 * only on nodes without the uninitialized taint (they tolerate the control-plane taint only): initialise the nodes
 * first. BGP runs in MetalLB's native mode, or with `frr` in its FRR mode (metallbObjects).
 */
export async function installMetallb(
  cluster: Cluster,
  config: KubeObject[],
  options: MetallbOptions = {},
): Promise<void> {
  const tarballs = Object.values(await ensureMetallbImages()).map((image) => image.tarball);
  if (options.frr) tarballs.push((await ensureFrrImage()).tarball);
  for (const node of cluster.nodes) {
    for (const tarball of tarballs) await node.ctr(["images", "import", tarball]);
  }
  const apply = async (items: KubeObject[]) =>
    cluster.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items }));
  await apply(await metallbObjects(options));
  for (const workload of [`deployment/${RELEASE}-controller`, `daemonset/${RELEASE}-speaker`]) {
    await cluster.kubectl(["rollout", "status", "-n", METALLB_NAMESPACE, workload, `--timeout=${ROLLOUT_TIMEOUT}`]);
  }
  await waitFor("MetalLB's webhook to accept the pool", () => apply(config), WEBHOOK_WAIT_MS, 1_000);
}

/** The node whose speaker announces the Service, as MetalLB records it (its ServiceL2Status), if one does. */
export async function announcingNode(cluster: Cluster, namespace: string, name: string): Promise<string | undefined> {
  const list = JSON.parse(
    await cluster.kubectl(["get", "servicel2statuses.metallb.io", "-n", METALLB_NAMESPACE, "-o", "json"]),
  ) as { items: { status?: { node?: string; serviceName?: string; serviceNamespace?: string } }[] };
  const ours = list.items.find(({ status }) => status?.serviceNamespace === namespace && status.serviceName === name);
  return ours?.status?.node;
}
