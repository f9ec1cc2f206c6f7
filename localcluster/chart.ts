// The Helm chart's folder and the image reference it names: read by the image (image.ts, which the cluster
// imports) and by the project on the cluster (project.ts, which imports the cluster), so below both.
import { readFileSync } from "node:fs";
import path from "node:path";
import { parse } from "yaml";

export const CHART_DIR = path.resolve(import.meta.dirname, "../charts/local-ccm");

/** The reference `helm install charts/local-ccm` and deploy/ use: values.yaml's image.repository:appVersion. */
export function chartImageReference(): string {
  const chart = parse(readFileSync(path.join(CHART_DIR, "Chart.yaml"), "utf8")) as { appVersion: string };
  const values = parse(readFileSync(path.join(CHART_DIR, "values.yaml"), "utf8")) as {
    image: { repository: string; tag: string };
  };
  return `${values.image.repository}:${values.image.tag || chart.appVersion}`;
}
