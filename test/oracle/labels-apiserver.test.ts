// The real kube-apiserver as a second oracle for label selectors: labelled ConfigMaps LISTed with generated
// selectors; the server refuses (400) what ours refuses and returns exactly the objects ours matches.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import type { ConfigMap, Namespace } from "kubernetes-types/core/v1.js";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { KubeClient } from "../../src/kube/client.ts";
import { loadClientConfig } from "../../src/kube/config.ts";
import { isApiError } from "../../src/kube/errors.ts";
import { matchesLabels, parseLabelSelector } from "../../src/kube/labelselector.ts";
import { Resource } from "../../src/kube/resource.ts";
import { commonKey, commonValue, selectorGrammar, selectorSoup, validKey, validValue } from "./selectors.ts";

const seed = Number(process.env.ORACLE_SEED ?? 20261124);
const NAMESPACE = "selectors";

let plane: ControlPlane;
let client: KubeClient;
let configMaps: Resource<ConfigMap>;
before(async () => {
  plane = await startControlPlane();
  const config = await loadClientConfig({ kubeconfig: plane.kubeconfigPath });
  client = new KubeClient(config, { component: "selector-oracle" });
  const namespaces = new Resource<Namespace>(client, { group: "", version: "v1", plural: "namespaces" });
  await namespaces.create({ metadata: { name: NAMESPACE } });
  const resource = { group: "", version: "v1", plural: "configmaps", namespace: NAMESPACE };
  configMaps = new Resource<ConfigMap>(client, resource);
});
after(async () => {
  client?.close();
  await plane?.stop();
});

test("the apiserver's LIST with a labelSelector refuses and selects what ours does", async () => {
  // Labels an object may carry (the server validates them), over the selectors' keys and values.
  const labelSet = fc.dictionary(
    fc.oneof({ weight: 4, arbitrary: commonKey }, validKey),
    fc.oneof({ weight: 4, arbitrary: commonValue }, validValue),
    { maxKeys: 4 },
  );
  const labelSets = fc.sample(labelSet, { seed, numRuns: 40 });
  const objects = labelSets.map((labels, i) => ({ name: `o${i}`, labels }));
  for (const { name, labels } of objects) await configMaps.create({ metadata: { name, labels } });

  // A NUL ends the selector for Go's lexer and ours refuses it; a URL carries it, so leave it out here.
  const text = fc.oneof({ weight: 3, arbitrary: selectorGrammar }, selectorSoup).filter((t) => !t.includes("\0"));
  const counts = { refused: 0, selectedSome: 0, selectedNone: 0 };
  for (const selector of fc.sample(text, { seed, numRuns: 400 })) {
    let ours: string[] | Error;
    try {
      const parsed = parseLabelSelector(selector);
      ours = objects.filter(({ labels }) => matchesLabels(parsed, labels)).map(({ name }) => name);
    } catch (err) {
      ours = err as Error;
    }
    const context = `selector ${JSON.stringify(selector)}`;
    try {
      const { items } = await configMaps.list({ labelSelector: selector });
      const server = items.map((item) => item.metadata?.name ?? "").sort();
      if (ours instanceof Error) assert.fail(`${context}: the server accepts it, ours refuses: ${ours.message}`);
      assert.deepEqual(server, ours.sort(), context);
      counts[server.length ? "selectedSome" : "selectedNone"]++;
    } catch (err) {
      if (!isApiError(err, "BadRequest")) throw err;
      counts.refused++;
      assert.ok(ours instanceof Error, `${context}: the server refuses it (${err.message}), ours accepts`);
    }
  }
  console.log("apiserver selector cases:", counts);
  assert.ok(counts.refused > 40 && counts.selectedSome > 40 && counts.selectedNone > 20, JSON.stringify(counts));
});
