// Generators of label selectors and label sets shared by the oracle tests: few keys and values, so selectors and
// label sets meet, and the edges of labels.Parse (operators, empty values, whitespace, prefixed keys, invalid
// characters, the 63 and 253 length limits, integers for > and <).
import fc from "fast-check";


const name63 = "n".repeat(62) + "1";
const prefix253 = Array.from({ length: 4 }, () => "p".repeat(62)).join(".") + ".a"; // 4*63 - 1 + 2 = 253
export const validKey = fc.constantFrom(
  "a",
  "b",
  "in",
  "notin",
  "A.b_c-9",
  "x.y",
  "example.com/a",
  "node-role.kubernetes.io/worker",
  name63,
  `${prefix253}/a`,
);
const edgeKey = fc.constantFrom(
  "",
  "-a",
  "a-",
  "_a",
  "a.",
  `${name63}x`,
  `${prefix253}x/a`,
  "/a",
  "a/",
  "a/b/c",
  "Example.com/a",
  "exa_mple.com/a",
  "é",
  "constructor",
  "__proto__",
  "toString",
);
export const commonKey = fc.constantFrom("a", "b", "example.com/a");
const key = fc.oneof(
  { weight: 10, arbitrary: commonKey },
  { weight: 6, arbitrary: validKey },
  { weight: 2, arbitrary: edgeKey },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
);

export const validValue = fc.constantFrom(
  "",
  "x",
  "y",
  "in",
  "notin",
  "0",
  "1",
  "10",
  "007",
  "9223372036854775807",
  "9223372036854775808",
  "99999999999999999999",
  "X.y_z-1",
  "v".repeat(63),
);
const edgeValue = fc.constantFrom("-1", "+1", "-9223372036854775808", "v".repeat(64), "x.", "a/b", "1e3", "é");
export const commonValue = fc.constantFrom("x", "y", "1", "10");
const value = fc.oneof(
  { weight: 10, arbitrary: commonValue },
  { weight: 6, arbitrary: validValue },
  { weight: 2, arbitrary: edgeValue },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
);

// What separates tokens: nothing, the lexer's whitespace, and characters other readers take as whitespace.
const space = fc.oneof(
  { weight: 16, arbitrary: fc.constantFrom("", " ") },
  { weight: 2, arbitrary: fc.constantFrom("  ", "\t", "\n", "\r") },
  { weight: 1, arbitrary: fc.constantFrom("\v", "\f", "\u00a0", "\u2003", "\ufeff", "\0") },
);
const operator = fc.constantFrom("=", "==", "!=", ">", "<", "in", "notin", "!", "=!", "<=", "===");

const valueList = fc
  .array(fc.tuple(space, value, space), { maxLength: 4 })
  .map((items) => items.map(([s1, v, s2]) => `${s1}${v}${s2}`).join(","));

// Mostly well-formed, with a share of broken brackets, operators and separators.
const often = <T>(usual: T, ...rare: T[]) =>
  fc.oneof({ weight: 3 * rare.length, arbitrary: fc.constant(usual) }, fc.constantFrom(...rare));
const setOperator = fc.constantFrom(" in ", " notin ", "\tin\t", "in(", " in", "in ");
const requirement = fc.oneof(
  { weight: 2, arbitrary: fc.tuple(key, space).map(([k, s]) => `${k}${s}`) },
  { weight: 2, arbitrary: fc.tuple(space, key).map(([s, k]) => `!${s}${k}`) },
  {
    weight: 4,
    arbitrary: fc
      .tuple(key, space, fc.constantFrom("=", "==", "!=", ">", "<"), space, value)
      .map((parts) => parts.join("")),
  },
  {
    weight: 4,
    arbitrary: fc
      .tuple(key, setOperator, often("(", "", "(("), valueList, often(")", "", "))", ",)"))
      .map((parts) => parts.join("")),
  },
  { weight: 1, arbitrary: fc.tuple(key, space, operator, space, value).map((parts) => parts.join("")) },
);

/** Selectors from the grammar of labels.Parse, with a share of broken brackets, operators and separators. */
export const selectorGrammar = fc
  .tuple(fc.array(fc.tuple(space, requirement, space), { maxLength: 4 }), often(",", ",,", ", ", " "))
  .map(([requirements, separator]) => requirements.map((parts) => parts.join("")).join(separator));

const soupToken = fc.oneof(key, value, operator, fc.constantFrom("(", ")", ",", " ", "!"));
const soup = fc.array(soupToken, { maxLength: 8 }).map((tokens) => tokens.join(""));
const randomText = fc.string({
  unit: fc.oneof(fc.constantFrom(..."ab1=!(),<> \t-_./"), fc.string({ minLength: 1, maxLength: 1 })),
  maxLength: 24,
});

/** Label sets over the selectors' few keys and values, with edge keys and values that no object may carry. */
export const labelSet = fc.dictionary(
  fc.oneof({ weight: 6, arbitrary: commonKey }, validKey, edgeKey),
  fc.oneof({ weight: 6, arbitrary: commonValue }, validValue, edgeValue),
  { maxKeys: 4 },
);
export const labelSets = fc.array(labelSet, { minLength: 1, maxLength: 6 });

/** Token soups and random text around the selector alphabet. */
export const selectorSoup = fc.oneof(soup, randomText);
