import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type MetadataDocument, PROVIDER_SPECS, type Provider } from "./providers.ts";

const ok = (body: string, headers: Record<string, string> = {}): MetadataDocument => ({ status: 200, headers, body });
const missing: MetadataDocument = { status: 404, headers: {}, body: "Not Found" };
const google = { "metadata-flavor": "Google" };

interface Case {
  name: string;
  provider: Provider;
  documents: Record<string, MetadataDocument>;
  expected: unknown;
}

const cases: Case[] = [
  {
    name: "Hetzner: location as region, datacenter as zone",
    provider: "hetzner",
    documents: { "instance-id": ok("42001337\n"), "availability-zone": ok("fsn1-dc14") },
    expected: { providerID: "hcloud://42001337", region: "fsn1", zone: "fsn1-dc14" },
  },
  {
    name: "Hetzner: a location without a datacenter suffix is both",
    provider: "hetzner",
    documents: { "instance-id": ok("7"), "availability-zone": ok("sin") },
    expected: { providerID: "hcloud://7", region: "sin", zone: "sin" },
  },
  {
    name: "Hetzner: a non-numeric id is not Hetzner's",
    provider: "hetzner",
    documents: { "instance-id": ok("<html>"), "availability-zone": ok("x") },
    expected: { problem: "no numeric instance-id under /hetzner/v1/metadata" },
  },
  {
    name: "AWS: availability zone in the providerID, region and instance type",
    provider: "aws",
    documents: {
      "instance-id": ok("i-0abc123def4567890"),
      "availability-zone": ok("eu-central-1a"),
      region: ok("eu-central-1"),
      "instance-type": ok("m5.large"),
    },
    expected: {
      providerID: "aws:///eu-central-1a/i-0abc123def4567890",
      region: "eu-central-1",
      zone: "eu-central-1a",
      instanceType: "m5.large",
    },
  },
  {
    name: "AWS: an OpenStack EC2 look-alike (instance-id not i-…) is not AWS",
    provider: "aws",
    documents: { "instance-id": ok("i-00000001x"), "availability-zone": ok("nova"), region: missing, "instance-type": ok("m1") },
    expected: { problem: "no EC2 instance-id (i-…) under /latest/meta-data" },
  },
  {
    name: "Azure: a VM in zone 2, ids lowercased as the Azure CCM writes them",
    provider: "azure",
    documents: {
      compute: ok(
        JSON.stringify({
          name: "worker-1",
          location: "WestEurope",
          zone: "2",
          platformFaultDomain: "0",
          resourceGroupName: "My-RG",
          subscriptionId: "AAAA-BBBB",
          vmSize: "Standard_D4s_v5",
          vmScaleSetName: "",
        }),
      ),
    },
    expected: {
      providerID: "azure:///subscriptions/aaaa-bbbb/resourceGroups/my-rg/providers/Microsoft.Compute/virtualMachines/worker-1",
      region: "westeurope",
      zone: "westeurope-2",
      instanceType: "Standard_D4s_v5",
    },
  },
  {
    name: "Azure: a uniform scale-set VM, no zones → the fault domain",
    provider: "azure",
    documents: {
      compute: ok(
        JSON.stringify({
          name: "pool_12",
          location: "eastus",
          zone: "",
          platformFaultDomain: "1",
          resourceGroupName: "rg",
          subscriptionId: "sub",
          vmSize: "Standard_B2s",
          vmScaleSetName: "pool",
        }),
      ),
    },
    expected: {
      providerID: "azure:///subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/12",
      region: "eastus",
      zone: "1",
      instanceType: "Standard_B2s",
    },
  },
  {
    name: "Azure: a flexible scale-set VM is a plain VM",
    provider: "azure",
    documents: {
      compute: ok(JSON.stringify({ name: "flex-abc", location: "eastus", resourceGroupName: "rg", subscriptionId: "sub", vmScaleSetName: "flex" })),
    },
    expected: { providerID: "azure:///subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/flex-abc", region: "eastus" },
  },
  {
    name: "Azure: not JSON is not Azure",
    provider: "azure",
    documents: { compute: ok("instance-id: 1") },
    expected: { problem: "no compute.subscriptionId, resourceGroupName and name" },
  },
  {
    name: "GCE: project, zone and name; region from the zone; machine type's last element",
    provider: "gce",
    documents: {
      "project-id": ok("my-project", google),
      zone: ok("projects/123456/zones/europe-west3-b", google),
      name: ok("worker-7", google),
      "machine-type": ok("projects/123456/machineTypes/e2-standard-4", google),
    },
    expected: {
      providerID: "gce://my-project/europe-west3-b/worker-7",
      region: "europe-west3",
      zone: "europe-west3-b",
      instanceType: "e2-standard-4",
    },
  },
  {
    name: "GCE: the same answers without Google's response header are not GCE",
    provider: "gce",
    documents: { "project-id": ok("p"), zone: ok("zones/z-a"), name: ok("n"), "machine-type": ok("t") },
    expected: { problem: "answers without the Metadata-Flavor: Google header" },
  },
  {
    name: "OpenStack: uuid, sanitised availability zone, flavor from the EC2-compatible path",
    provider: "openstack",
    documents: {
      meta_data: ok(JSON.stringify({ uuid: "d8e02d56-2648-49a3-bf97-6be8f1204f38", availability_zone: "az 1", name: "w" })),
      "instance-type": ok("m1.small"),
    },
    expected: { providerID: "openstack:///d8e02d56-2648-49a3-bf97-6be8f1204f38", zone: "az-1", instanceType: "m1.small" },
  },
  {
    name: "OpenStack: no meta_data.json is not OpenStack",
    provider: "openstack",
    documents: { meta_data: missing, "instance-type": ok("m1.small") },
    expected: { problem: "no uuid in openstack/latest/meta_data.json" },
  },
];

describe("instance metadata per provider", () => {
  for (const c of cases) {
    test(c.name, () => {
      assert.deepEqual(PROVIDER_SPECS[c.provider].parse(c.documents), c.expected);
    });
  }

  test("every provider names the documents it parses", () => {
    for (const spec of Object.values(PROVIDER_SPECS)) {
      const documents = Object.fromEntries(Object.keys(spec.documents).map((name) => [name, missing]));
      assert.ok("problem" in spec.parse(documents), `${spec.name}: 404s everywhere is no answer`);
    }
  });
});
