// node-lifecycle-controller's Prometheus metrics: the program's part, leadership (one lease for all its
// controllers), then each registered controller's under its subsystem (program.ts and docs/reference.md use this).
import { createProgramMetrics } from "../cli/metrics.ts";
import { PROGRAM } from "./flags.ts";
import { CONTROLLERS } from "./registry.ts";

/** Every controller's metric names start so: node_lifecycle_controller_ + its subsystem. */
export const METRICS_PREFIX = `${PROGRAM.replaceAll("-", "_")}_`;

/**
 * Every registered controller's metrics, whether it runs or not: /metrics and docs/reference.md list the same names.
 * `controllers` maps each name to what its createMetrics returned.
 */
export function createMetrics() {
  const program = createProgramMetrics(PROGRAM);
  return {
    ...program,
    leader: program.registry.gauge({
      name: `${METRICS_PREFIX}leader`,
      help: "1 while this replica leads (and its controllers may act), else 0.",
    }),
    controllers: new Map(
      CONTROLLERS.map((controller) => [
        controller.name,
        controller.createMetrics(program.registry, METRICS_PREFIX + controller.metricsSubsystem),
      ]),
    ),
  };
}
