import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { type HostFacts, parseRule, type Rule, type RulesConfig, resolveMetadata, templateProblem } from "./rules.ts";

const facts: HostFacts = {
  nodeName: "fra-rack2-07",
  systemUUID: "4C4C4544-0042-3510-8052-B4C04F384E32",
  machineID: "0f3a6d9b2c1e4f5a8b7c6d5e4f3a2b1c",
  productName: "PowerEdge R650",
  dmi: {
    sys_vendor: "Dell Inc.",
    product_name: "PowerEdge R650",
    product_family: "PowerEdge",
    product_version: "",
    board_vendor: "Dell Inc.",
    board_name: "0Y2K8N",
    chassis_vendor: "Dell Inc.",
    bios_vendor: "Dell Inc.",
    bios_version: "1.6.5",
  },
  internalIPs: ["198.18.2.17"],
};

function rules(texts: Partial<Record<Rule["field"], string[]>>): Rule[] {
  return Object.entries(texts).flatMap(([field, list]) =>
    list.map((text) => {
      const rule = parseRule(field as Rule["field"], text);
      assert.ok(typeof rule !== "string", rule as string);
      return rule;
    }),
  );
}

const config = (partial: Partial<RulesConfig>): RulesConfig => ({ providerIDTemplate: "", rules: [], ...partial });

describe("bare-metal rules", () => {
  test("CIDR → zone, name regex with a group → region, product → instance type, template providerID", () => {
    const resolved = resolveMetadata(
      {},
      facts,
      config({
        providerIDTemplate: "local://{systemUUID}",
        rules: rules({
          zone: ["cidr:198.18.1.0/24=rack-1", "cidr:198.18.2.0/24=rack-2"],
          region: ["name:^([a-z]+)-=$1"],
          instanceType: ["product:^PowerEdge (R\\d+)$=dell-$1"],
        }),
      }),
    );
    assert.deepEqual(resolved.metadata, {
      providerID: "local://4C4C4544-0042-3510-8052-B4C04F384E32",
      zone: "rack-2",
      region: "fra",
      instanceType: "dell-R650",
    });
    assert.deepEqual(resolved.sources, { providerID: "template", zone: "rule", region: "rule", instanceType: "rule" });
    assert.deepEqual(resolved.notes, []);
  });

  test("dmi.<file> rules match that DMI file; a file the host lacks matches only an empty-matching pattern", () => {
    const resolved = resolveMetadata(
      {},
      facts,
      config({ rules: rules({ region: ["dmi.bios_version:^9=old", "dmi.sys_vendor:^(Dell)=$1"], zone: ["dmi.product_version:.=x"] }) }),
    );
    assert.deepEqual(resolved.metadata, { region: "Dell" });
  });

  test("the first matching rule wins; IPv6 InternalIPs match IPv6 CIDRs", () => {
    const resolved = resolveMetadata(
      {},
      { ...facts, internalIPs: ["fd00:198:18:2::7", "198.18.2.17"] },
      config({ rules: rules({ zone: ["cidr:fd00:198:18:2::/64=v6-rack", "cidr:198.18.2.0/24=v4-rack"] }) }),
    );
    assert.equal(resolved.metadata.zone, "v6-rack");
  });

  test("a node matching no rule gets no value and a reason naming its facts", () => {
    const resolved = resolveMetadata({}, facts, config({ rules: rules({ zone: ["cidr:198.18.9.0/24=rack-9"] }) }));
    assert.deepEqual(resolved.metadata, {});
    assert.deepEqual(resolved.notes, [
      'no zone rule matches node fra-rack2-07: InternalIPs 198.18.2.17, product name "PowerEdge R650", vendor "Dell Inc."',
    ]);
  });

  test("instance metadata wins; rules fill only what it did not say", () => {
    const resolved = resolveMetadata(
      { providerID: "openstack:///x", zone: "nova" },
      facts,
      config({ providerIDTemplate: "local://{nodeName}", rules: rules({ zone: ["name:.*=z"], region: ["name:.*=r"] }) }),
    );
    assert.deepEqual(resolved.metadata, { providerID: "openstack:///x", zone: "nova", region: "r" });
    assert.deepEqual(resolved.sources, { providerID: "instance-metadata", zone: "instance-metadata", region: "rule" });
  });

  test("a template fact the node does not report, or a rule value that is no label value, gives a reason", () => {
    const resolved = resolveMetadata(
      {},
      { ...facts, systemUUID: "" },
      config({ providerIDTemplate: "local://{systemUUID}", rules: rules({ region: ["name:^(.*)$=$1/x"] }) }),
    );
    assert.deepEqual(resolved.metadata, {});
    assert.deepEqual(resolved.notes, [
      "providerID template local://{systemUUID} needs {systemUUID}, which this node does not report",
      'region rule name:^(.*)$=$1/x gives "fra-rack2-07/x", which is not a label value',
    ]);
  });

  test("rule and template syntax errors say what is wrong", () => {
    assert.equal(parseRule("zone", "rack-1"), '"rack-1" is not <cidr|name|product|dmi.<file>>:<pattern>=<value>');
    assert.equal(parseRule("zone", "dmi.product_serial:.*=a"), '"dmi.product_serial:.*=a" is not <cidr|name|product|dmi.<file>>:<pattern>=<value>');
    assert.equal(parseRule("zone", "cidr:198.18.0.0/33=a"), '"198.18.0.0/33" in "cidr:198.18.0.0/33=a" is not a CIDR');
    assert.match(parseRule("zone", "name:([=a") as string, /is not a regular expression/);
    assert.equal(parseRule("zone", "name:x="), '"name:x=" gives an empty value');
    assert.equal(templateProblem("local://{uuid}"), "unknown placeholder {uuid}: use {nodeName}, {systemUUID}, {machineID}, {productName}");
    assert.equal(templateProblem("local://{nodeName}"), undefined);
  });

  test("property: every resolved label value is a valid label value, and rules never override the service", () => {
    const word = fc.stringMatching(/^[a-z0-9$().*^-]{1,12}$/);
    fc.assert(
      fc.property(word, word, fc.option(fc.constantFrom("nova", "eu-1a")), (pattern, value, serviceZone) => {
        const rule = parseRule("zone", `name:${pattern}=${value}`);
        if (typeof rule === "string") return;
        const service = serviceZone ? { zone: serviceZone } : {};
        const resolved = resolveMetadata(service, facts, config({ rules: [rule] }));
        if (serviceZone) assert.equal(resolved.metadata.zone, serviceZone);
        const zone = resolved.metadata.zone;
        if (zone !== undefined) assert.match(zone, /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$/);
      }),
    );
  });
});
