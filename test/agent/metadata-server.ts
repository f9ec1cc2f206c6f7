// Instance metadata services for agent tests, run inside a node's network namespace at
// 169.254.169.254:80, each answering in its provider's documented format and enforcing its rules:
// AWS only with an IMDSv2 session token, Azure only with "Metadata: true" and an api-version, GCE only
// with "Metadata-Flavor: Google" (and saying so in its answers); unknown paths are 404. An "imposter"
// answers Hetzner's paths with a web page, as a captive portal would.
//
// A fault makes the service fail every request until SIGUSR1 ends it ("recovered"): "silent" accepts
// the connection and never answers, "dribble" sends its headers and then one byte every half second
// (no socket ever goes idle), "503" answers Service Unavailable at once.
//
// Run: node metadata-server.ts <personality>[,<personality>…] [fault]
// Prints "ready" once listening, then "<ms since start> <method> <path> <status or fault>" for each request.
import http from "node:http";

export const METADATA_IP = "169.254.169.254";

/** The instances the servers describe, and what each provider's CCM would write for them. */
export const INSTANCES = {
  hetzner: {
    documents: { "instance-id": "42001337", "availability-zone": "fsn1-dc14", region: "eu-central" },
    providerID: "hcloud://42001337",
    labels: { region: "fsn1", zone: "fsn1-dc14" },
  },
  aws: {
    documents: {
      "instance-id": "i-0abc123def4567890",
      "placement/availability-zone": "eu-central-1a",
      "placement/region": "eu-central-1",
      "instance-type": "m5.large",
    },
    providerID: "aws:///eu-central-1a/i-0abc123def4567890",
    labels: { region: "eu-central-1", zone: "eu-central-1a", instanceType: "m5.large" },
  },
  azure: {
    compute: {
      name: "worker-az",
      location: "westeurope",
      zone: "2",
      platformFaultDomain: "0",
      resourceGroupName: "K8s-RG",
      subscriptionId: "0D2C0F5E-1111-2222-3333-444455556666",
      vmSize: "Standard_D4s_v5",
      vmScaleSetName: "",
    },
    providerID:
      "azure:///subscriptions/0d2c0f5e-1111-2222-3333-444455556666/resourceGroups/k8s-rg/providers/Microsoft.Compute/virtualMachines/worker-az",
    labels: { region: "westeurope", zone: "westeurope-2", instanceType: "Standard_D4s_v5" },
  },
  gce: {
    documents: {
      "project/project-id": "my-project",
      "instance/zone": "projects/123456789/zones/europe-west3-b",
      "instance/name": "worker-gce",
      "instance/machine-type": "projects/123456789/machineTypes/e2-standard-4",
    },
    providerID: "gce://my-project/europe-west3-b/worker-gce",
    labels: { region: "europe-west3", zone: "europe-west3-b", instanceType: "e2-standard-4" },
  },
  openstack: {
    metaData: { uuid: "d8e02d56-2648-49a3-bf97-6be8f1204f38", availability_zone: "nova", name: "worker-os" },
    flavor: "m1.small",
    providerID: "openstack:///d8e02d56-2648-49a3-bf97-6be8f1204f38",
    labels: { zone: "nova", instanceType: "m1.small" },
  },
} as const;

export type Personality = keyof typeof INSTANCES | "imposter";

type Answer = { status: number; body: string; headers?: Record<string, string> };
type Handler = (req: http.IncomingMessage, url: URL) => Answer | undefined;

const text = (body: string, headers?: Record<string, string>): Answer => ({ status: 200, body, headers });
const refuse = (status: number, body: string): Answer => ({ status, body });
const AWS_TOKEN = "AQAEAFakeSessionToken==";

function leaf(prefix: string, url: URL, documents: Record<string, string>): Answer | undefined {
  if (!url.pathname.startsWith(prefix)) return undefined;
  const value = documents[url.pathname.slice(prefix.length)];
  return value === undefined ? undefined : text(value);
}

