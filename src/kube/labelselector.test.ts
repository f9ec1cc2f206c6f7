import assert from "node:assert/strict";
import { test } from "node:test";
import {
  formatKeyValue,
  keyProblem,
  labelValueProblem,
  matchesKeyValue,
  matchesLabels,
  parseKeyValueList,
  parseLabelSelector,
} from "./labelselector.ts";

test("parses every operator into requirements", () => {
  const cases: [string, unknown][] = [
    ["", []],
    ["   ", []],
    ["a=b", [{ key: "a", operator: "=", values: ["b"] }]],
    ["a==b", [{ key: "a", operator: "=", values: ["b"] }]],
    ["a!=b", [{ key: "a", operator: "!=", values: ["b"] }]],
    ["a=", [{ key: "a", operator: "=", values: [""] }]],
    ["a in (x, y)", [{ key: "a", operator: "in", values: ["x", "y"] }]],
    ["a notin (x)", [{ key: "a", operator: "notin", values: ["x"] }]],
    ["a in ()", [{ key: "a", operator: "in", values: [""] }]],
    ["a in (x,)", [{ key: "a", operator: "in", values: ["x", ""] }]],
    ["a", [{ key: "a", operator: "exists", values: [] }]],
    ["!a", [{ key: "a", operator: "!", values: [] }]],
    ["a>5", [{ key: "a", operator: ">", values: ["5"] }]],
    ["a<5", [{ key: "a", operator: "<", values: ["5"] }]],
    ["in=notin", [{ key: "in", operator: "=", values: ["notin"] }]],
    [
      " node-role.kubernetes.io/worker , !example.com/spot,zone in (a,b) ",
      [
        { key: "node-role.kubernetes.io/worker", operator: "exists", values: [] },
        { key: "example.com/spot", operator: "!", values: [] },
        { key: "zone", operator: "in", values: ["a", "b"] },
      ],
    ],
  ];
  for (const [text, requirements] of cases)
    assert.deepEqual(parseLabelSelector(text).requirements, requirements, text);
  assert.equal(parseLabelSelector("  a=b ").text, "a=b");
});

test("rejects malformed selectors with a one-line message naming the problem", () => {
  const cases: [string, RegExp][] = [
    ["a=b,", /found end of input, expected a key or '!'/],
    [",a", /found ',', expected a key or '!'/],
    ["a b", /found 'b', expected an operator/],
    ["a=b=c", /found '=', expected ',' or end of input/],
    ["a in x", /found 'x', expected '\('/],
    ["a in (x", /found end of input, expected ',' or '\)'/],
    ["a in (x y)", /found 'y', expected ',' or '\)'/],
    ["!a=b", /found '=', expected ',' or end of input/],
    ["!", /found end of input, expected a key/],
    ["a>b", /value after '>' must be an integer, found "b"/],
    ["a<", /value after '<' must be an integer, found ""/],
    ["a>99999999999999999999", /must be an integer/],
    ["a<-5", /invalid value "-5": a label value must be/], // as in Kubernetes: still a label value
    ["Bad Key=1", /found 'Key', expected an operator/],
    ["-a=b", /invalid key "-a": the name must be alphanumerics/],
    ["a/b/c=d", /invalid key "a\/b\/c": a key has at most one '\/'/],
    ["/a=b", /invalid key "\/a": the prefix before '\/' must not be empty/],
    ["Example.com/a=b", /prefix before '\/' must be a lowercase DNS subdomain/],
    [`${"k".repeat(64)}=b`, /the name must be at most 63 characters/],
    ["a=-b", /invalid value "-b": a label value must be alphanumerics/],
    [`a=${"v".repeat(64)}`, /invalid value "v{64}": a label value must be at most 63 characters/],
    ["a in (x,-y)", /invalid value "-y"/],
  ];
  for (const [text, message] of cases) {
    assert.throws(
      () => parseLabelSelector(text),
      (err: Error) => {
        assert.match(err.message, message, text);
        assert.ok(err.message.startsWith(`invalid label selector ${JSON.stringify(text)}: `), err.message);
        assert.doesNotMatch(err.message, /\n/);
        return true;
      },
      text,
    );
  }
});

test("matches labels as Kubernetes does", () => {
  const labels = { a: "x", n: "10", empty: "" };
  const cases: [string, Record<string, string> | undefined, boolean][] = [
    ["", labels, true],
    ["", undefined, true],
    ["a=x", labels, true],
    ["a=y", labels, false],
    ["b=x", labels, false],
    ["empty=", labels, true],
    ["a!=y", labels, true],
    ["a!=x", labels, false],
    ["b!=x", labels, true],
    ["a in (y,x)", labels, true],
    ["a in (y)", labels, false],
    ["b in (x)", labels, false],
    ["a notin (y)", labels, true],
    ["a notin (x)", labels, false],
    ["b notin (x)", labels, true],
    ["a", labels, true],
    ["b", labels, false],
    ["a", undefined, false],
    ["!a", labels, false],
    ["!b", labels, true],
    ["!b", undefined, true],
    ["n>9", labels, true],
    ["n>10", labels, false],
    ["n<11", labels, true],
    ["n<10", labels, false],
    ["a>1", labels, false], // not an integer
    ["b<1", labels, false], // absent
    ["a=x,n>5", labels, true],
    ["a=x,n>50", labels, false],
    ["toString", labels, false], // no prototype keys
  ];
  for (const [text, input, expected] of cases)
    assert.equal(
      matchesLabels(parseLabelSelector(text), input),
      expected,
      `${text} on ${JSON.stringify(input)}`,
    );
});

