// The controllers node-lifecycle-controller hosts: one line each. Their order is the order of their flags in
// --help and the README, of their metrics, and of their start.
import { markdownTable } from "../cli/markdown.ts";
import { kubeletServingCsr } from "../csr/definition.ts";
import { nodeLifecycle } from "../lifecycle/definition.ts";
import { serviceLoadBalancer } from "../service/definition.ts";
import type { AnyController } from "./controller.ts";

export const CONTROLLERS: readonly AnyController[] = [nodeLifecycle, kubeletServingCsr, serviceLoadBalancer];

/** The README's table of controllers: name, whether --controllers=* runs it, what it does, where its flags are. */
export function controllersMarkdown(): string {
  const code = (text: string) => `\`${text}\``;
  return markdownTable(
    ["controller", "on by default", "what it does", "its flags"],
    CONTROLLERS.map(({ name, enabledByDefault, helmEnabled, summary, flags }) => [
      code(name),
      `${enabledByDefault ? "yes" : "no"}${helmEnabled ? ` (Helm ${code(helmEnabled)})` : ""}`,
      summary,
      flags.map((spec) => code(`--${spec.name}`)).join(", "),
    ]),
  );
}
