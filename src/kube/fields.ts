// The fields of an object a consumer keeps, written as paths (e.g. ["status", "addresses", EACH, "address"]), so
// that several consumers of one watch can be served by one cache: their paths are unioned and compiled into
// one transform, and what the union keeps contains what each consumer's own paths keep. A path that ends on
// an object keeps it whole (labels: selectors may name any key); a map key is a plain segment (one annotation).

/** In a path, a step into the elements of an array: all of them, or those whose fields equal `where`. */
export interface Elements {
  readonly where?: Readonly<Record<string, string>>;
}

export type Segment = string | Elements;
export type FieldPath = readonly Segment[];

/** Every element of an array. */
export const EACH: Elements = {};

/** What to keep below one point of an object: all of it, or some properties and some array elements. */
interface Trie {
  whole: boolean;
  props: Map<string, Trie>;
  elements: { where: Readonly<Record<string, string>> | undefined; trie: Trie }[];
}

const emptyTrie = (): Trie => ({ whole: false, props: new Map(), elements: [] });

function insert(trie: Trie, path: FieldPath): void {
  if (trie.whole) return;
  const [head, ...rest] = path;
  if (head === undefined) {
    Object.assign(trie, emptyTrie(), { whole: true });
    return;
  }
  let next: Trie | undefined;
  if (typeof head === "string") {
    next = trie.props.get(head) ?? emptyTrie();
    trie.props.set(head, next);
  } else {
    const key = whereKey(head.where);
    next = trie.elements.find((entry) => whereKey(entry.where) === key)?.trie;
    if (!next) {
      next = emptyTrie();
      trie.elements.push({ where: head.where, trie: next });
      // The fields a filter reads are kept, so that it finds the same elements in the cache.
      for (const field of Object.keys(head.where ?? {})) insert(next, [field]);
    }
  }
  insert(next, rest);
}

const whereKey = (where: Elements["where"]) => JSON.stringify(Object.entries(where ?? {}).sort());

function matches(item: unknown, where: Elements["where"]): boolean {
  if (!where) return true;
  if (typeof item !== "object" || item === null) return false;
  return Object.entries(where).every(([key, value]) => (item as Record<string, unknown>)[key] === value);
}

/** The union of the tries of every element filter `item` matches (usually one). */
function elementTrie(trie: Trie, item: unknown): Trie | undefined {
  const matching = trie.elements.filter((entry) => matches(item, entry.where));
  if (matching.length <= 1) return matching[0]?.trie;
  const union = emptyTrie();
  for (const { trie: each } of matching) mergeInto(union, each);
  return union;
}

function mergeInto(target: Trie, source: Trie): void {
  if (target.whole) return;
  if (source.whole) {
    Object.assign(target, emptyTrie(), { whole: true });
    return;
  }
  for (const [key, child] of source.props) {
    const existing = target.props.get(key) ?? emptyTrie();
    target.props.set(key, existing);
    mergeInto(existing, child);
  }
  for (const { where, trie } of source.elements) {
    const existing = target.elements.find((entry) => whereKey(entry.where) === whereKey(where));
    if (existing) mergeInto(existing.trie, trie);
    else target.elements.push({ where, trie: structuredClone(trie) });
  }
}

function project(value: unknown, trie: Trie): unknown {
  if (trie.whole || value === undefined || value === null) return value;
  if (Array.isArray(value)) {
    if (trie.elements.length === 0) return undefined;
    return value.flatMap((item) => {
      const each = elementTrie(trie, item);
      const kept = each && project(item, each);
      return kept === undefined ? [] : [kept];
    });
  }
  if (typeof value !== "object" || trie.props.size === 0) return undefined;
  const out: Record<string, unknown> = {};
  for (const [key, child] of trie.props) {
    const kept = project((value as Record<string, unknown>)[key], child);
    if (kept !== undefined) out[key] = kept;
  }
  return out;
}

/** One transform keeping every path of `paths` (which may come from several consumers), and nothing else. */
export function projection<T>(paths: readonly FieldPath[]): (obj: T) => T {
  const root = emptyTrie();
  for (const path of paths) insert(root, path);
  return (obj) => (project(obj, root) ?? {}) as T;
}

/** The fields every cached object keeps, whatever its consumers ask: the informer keys and dedupes by them. */
export const IDENTITY_FIELDS: readonly FieldPath[] = [
  ["metadata", "name"],
  ["metadata", "namespace"],
  ["metadata", "resourceVersion"],
];

/** What a cache of one consumer's watch holds of an object: its own transform, or its fields and the identity ones. */
export function keepTransform<T>(keep: readonly FieldPath[]): (obj: T) => T;
export function keepTransform<T>(keep: readonly FieldPath[] | ((obj: T) => T | undefined)): (obj: T) => T | undefined;
export function keepTransform<T>(keep: readonly FieldPath[] | ((obj: T) => T | undefined)): (obj: T) => T | undefined {
  return typeof keep === "function" ? keep : projection<T>([...IDENTITY_FIELDS, ...keep]);
}
