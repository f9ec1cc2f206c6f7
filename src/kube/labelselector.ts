// Kubernetes label selectors in their text form (`kubectl -l`, `--node-selector`), parsed and
// matched as k8s.io/apimachinery/pkg/labels does, plus the `key` / `key=value` lists that
// `--protected-labels` and `--protected-annotations` take, and the metav1.LabelSelector of a CRD's spec. Errors
// are one line naming the problem.
import type { LabelSelector as KubeLabelSelector } from "kubernetes-types/meta/v1.js";

export type Operator = "=" | "!=" | "in" | "notin" | "exists" | "!" | ">" | "<";

export interface Requirement {
  key: string;
  operator: Operator;
  /** One value for = != > <, one or more for in/notin, none for exists and "!". */
  values: string[];
}

export interface LabelSelector {
  /** The text it was parsed from, trimmed (for messages). */
  text: string;
  /** All must hold (comma = AND); none means "everything". */
  requirements: Requirement[];
}

const NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Why `key` is not a valid label/annotation key (Kubernetes qualified name), or undefined. */
export function keyProblem(key: string): string | undefined {
  const parts = key.split("/");
  if (parts.length > 2) return "a key has at most one '/'";
  const [prefix, name] = parts.length === 2 ? parts : [undefined, parts[0]];
  if (prefix !== undefined) {
    if (prefix === "") return "the prefix before '/' must not be empty";
    if (prefix.length > 253) return "the prefix before '/' must be at most 253 characters";
    if (!DNS_SUBDOMAIN.test(prefix)) return "the prefix before '/' must be a lowercase DNS subdomain";
  }
  if (!name) return "the name must not be empty";
  if (name.length > 63) return "the name must be at most 63 characters";
  if (!NAME.test(name))
    return "the name must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";
  return undefined;
}

/** Why `value` is not a valid label value, or undefined (empty is valid). */
export function labelValueProblem(value: string): string | undefined {
  if (value === "") return undefined;
  if (value.length > 63) return "a label value must be at most 63 characters";
  if (!NAME.test(value))
    return "a label value must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";
  return undefined;
}

// ---- lexer: the token set of apimachinery's selector lexer ----

type Token = { kind: "id"; text: string } | { kind: "op"; text: string } | { kind: "end"; text: "" };

const SPECIAL = new Set(["=", "!", "(", ")", ",", ">", "<"]);
const TWO_CHAR = new Set(["==", "!="]);
// Only these four separate tokens in Go's lexer: "a=b\v" is the value "b\v" (refused), not "b".
const WHITESPACE = new Set([" ", "\t", "\r", "\n"]);

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const char = text[i] as string;
    if (WHITESPACE.has(char)) {
      i++;
    } else if (SPECIAL.has(char)) {
      const pair = text.slice(i, i + 2);
      const op = TWO_CHAR.has(pair) ? pair : char;
      tokens.push({ kind: "op", text: op });
      i += op.length;
    } else {
      let end = i;
      while (end < text.length && !SPECIAL.has(text[end] as string) && !WHITESPACE.has(text[end] as string)) end++;
      tokens.push({ kind: "id", text: text.slice(i, end) });
      i = end;
    }
  }
  tokens.push({ kind: "end", text: "" });
  return tokens;
}

// ---- parser ----

// A Map, not an object literal: "a constructor b" must not find Object.prototype.constructor.
const OPERATORS = new Map<string, Operator>([
  ["=", "="],
  ["==", "="],
  ["!=", "!="],
  ["in", "in"],
  ["notin", "notin"],
  [">", ">"],
  ["<", "<"],
]);
const INT64 = /^[+-]?\d+$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

function toInt64(text: string): bigint | undefined {
  if (!INT64.test(text)) return undefined;
  const value = BigInt(text);
  return value < INT64_MIN || value > INT64_MAX ? undefined : value;
}

// Escaped like JSON, so a message stays one line whatever control characters the text holds.
const describe = (token: Token) =>
  token.kind === "end" ? "end of input" : `'${JSON.stringify(token.text).slice(1, -1)}'`;

class SelectorError extends Error {}

/** Parses a label selector; throws an Error with a one-line message naming the problem. */
export function parseLabelSelector(text: string): LabelSelector {
  try {
    // Go's lexer takes a NUL byte for the end of input and ignores what follows: refused rather than cut short.
    if (text.includes("\0")) throw new SelectorError(`a NUL character at offset ${text.indexOf("\0")}`);
    return { text: text.trim(), requirements: parseRequirements(tokenize(text)) };
  } catch (err) {
    if (!(err instanceof SelectorError)) throw err;
    throw new Error(`invalid label selector ${JSON.stringify(text)}: ${err.message}`, { cause: err });
  }
}

