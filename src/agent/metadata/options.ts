// From the metadata flags to what the agent needs: the lookup (counted in metrics) and the host's
// DMI product name, read once (world-readable in sysfs; a DaemonSet pod sees the host's /sys).
import { readFile } from "node:fs/promises";
import type { MetadataOptions } from "../agent.ts";
import type { MetadataFlags } from "../flags.ts";
import type { AgentMetrics } from "../metrics.ts";
import { InstanceMetadataSource } from "./client.ts";

const DMI_PRODUCT_NAME = "/sys/class/dmi/id/product_name";

/** undefined when the flags ask for no metadata at all (the agent then behaves as without them). */
export async function metadataOptions(
  flags: MetadataFlags,
  metrics: AgentMetrics,
  productNamePath = DMI_PRODUCT_NAME,
): Promise<MetadataOptions | undefined> {
  if (flags.mode === "none" && flags.rules.providerIDTemplate === "" && flags.rules.rules.length === 0) return undefined;
  const source = new InstanceMetadataSource(flags.mode, flags.timeoutMs, {
    onLookup: (lookup) => {
      const provider = lookup.status === "found" ? lookup.provider : flags.mode;
      metrics.metadataLookups.with({ provider, result: lookup.status }).inc();
    },
  });
  const productName = await readFile(productNamePath, "utf8").then(
    (text) => text.trim(),
    () => "", // no DMI (VMs without SMBIOS, non-x86): product rules simply do not match
  );
  return { source, rules: flags.rules, updateLabels: flags.updateLabels, productName };
}
