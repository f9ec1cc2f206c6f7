// From the metadata flags to what the agent needs: the lookup (counted in metrics) and the host's
// DMI system information, read once (world-readable in sysfs; DMI is not namespaced, so a pod sees the host's).
import { readFile } from "node:fs/promises";
import path from "node:path";
import type { MetadataOptions } from "../agent.ts";
import type { MetadataFlags } from "../flags.ts";
import type { AgentMetrics } from "../metrics.ts";
import { InstanceMetadataSource } from "./client.ts";
import { DMI_FIELDS, type DmiField } from "./rules.ts";

const DMI_DIR = "/sys/class/dmi/id";

/** undefined when the flags ask for no metadata at all (the agent then behaves as without them). */
export async function metadataOptions(
  flags: MetadataFlags,
  metrics: AgentMetrics,
  dmiDir = DMI_DIR,
): Promise<MetadataOptions | undefined> {
  const noRules = flags.rules.rules.length === 0 && flags.initRules.length === 0;
  if (flags.mode === "none" && flags.rules.providerIDTemplate === "" && noRules) return undefined;
  const source = new InstanceMetadataSource(flags.mode, flags.timeoutMs, {
    onLookup: (lookup) => {
      const provider = lookup.status === "found" ? lookup.provider : flags.mode;
      metrics.metadataLookups.with({ provider, result: lookup.status }).inc();
    },
  });
  const dmi = await readDmi(dmiDir);
  return { source, rules: flags.rules, updateLabels: flags.updateLabels, initRules: flags.initRules, dmi };
}

/** The DMI files rules may match; a file the host lacks (VMs without SMBIOS, non-x86) reads as "", matching no rule. */
export async function readDmi(dir: string): Promise<Record<DmiField, string>> {
  const values = await Promise.all(
    DMI_FIELDS.map((field) => readFile(path.join(dir, field), "utf8").then((text) => text.trim(), () => "")),
  );
  return Object.fromEntries(DMI_FIELDS.map((field, i) => [field, values[i]])) as Record<DmiField, string>;
}
