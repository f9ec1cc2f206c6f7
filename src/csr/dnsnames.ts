// DNS names a serving certificate must never carry (the API server's), and the optional pattern of extra names
// a node may carry besides its own (its name and Hostname / InternalDNS / ExternalDNS addresses).
//
// The extra-names pattern is a regular expression matched against the whole lower-case name, in which {node}
// stands for the requesting node's name, e.g. `{node}\.nodes\.example\.com` or `(bmc\.)?{node}\.lan`.
// {node} is required: a pattern without it would give any node any matching name, including another node's real
// DNS name that the API does not know (the hole of DNS-bypass approvers). A name is given to a node only when
// the pattern gives it to no other: decide.ts refuses it when the pattern also matches it for another existing
// node (node "a" asking for `a.b.lan` when node "a.b" exists and the pattern is `{node}\.(b\.)?lan`), or for
// every node (`^{node}$|^intranet$` gives `intranet` to all). Since {node} is replaced by the node's name as a
// literal, the pattern can match a name for node N only if N occurs in the name, or else for every node alike;
// so checking the nodes whose names occur in it, and one name that occurs nowhere, is complete. For that, {node}
// may not stand inside [...], where it would be a set of characters rather than the name.

const BUILTIN_API_SERVER_NAMES = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"];
const PLACEHOLDER = "{node}";

/** The kubernetes Service's names in any cluster domain, and the configured names (lower case). */
export function isApiServerName(name: string, configured: readonly string[]): boolean {
  return (
    BUILTIN_API_SERVER_NAMES.includes(name) ||
    name.startsWith("kubernetes.default.svc.") ||
    configured.some((other) => other.toLowerCase() === name)
  );
}

export interface DnsNamePattern {
  /** As given (the flag's value), for messages. */
  text: string;
}

/** Checks a pattern's text; throws a one-line Error naming the problem (a flag check). */
export function parseDnsNamePattern(text: string): DnsNamePattern {
  const problem = placeholderProblem(text);
  if (problem) throw new Error(`DNS name pattern ${text}: ${problem}`);
  try {
    patternFor({ text }, "node");
  } catch (error) {
    throw new Error(`DNS name pattern ${text}: ${(error as Error).message}`, { cause: error });
  }
  return { text };
}

/** {node} present, never escaped nor inside a character class (scanning escapes as the regex syntax does). */
function placeholderProblem(text: string): string | undefined {
  let found = false;
  let inClass = false;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "\\") {
      if (text.startsWith(PLACEHOLDER, i + 1)) return `\\${PLACEHOLDER} is ambiguous`;
      i++;
    } else if (text.startsWith(PLACEHOLDER, i)) {
      if (inClass) return `${PLACEHOLDER} inside [...]`;
      found = true;
    } else if (text[i] === "[") inClass = true;
    else if (text[i] === "]") inClass = false;
  }
  return found ? undefined : `must contain ${PLACEHOLDER} (a name without it could be any node's)`;
}

const escapeRegExp = (text: string) => text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&");

/** The pattern for one node, anchored at both ends. */
function patternFor(pattern: DnsNamePattern, node: string): RegExp {
  // A group, so that a quantifier after {node} applies to the whole name, never to its last character.
  const source = pattern.text.replaceAll(PLACEHOLDER, () => `(?:${escapeRegExp(node.toLowerCase())})`);
  return new RegExp(`^(?:${source})$`, "u");
}

export function matchesPattern(pattern: DnsNamePattern, node: string, name: string): boolean {
  return patternFor(pattern, node).test(name);
}

/** Occurs in no DNS SAN (they are ASCII: request.ts): the pattern matches a name for it only without {node}. */
const NOBODY = "\u{10ffff}";

/**
 * Another node to which the pattern also gives `name`: NOBODY when the pattern gives it to every node alike, else
 * the first of `nodes` other than `node` that occurs in the name and for which the pattern matches it.
 */
export function otherPatternNode(
  pattern: DnsNamePattern,
  node: string,
  name: string,
  nodes: Iterable<string>,
): string | undefined {
  if (matchesPattern(pattern, NOBODY, name)) return NOBODY;
  for (const other of nodes)
    if (other !== node && name.includes(other.toLowerCase()) && matchesPattern(pattern, other, name)) return other;
  return undefined;
}

export const isEveryNode = (other: string) => other === NOBODY;
