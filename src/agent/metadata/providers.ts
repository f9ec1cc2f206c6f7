// What each cloud's instance metadata service says about the instance it runs on, as the cloud's own
// cloud controller manager would write it on the Node. Pure: the documents come in, the metadata (or
// why these documents are not this provider's) goes out. The HTTP side lives in client.ts.
//
// Sources (facts checked against each upstream; no code copied):
// - Hetzner Cloud: docs.hetzner.cloud "Server metadata" (GET /hetzner/v1/metadata/<key>, plain text);
//   hetznercloud/hcloud-cloud-controller-manager hcloud/instances.go (providerID hcloud://<id>, region
//   = location name) and internal/legacydatacenter/datacenter.go (zone = datacenter, e.g. fsn1-dc14).
// - AWS: EC2 user guide "Use IMDSv2" (PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds,
//   then X-aws-ec2-metadata-token on every GET); kubernetes/cloud-provider-aws (aws:///<az>/<instance-id>).
// - Azure: learn.microsoft.com "Azure Instance Metadata Service" (Metadata: true, api-version);
//   kubernetes-sigs/cloud-provider-azure pkg/provider/azure_instances.go getLocalInstanceProviderID
//   (subscription and resource group lowercased; a uniform scale-set VM named <set>_<n> is
//   .../virtualMachineScaleSets/<set>/virtualMachines/<n>) and azure_zones.go GetZone (zone
//   <location>-<n>, or the fault domain where zones are off; both lowercased; region = location).
// - GCE: cloud.google.com "About VM metadata" (Metadata-Flavor: Google both ways);
//   kubernetes/cloud-provider-gcp gce_instances.go (gce://<project>/<zone>/<name>, machine type's last
//   path element; region = zone without its last "-<letter>").
// - OpenStack: Nova metadata service (openstack/latest/meta_data.json: uuid, availability_zone; the
//   EC2-compatible /latest/meta-data/instance-type is the flavor name); kubernetes/cloud-provider-openstack
//   pkg/openstack/instancesv2.go (openstack:///<uuid>, zone = sanitised availability zone; its region comes
//   from its own configuration, not from the instance, so none is given here).

export const PROVIDERS = ["hetzner", "aws", "azure", "gce", "openstack"] as const;
export type Provider = (typeof PROVIDERS)[number];

/** `auto` tries them in this order: the most specific answers first (OpenStack also serves EC2's paths). */
export const AUTO_ORDER: readonly Provider[] = ["hetzner", "gce", "azure", "openstack", "aws"];

/** What a cloud's controller would write on the Node; each field only when the instance says it. */
export interface InstanceMetadata {
  providerID?: string;
  region?: string;
  zone?: string;
  instanceType?: string;
}

/** One fetched document: status, lowercased response headers, body. */
export interface MetadataDocument {
  status: number;
  headers: Record<string, string | undefined>;
  body: string;
}

export interface ProviderSpec {
  name: Provider;
  /** IMDSv2-style session: PUT `path` with `headers`, then send the answer as `header` on every GET. */
  session?: { path: string; headers: Record<string, string>; header: string };
  /** Sent with every GET. */
  headers: Record<string, string>;
  /** Document name → path (with query). */
  documents: Record<string, string>;
  /** The instance's metadata, or what makes these documents not this provider's. */
  parse(documents: Record<string, MetadataDocument>): InstanceMetadata | { problem: string };
}

type Documents = Record<string, MetadataDocument>;
type Parsed = InstanceMetadata | { problem: string };

/** The body of a 200 answer, trimmed; undefined for any other status. */
function text(documents: Documents, name: string): string | undefined {
  const document = documents[name];
  return document?.status === 200 ? document.body.trim() : undefined;
}