test("key and value validation follows Kubernetes' qualified names and label values", () => {
  for (const key of ["a", "A.b_c-d", "example.com/x", `${"p".repeat(253)}/n`, "k".repeat(63)])
    assert.equal(keyProblem(key), undefined, key);
  for (const key of ["", "a/", "a_b.com/x", `${"p".repeat(254)}/n`, "a b", "a.", "_a"])
    assert.notEqual(keyProblem(key), undefined, key);
  for (const value of ["", "x", "X.y_z-1", "v".repeat(63)]) assert.equal(labelValueProblem(value), undefined);
  for (const value of ["v".repeat(64), "a b", "-x", "x.", "a/b"])
    assert.notEqual(labelValueProblem(value), undefined);
});

test("key/value lists: empty, keys, key=value, whitespace and empty items", () => {
  assert.deepEqual(parseKeyValueList(""), []);
  assert.deepEqual(parseKeyValueList(" , "), []);
  assert.deepEqual(parseKeyValueList("keep, example.com/pin=yes ,tier="), [
    { key: "keep" },
    { key: "example.com/pin", value: "yes" },
    { key: "tier", value: "" },
  ]);
  assert.deepEqual(parseKeyValueList("note=any text: it is free/form!", "annotation"), [
    { key: "note", value: "any text: it is free/form!" },
  ]);
});

test("key/value lists: invalid keys and label values are one-line errors naming the item", () => {
  const cases: [string, "label" | "annotation", RegExp][] = [
    ["ok,Bad Key", "label", /^invalid label "Bad Key": the name must be/],
    ["=x", "label", /^invalid label "=x": the name must not be empty/],
    ["a=b c", "label", /^invalid label "a=b c": a label value must be/],
    ["a/b/c", "annotation", /^invalid annotation "a\/b\/c": a key has at most one '\/'/],
  ];
  for (const [text, kind, message] of cases)
    assert.throws(() => parseKeyValueList(text, kind), { message }, text);
});

test("key/value matchers: key present, or key with exactly that value", () => {
  const [keyOnly, withValue, emptyValue] = parseKeyValueList("keep,pin=yes,blank=");
  assert.ok(keyOnly && withValue && emptyValue);
  assert.equal(matchesKeyValue(keyOnly, { keep: "" }), true);
  assert.equal(matchesKeyValue(keyOnly, { other: "keep" }), false);
  assert.equal(matchesKeyValue(keyOnly, undefined), false);
  assert.equal(matchesKeyValue(withValue, { pin: "yes" }), true);
  assert.equal(matchesKeyValue(withValue, { pin: "no" }), false);
  assert.equal(matchesKeyValue(emptyValue, { blank: "" }), true);
  assert.equal(matchesKeyValue(emptyValue, { blank: "x" }), false);
  assert.equal(matchesKeyValue({ key: "constructor" }, {}), false);
  assert.deepEqual([keyOnly, withValue, emptyValue].map(formatKeyValue), ["keep", "pin=yes", "blank="]);
});

// Each case is a disagreement the Go oracle (test/oracle/labels.test.ts) found: Go's reading wins.
test("as apimachinery reads them: only space, tab, CR and LF separate tokens; no prototype operators; no NUL", () => {
  const accepted: [string, unknown][] = [
    ["a=b\t,\r\nc", [{ key: "a", operator: "=", values: ["b"] }, { key: "c", operator: "exists", values: [] }]],
    ["\n a \t", [{ key: "a", operator: "exists", values: [] }]],
  ];
  for (const [text, requirements] of accepted)
    assert.deepEqual(parseLabelSelector(text).requirements, requirements, JSON.stringify(text));
  const refused: [string, RegExp][] = [
    ["\v", /invalid key "\\u000b"/], // Go: the key "\v", not an empty selector that selects every node
    ["a=b\f", /invalid value "b\\f"/],
    ["a\u00a0=b", /invalid key "a\u00a0"/],
    ["\ufeffa", /invalid key "\ufeffa"/],
    ["notin constructor", /found 'constructor', expected an operator/],
    ["a toString b", /found 'toString', expected an operator/],
    ["\0a=b", /a NUL character at offset 0/], // Go reads the empty selector, which selects every node
    ["a=b\0,c", /a NUL character at offset 3/],
  ];
  for (const [text, message] of refused)
    assert.throws(() => parseLabelSelector(text), { message }, JSON.stringify(text));
});
