// Reading what a program serves on /metrics (Prometheus text format), for tests, benchmarks and the demo.

/** The metrics at http://<address>/metrics, as series (name and labels, as printed) → value. */
export async function scrapeMetrics(address: string): Promise<Map<string, number>> {
  const res = await fetch(`http://${address}/metrics`);
  if (!res.ok) throw new Error(`GET http://${address}/metrics: HTTP ${res.status}`);
  const samples = (await res.text()).split("\n").filter((line) => line && !line.startsWith("#"));
  return new Map(
    samples.map((line) => {
      const space = line.lastIndexOf(" ");
      return [line.slice(0, space), Number(line.slice(space + 1))];
    }),
  );
}
