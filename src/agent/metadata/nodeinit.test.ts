import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Node } from "kubernetes-types/core/v1.js";
import { keyProblem, labelValueProblem } from "../../kube/labelselector.ts";
import { UNINITIALIZED_TAINT } from "../../kube/nodes.ts";
import { desiredNodeInit, describeItem, type InitKind, type InitRule, type InitFacts, parseInitRule, reservedKeyProblem, taintOf } from "./nodeinit.ts";
import { metadataPatch } from "./plan.ts";
import { parseRule } from "./rules.ts";

const facts: InitFacts = {
  nodeName: "gpu-fra-07",
  systemUUID: "",
  machineID: "",
  productName: "DGX A100",
  dmi: {
    sys_vendor: "NVIDIA",
    product_name: "DGX A100",
    product_family: "",
    product_version: "",
    board_vendor: "NVIDIA",
    board_name: "DGXA100",
    chassis_vendor: "",
    bios_vendor: "American Megatrends Inc.",
    bios_version: "1.25",
  },
  internalIPs: ["198.18.2.17"],
  metadata: { region: "eu-1", zone: "eu-1a" },
};

const uninitialised = (extra: Partial<Node> = {}): Node => ({
  metadata: { name: "gpu-fra-07", resourceVersion: "7", labels: { "kubernetes.io/hostname": "gpu-fra-07" } },
  spec: { taints: [{ key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" }] },
  ...extra,
});

function rule(kind: InitKind, text: string): InitRule {
  const parsed = parseInitRule(kind, text);
  assert.ok(typeof parsed !== "string", parsed as string);
  return parsed;
}

const summary = (node: Node, rules: InitRule[]) => {
  const plan = desiredNodeInit(node, facts, rules);
  return {
    labels: plan.labels.map((item) => `${describeItem(item)} (${item.rule.text})`),
    taints: plan.taints.map(describeItem),
    notes: plan.notes.map((note) => note.reason),
  };
};

describe("node init rules", () => {
  test("parse: the matcher, then key=value (taints :effect); a pattern may hold '='", () => {
    assert.deepEqual(
      { ...rule("label", "name:^a=b$=example.com/x=y"), pattern: undefined },
      { source: "name", text: "name:^a=b$=example.com/x=y", pattern: undefined, kind: "label", key: "example.com/x", value: "y" },
    );
    const taint = rule("taint", "dmi.product_name:^DGX=nvidia.com/gpu=:NoExecute");
    assert.deepEqual([taint.source, taint.key, taint.value, taint.effect], ["dmi.product_name", "nvidia.com/gpu", "", "NoExecute"]);
    const cidr = rule("label", "cidr:10.1.0.0/24=example.com/rack=");
    assert.deepEqual([cidr.source, cidr.key, cidr.value, cidr.cidr !== undefined], ["cidr", "example.com/rack", "", true]);
  });

  test("parse errors: one line naming the rule and the problem", () => {
    const cases: [InitKind, string, string][] = [
      ["label", "name:x=y", '"name:x=y" is not <cidr|name|product|dmi.<file>|region|zone|instance-type>:<pattern>=<key>=<value>'],
      ["taint", "name:x=k=v:NoWhere", '"name:x=k=v:NoWhere" is not <cidr|name|product|dmi.<file>|region|zone|instance-type>:<pattern>=<key>=<value>:<NoSchedule|PreferNoSchedule|NoExecute>'],
      ["label", "name:x=Bad Key=v", '"name:x=Bad Key=v": the name must be alphanumerics, \'-\', \'_\' or \'.\', starting and ending with an alphanumeric'],
      ["label", "name:x=example.com/k=-v", '"name:x=example.com/k=-v": a label value must be alphanumerics, \'-\', \'_\' or \'.\', starting and ending with an alphanumeric'],
      ["label", "cidr:10.0.0.0/33=k=v", '"10.0.0.0/33" in "cidr:10.0.0.0/33=k=v" is not a CIDR'],
      ["label", "name:x=node-role.kubernetes.io/control-plane=", '"name:x=node-role.kubernetes.io/control-plane=": node-role.kubernetes.io/control-plane would make the node a control-plane node'],
      ["label", "name:x=topology.kubernetes.io/zone=a", '"name:x=topology.kubernetes.io/zone=a": topology.kubernetes.io/zone is in the kubernetes.io namespace, Kubernetes\' own (except node-role.kubernetes.io/<role>)'],
      ["taint", "name:x=node.kubernetes.io/not-ready=:NoExecute", '"name:x=node.kubernetes.io/not-ready=:NoExecute": node.kubernetes.io/not-ready is in the kubernetes.io namespace, Kubernetes\' own'],
      ["taint", "name:x=node-role.kubernetes.io/gpu=:NoSchedule", '"name:x=node-role.kubernetes.io/gpu=:NoSchedule": node-role.kubernetes.io/gpu is in the kubernetes.io namespace, Kubernetes\' own'],
      ["label", "name:x=node-restriction.kubernetes.io/a=b", '"name:x=node-restriction.kubernetes.io/a=b": node-restriction.kubernetes.io/a is in node-restriction.kubernetes.io/, which nodes may never set on themselves'],
      ["label", "name:x=x.k8s.io/a=b", '"name:x=x.k8s.io/a=b": x.k8s.io/a is in the k8s.io namespace, Kubernetes\' own (except node-role.kubernetes.io/<role>)'],
    ];
    for (const [kind, text, expected] of cases) assert.equal(parseInitRule(kind, text), expected, text);
    // The metadata rules make the region, zone and instance type: they cannot match them.
    assert.match(parseRule("region", "zone:^eu=eu") as string, /is not <cidr\|name\|product\|dmi.<file>>/);
    assert.equal(typeof parseInitRule("label", "name:x=node-role.kubernetes.io/gpu="), "object");
    assert.equal(typeof parseInitRule("label", "name:x=example.kubernetes.io.example.com/a=b"), "object");
  });

  test("table: every matching rule adds its label or taint, the first per key (and effect) wins", () => {
    const rules = [
      rule("label", "cidr:198.18.2.0/24=example.com/rack=r2"),
      rule("label", "cidr:198.18.0.0/16=example.com/rack=any"),
      rule("label", "dmi.product_name:^(DGX) (\\w+)$=example.com/model=$1-$2"),
      rule("label", "name:^cpu-=node-role.kubernetes.io/cpu="),
      rule("label", "name:^gpu-=node-role.kubernetes.io/gpu="),
      rule("taint", "dmi.sys_vendor:^NVIDIA$=nvidia.com/gpu=present:NoSchedule"),
      rule("taint", "name:.=nvidia.com/gpu=other:NoSchedule"),
      rule("taint", "name:.=nvidia.com/gpu=other:NoExecute"),
      rule("taint", "cidr:10.0.0.0/8=example.com/far=:NoSchedule"),
      rule("label", "zone:^eu-(\\w+)$=example.com/zone-class=$1"),
      rule("label", "instance-type:.=example.com/typed=yes"),
    ];
    assert.deepEqual(summary(uninitialised(), rules), {
      labels: [
        "example.com/rack=r2 (cidr:198.18.2.0/24=example.com/rack=r2)",
        "example.com/model=DGX-A100 (dmi.product_name:^(DGX) (\\w+)$=example.com/model=$1-$2)",
        "node-role.kubernetes.io/gpu= (name:^gpu-=node-role.kubernetes.io/gpu=)",
        "example.com/zone-class=1a (zone:^eu-(\\w+)$=example.com/zone-class=$1)",
      ],
      taints: ["nvidia.com/gpu=present:NoSchedule", "nvidia.com/gpu=other:NoExecute"],
      notes: [],
    });
  });

  test("an initialised Node gets nothing, whatever the rules", () => {
    const node = uninitialised({ spec: { taints: [] } });
    assert.deepEqual(summary(node, [rule("label", "name:.=example.com/a=b"), rule("taint", "name:.=example.com/t=:NoSchedule")]), {
      labels: [],
      taints: [],
      notes: [],
    });
  });

  test("values someone else set are kept and reported; equal ones are not written again", () => {
    const node = uninitialised({
      metadata: { name: "gpu-fra-07", labels: { "example.com/rack": "r9", "example.com/same": "v" } },
      spec: {
        taints: [
          { key: UNINITIALIZED_TAINT, effect: "NoSchedule" },
          { key: "nvidia.com/gpu", value: "x", effect: "NoSchedule" },
          { key: "example.com/t", effect: "NoSchedule" },
        ],
      },
    });
    const rules = [
      rule("label", "name:.=example.com/rack=r2"),
      rule("label", "name:.=example.com/same=v"),
      rule("taint", "name:.=nvidia.com/gpu=present:NoSchedule"),
      rule("taint", "name:.=example.com/t=:NoSchedule"),
    ];
    assert.deepEqual(summary(node, rules), { labels: [], taints: [], notes: ["NodeInitLabelKept", "NodeInitTaintKept"] });
  });

  test("a group that makes an invalid value is reported and skipped", () => {
    const plan = desiredNodeInit(uninitialised(), facts, [rule("label", "dmi.product_name:^(.*)$=example.com/p=$1")]);
    assert.deepEqual(plan.labels, []);
    assert.deepEqual(plan.notes, [
      {
        reason: "NodeInitValueInvalid",
        message:
          'rule dmi.product_name:^(.*)$=example.com/p=$1 gives "DGX A100": a label value must be alphanumerics, ' +
          "'-', '_' or '.', starting and ending with an alphanumeric",
      },
    ]);
  });

  test("the patch appends taints after the ones read, so the uninitialized taint's index holds", () => {
    const node = uninitialised();
    const plan = desiredNodeInit(node, facts, [rule("label", "name:.=example.com/a=b"), rule("taint", "name:.=example.com/t=v:NoSchedule")]);
    const ops = metadataPatch(node, {
      labels: Object.fromEntries(plan.labels.map((item) => [item.key, item.value])),
      taints: plan.taints.map(taintOf),
      notes: [],
    });
    assert.deepEqual(ops, [
      { op: "add", path: "/metadata/labels/example.com~1a", value: "b" },
      { op: "add", path: "/spec/taints/-", value: { key: "example.com/t", value: "v", effect: "NoSchedule" } },
    ]);
  });

  test("property: parsed rules have valid keys outside the reserved namespaces; planned values are label values", () => {
    const keyPart = fc.stringMatching(/^[a-z0-9][-a-z0-9.]{0,20}[a-z0-9]$/);
    const key = fc.oneof(
      keyPart,
      fc.tuple(fc.constantFrom("example.com", "kubernetes.io", "node-role.kubernetes.io", "node-restriction.kubernetes.io", "a.k8s.io"), keyPart).map(([p, n]) => `${p}/${n}`),
    );
    const value = fc.stringMatching(/^[-A-Za-z0-9_.$]{0,12}$/);
    const pattern = fc.stringMatching(/^[a-z0-9().*^$ -]{1,10}$/);
    fc.assert(
      fc.property(fc.constantFrom<InitKind>("label", "taint"), pattern, key, value, (kind, p, k, v) => {
        const text = `name:${p}=${k}=${v}${kind === "taint" ? ":NoSchedule" : ""}`;
        const parsed = parseInitRule(kind, text);
        if (typeof parsed === "string") return;
        assert.equal(parsed.key, k);
        assert.equal(keyProblem(parsed.key), undefined);
        assert.equal(reservedKeyProblem(kind, parsed.key), undefined);
        assert.ok(!/(^|\.)(kubernetes\.io|k8s\.io)\//.test(k) || (kind === "label" && k.startsWith("node-role.kubernetes.io/")));
        for (const item of [...desiredNodeInit(uninitialised(), { ...facts, nodeName: `${p}${v}` }, [parsed]).labels])
          assert.equal(labelValueProblem(item.value), undefined);
      }),
    );
  });
});