function parseRequirements(tokens: Token[]): Requirement[] {
  let at = 0;
  const peek = () => tokens[at] as Token;
  const next = () => tokens[at++] as Token;
  const fail = (expected: string): never => {
    throw new SelectorError(`found ${describe(peek())}, expected ${expected}`);
  };

  const parseKey = (): string => {
    if (peek().kind !== "id") fail("a key");
    const key = next().text;
    const problem = keyProblem(key);
    if (problem) throw new SelectorError(`invalid key ${JSON.stringify(key)}: ${problem}`);
    return key;
  };
  const checkValue = (value: string): string => {
    const problem = labelValueProblem(value);
    if (problem) throw new SelectorError(`invalid value ${JSON.stringify(value)}: ${problem}`);
    return value;
  };
  // Like apimachinery: empty items are allowed ("a in (x,)" holds "x" and "").
  const parseValueList = (): string[] => {
    if (peek().text !== "(") fail("'('");
    next();
    const values: string[] = [];
    for (;;) {
      values.push(checkValue(peek().kind === "id" ? next().text : ""));
      const token = next();
      if (token.text === ")") return values;
      if (token.text !== ",") {
        at--;
        fail("',' or ')'");
      }
    }
  };
  const parseRequirement = (): Requirement => {
    if (peek().text === "!") {
      next();
      return { key: parseKey(), operator: "!", values: [] };
    }
    const key = parseKey();
    if (peek().kind === "end" || peek().text === ",") return { key, operator: "exists", values: [] };
    const operator = OPERATORS.get(peek().text);
    if (!operator) return fail("an operator (=, ==, !=, in, notin, >, <), ',' or end of input");
    next();
    if (operator === "in" || operator === "notin") return { key, operator, values: parseValueList() };
    const value = peek().kind === "id" ? next().text : "";
    if ((operator === ">" || operator === "<") && toInt64(value) === undefined)
      throw new SelectorError(`the value after '${operator}' must be an integer, found ${JSON.stringify(value)}`);
    return { key, operator, values: [checkValue(value)] };
  };

  const requirements: Requirement[] = [];
  if (peek().kind === "end") return requirements;
  for (;;) {
    if (peek().kind !== "id" && peek().text !== "!") fail("a key or '!'");
    requirements.push(parseRequirement());
    const token = next();
    if (token.kind === "end") return requirements;
    if (token.text !== ",") {
      at--;
      fail("',' or end of input");
    }
  }
}

/** Whether labels satisfy every requirement; an empty selector matches everything. */
export function matchesLabels(selector: LabelSelector, labels: Record<string, string> | undefined): boolean {
  return selector.requirements.every((requirement) => matchesRequirement(requirement, labels ?? {}));
}

function matchesRequirement({ key, operator, values }: Requirement, labels: Record<string, string>): boolean {
  const value = Object.hasOwn(labels, key) ? labels[key] : undefined;
  switch (operator) {
    case "exists":
      return value !== undefined;
    case "!":
      return value === undefined;
    case "=":
    case "in":
      return value !== undefined && values.includes(value);
    case "!=":
    case "notin":
      return value === undefined || !values.includes(value);
    case ">":
    case "<": {
      const actual = value === undefined ? undefined : toInt64(value);
      const bound = toInt64(values[0] ?? "");
      if (actual === undefined || bound === undefined) return false;
      return operator === ">" ? actual > bound : actual < bound;
    }
  }
}

// ---- key / key=value lists (--protected-labels, --protected-annotations) ----

export interface KeyValueMatcher {
  key: string;
  /** Absent: the key being present is enough. */
  value?: string;
}

/**
 * Parses "" or a comma list of `key` / `key=value` (items trimmed, empty items ignored). Keys are
 * validated as Kubernetes keys; values as label values for labels, and not at all for
 * annotations (any string is a valid annotation value).
 */
export function parseKeyValueList(text: string, kind: "label" | "annotation" = "label"): KeyValueMatcher[] {
  const matchers: KeyValueMatcher[] = [];
  for (const item of text.split(",").map((part) => part.trim())) {
    if (item === "") continue;
    const equals = item.indexOf("=");
    const key = equals < 0 ? item : item.slice(0, equals).trim();
    const value = equals < 0 ? undefined : item.slice(equals + 1).trim();
    const problem =
      keyProblem(key) ?? (value !== undefined && kind === "label" ? labelValueProblem(value) : undefined);
    if (problem) throw new Error(`invalid ${kind} ${JSON.stringify(item)}: ${problem}`);
    matchers.push(value === undefined ? { key } : { key, value });
  }
  return matchers;
}

/** Whether the map has the key (and, when the matcher has one, exactly that value). */
export function matchesKeyValue(matcher: KeyValueMatcher, map: Record<string, string> | undefined): boolean {
  if (!map || !Object.hasOwn(map, matcher.key)) return false;
  return matcher.value === undefined || map[matcher.key] === matcher.value;
}

/** `key` or `key=value`, as written on the command line. */
export function formatKeyValue(matcher: KeyValueMatcher): string {
  return matcher.value === undefined ? matcher.key : `${matcher.key}=${matcher.value}`;
}

const SELECTOR_OPERATORS: Record<string, Operator> = { In: "in", NotIn: "notin", Exists: "exists", DoesNotExist: "!" };

/**
 * A metav1.LabelSelector (a CRD field, `field` in messages) as the text selectors' requirements, matched by the same
 * rules; a reason when it is bad.
 */
export function labelSelectorFrom(selector: KubeLabelSelector, field: string): LabelSelector | string {
  const requirements: Requirement[] = Object.entries(selector.matchLabels ?? {}).map(([key, value]) => ({
    key,
    operator: "=",
    values: [value],
  }));
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    const mapped = SELECTOR_OPERATORS[operator];
    if (!mapped) return `${field}: unknown operator ${JSON.stringify(operator)}`;
    requirements.push({ key, operator: mapped, values });
  }
  return { text: JSON.stringify(selector), requirements };
}