const HANDLERS: Record<Personality, Handler> = {
  hetzner: (req, url) => (req.method === "GET" ? leaf("/hetzner/v1/metadata/", url, INSTANCES.hetzner.documents) : undefined),
  aws: (req, url) => {
    if (url.pathname === "/latest/api/token") {
      if (req.method !== "PUT") return refuse(405, "Method Not Allowed");
      const ttl = Number(req.headers["x-aws-ec2-metadata-token-ttl-seconds"]);
      return ttl >= 1 && ttl <= 21600 ? text(AWS_TOKEN) : refuse(400, "Bad Request");
    }
    if (!url.pathname.startsWith("/latest/meta-data/")) return undefined;
    if (req.headers["x-aws-ec2-metadata-token"] !== AWS_TOKEN) return refuse(401, "Unauthorized"); // tokens required
    return leaf("/latest/meta-data/", url, INSTANCES.aws.documents);
  },
  azure: (req, url) => {
    if (url.pathname !== "/metadata/instance/compute") return undefined;
    if (req.headers.metadata !== "true" || req.headers["x-forwarded-for"]) return refuse(400, '{"error":"Bad request"}');
    if (!url.searchParams.get("api-version")) return refuse(400, '{"error":"Bad request. api-version was not specified"}');
    return text(JSON.stringify(INSTANCES.azure.compute), { "Content-Type": "application/json" });
  },
  gce: (req, url) => {
    if (!url.pathname.startsWith("/computeMetadata/v1/")) return undefined;
    if (req.headers["metadata-flavor"] !== "Google") return refuse(403, "Missing Metadata-Flavor:Google header.");
    const answer = leaf("/computeMetadata/v1/", url, INSTANCES.gce.documents);
    return answer && { ...answer, headers: { "Metadata-Flavor": "Google" } };
  },
  openstack: (req, url) => {
    if (req.method !== "GET") return undefined;
    if (url.pathname === "/openstack/latest/meta_data.json") return text(JSON.stringify(INSTANCES.openstack.metaData));
    return url.pathname === "/latest/meta-data/instance-type" ? text(INSTANCES.openstack.flavor) : undefined;
  },
  imposter: (_req, url) =>
    url.pathname.startsWith("/hetzner/") ? text("<html><body>Welcome to the hotel network</body></html>") : undefined,
};

export const FAULTS = ["silent", "dribble", "503"] as const;
export type Fault = (typeof FAULTS)[number];

const DRIBBLE_INTERVAL_MS = 500;

const FAILURES: Record<Fault, (res: http.ServerResponse) => void> = {
  silent: () => {},
  dribble: (res) => {
    res.writeHead(200, { "Content-Type": "text/plain" });
    const timer = setInterval(() => res.write("."), DRIBBLE_INTERVAL_MS);
    res.once("close", () => clearInterval(timer));
  },
  503: (res) => {
    res.writeHead(503, { "Content-Type": "text/plain" });
    res.end("Service Unavailable");
  },
};

function serve(personalities: Personality[], fault: Fault | undefined): http.Server {
  const started = performance.now();
  const record = (req: http.IncomingMessage, outcome: number | Fault) =>
    process.stdout.write(`${Math.round(performance.now() - started)} ${req.method} ${req.url} ${outcome}\n`);
  process.on("SIGUSR1", () => {
    fault = undefined;
    process.stdout.write("recovered\n");
  });
  return http.createServer((req, res) => {
    if (fault) {
      FAILURES[fault](res);
      return record(req, fault);
    }
    const url = new URL(req.url ?? "/", `http://${METADATA_IP}`);
    let answer: Answer | undefined;
    for (const personality of personalities) answer ??= HANDLERS[personality](req, url);
    answer ??= refuse(404, "Not Found");
    res.writeHead(answer.status, { "Content-Type": "text/plain", ...answer.headers });
    res.end(answer.body);
    record(req, answer.status);
  });
}

if (import.meta.main) {
  const personalities = (process.argv[2] ?? "").split(",") as Personality[];
  const unknown = personalities.find((p) => !(p in HANDLERS));
  if (unknown) throw new Error(`unknown personality ${unknown}`);
  const fault = process.argv[3] as Fault | undefined;
  if (fault !== undefined && !FAULTS.includes(fault)) throw new Error(`unknown fault ${fault}`);
  serve(personalities, fault).listen(80, METADATA_IP, () => process.stdout.write("ready\n"));
}