function json(documents: Documents, name: string): Record<string, unknown> | undefined {
  const body = text(documents, name);
  if (body === undefined) return undefined;
  try {
    const value: unknown = JSON.parse(body);
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

function field(object: Record<string, unknown> | undefined, key: string): string | undefined {
  const value = object?.[key];
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** Drops empty fields, so "not said" is always absent. */
function compact(metadata: InstanceMetadata): InstanceMetadata {
  return Object.fromEntries(Object.entries(metadata).filter(([, value]) => value)) as InstanceMetadata;
}

const HETZNER_DATACENTER = /^([a-z]+\d*)-dc\d+$/;

function parseHetzner(documents: Documents): Parsed {
  const id = text(documents, "instance-id");
  if (!id || !/^\d+$/.test(id)) return { problem: "no numeric instance-id under /hetzner/v1/metadata" };
  const datacenter = text(documents, "availability-zone");
  // hcloud's CCM: region = the location (fsn1), zone = its datacenter (fsn1-dc14); newer locations
  // without a datacenter suffix are both.
  const location = datacenter && (HETZNER_DATACENTER.exec(datacenter)?.[1] ?? datacenter);
  return compact({ providerID: `hcloud://${id}`, region: location, zone: datacenter });
}

function parseAws(documents: Documents): Parsed {
  const id = text(documents, "instance-id");
  const zone = text(documents, "availability-zone");
  if (!id || !/^i-[0-9a-f]+$/.test(id)) return { problem: "no EC2 instance-id (i-…) under /latest/meta-data" };
  if (!zone) return { problem: "no placement/availability-zone under /latest/meta-data" };
  return compact({
    providerID: `aws:///${zone}/${id}`,
    region: text(documents, "region"),
    zone,
    instanceType: text(documents, "instance-type"),
  });
}

const AZURE_SCALE_SET_VM = /^(.+)_(\d+)$/;

function parseAzure(documents: Documents): Parsed {
  const compute = json(documents, "compute");
  const subscription = field(compute, "subscriptionId")?.toLowerCase();
  const group = field(compute, "resourceGroupName")?.toLowerCase();
  const name = field(compute, "name");
  const location = field(compute, "location")?.toLowerCase();
  if (!subscription || !group || !name) return { problem: "no compute.subscriptionId, resourceGroupName and name" };
  const base = `azure:///subscriptions/${subscription}/resourceGroups/${group}/providers/Microsoft.Compute`;
  // A uniform scale set's VM is named <set>_<instance>; a flexible scale set's VMs are plain VMs.
  const scaleSet = field(compute, "vmScaleSetName") && AZURE_SCALE_SET_VM.exec(name);
  const providerID = scaleSet
    ? `${base}/virtualMachineScaleSets/${scaleSet[1]}/virtualMachines/${scaleSet[2]}`
    : `${base}/virtualMachines/${name}`;
  const zoneNumber = field(compute, "zone");
  const zone = zoneNumber && location ? `${location}-${zoneNumber}` : field(compute, "platformFaultDomain");
  return compact({ providerID, region: location, zone: zone?.toLowerCase(), instanceType: field(compute, "vmSize") });
}

const lastPathElement = (value: string | undefined) => value?.split("/").at(-1) || undefined;

function parseGce(documents: Documents): Parsed {
  // The server says it is Google's in a response header; anything else answering these paths is not.
  const flavored = Object.values(documents).every((d) => d.headers["metadata-flavor"] === "Google");
  const project = text(documents, "project-id");
  const zone = lastPathElement(text(documents, "zone"));
  const name = text(documents, "name")?.split(".")[0]; // a long hostname-style name → the instance's
  if (!flavored) return { problem: "answers without the Metadata-Flavor: Google header" };
  if (!project || !zone || !name) return { problem: "no project-id, instance/zone and instance/name" };
  const region = /^(.+)-[a-z]$/.exec(zone)?.[1];
  const instanceType = lastPathElement(text(documents, "machine-type"));
  return compact({ providerID: `gce://${project}/${zone}/${name}`, region, zone, instanceType });
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function parseOpenStack(documents: Documents): Parsed {
  const metaData = json(documents, "meta_data");
  const uuid = field(metaData, "uuid");
  if (!uuid || !UUID.test(uuid)) return { problem: "no uuid in openstack/latest/meta_data.json" };
  return compact({
    providerID: `openstack:///${uuid}`,
    zone: labelValue(field(metaData, "availability_zone")),
    instanceType: text(documents, "instance-type"),
  });
}

/**
 * A label value made of what OpenStack may put in a zone name, as cloud-provider-openstack's
 * SanitizeLabel does: characters a label value cannot hold become "-", at most 63, alphanumeric ends.
 */
export function labelValue(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const cleaned = value.replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 63).replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, "");
  return cleaned || undefined;
}

export const PROVIDER_SPECS: Record<Provider, ProviderSpec> = {
  hetzner: {
    name: "hetzner",
    headers: {},
    documents: {
      "instance-id": "/hetzner/v1/metadata/instance-id",
      "availability-zone": "/hetzner/v1/metadata/availability-zone",
    },
    parse: parseHetzner,
  },
  aws: {
    name: "aws",
    session: {
      path: "/latest/api/token",
      headers: { "X-aws-ec2-metadata-token-ttl-seconds": "60" },
      header: "X-aws-ec2-metadata-token",
    },
    headers: {},
    documents: {
      "instance-id": "/latest/meta-data/instance-id",
      "availability-zone": "/latest/meta-data/placement/availability-zone",
      region: "/latest/meta-data/placement/region",
      "instance-type": "/latest/meta-data/instance-type",
    },
    parse: parseAws,
  },
  azure: {
    name: "azure",
    headers: { Metadata: "true" },
    documents: { compute: "/metadata/instance/compute?api-version=2021-02-01&format=json" },
    parse: parseAzure,
  },
  gce: {
    name: "gce",
    headers: { "Metadata-Flavor": "Google" },
    documents: {
      "project-id": "/computeMetadata/v1/project/project-id",
      zone: "/computeMetadata/v1/instance/zone",
      name: "/computeMetadata/v1/instance/name",
      "machine-type": "/computeMetadata/v1/instance/machine-type",
    },
    parse: parseGce,
  },
  openstack: {
    name: "openstack",
    headers: {},
    documents: {
      meta_data: "/openstack/latest/meta_data.json",
      "instance-type": "/latest/meta-data/instance-type",
    },
    parse: parseOpenStack,
  },
};
