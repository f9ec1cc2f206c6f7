// Once the node is done, the agent unmaps the pages of the runtime's binary that start-up touched (native/memory:
// madvise MADV_DONTNEED over its read-only file mappings). Node 24 maps ~40 MiB of its 120 MB binary while it
// starts; at rest the agent uses a fraction of that, and the rest would stay in its RSS and in the pod's working
// set. The pages it touches again fault back in.
import { createRequire } from "node:module";
import type { Logger } from "../cli/log.ts";

interface Addon {
  /** Bytes of file mappings unmapped. */
  releaseFilePages(): number;
}

/**
 * Called once, when the node is first done (ready); the bytes of mappings unmapped, or undefined when it failed
 * (which costs memory, nothing else).
 */
export function releaseStartupPages(log: Logger): number | undefined {
  try {
    const addon = createRequire(import.meta.url)("local-ccm-memory") as Addon;
    const mapped = addon.releaseFilePages();
    log.info("start-up pages released", { unmappedMiB: Math.round(mapped / 2 ** 20) });
    return mapped;
  } catch (err) {
    log.warn("start-up pages not released: the agent's memory stays higher at rest", { err });
    return undefined;
  }
}
