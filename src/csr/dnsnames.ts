// DNS names a serving certificate must never carry (the API server's), and the optional pattern of extra names
// a node may carry besides its own (its name and Hostname / InternalDNS / ExternalDNS addresses).
//
// The extra-names pattern is a regular expression matched against the whole lower-case name, in which {node}
// stands for the requesting node's name, e.g. `{node}\.nodes\.example\.com` or `{node}\.(rack1|rack2)\.lan`.
// {node} is required: a pattern without it would give any node any matching name, including another node's real
// DNS name that the API does not know (the hole of DNS-bypass approvers). {node} must stand for whole labels
// (preceded by the start, `^` or `\.`; followed by `\.` unquantified, `$` or the end; never inside `[…]`), so
// the nodes a name could belong to under the pattern are among its runs of labels, and decide.ts refuses a name
// that the pattern would also give to another existing node (node "a" asking for `a.b.lan` when node "a.b"
// exists and the pattern is `{node}(\.b)?\.lan`).

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

/** Where {node} may stand: see the header. Scans escapes and character classes as the regex syntax does. */
function placeholderProblem(text: string): string | undefined {
  let found = 0;
  let inClass = false;
  let previous = ""; // the last token outside a class: one character or an escape
  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    if (char === "\\") {
      previous = text.slice(i, i + 2);
      i++;
    } else if (text.startsWith(PLACEHOLDER, i)) {
      if (inClass) return `${PLACEHOLDER} inside [...]`;
      const after = text.slice(i + PLACEHOLDER.length);
      const labelAfter = after === "" || after.startsWith("$") || /^\\\.(?![*+?{])/.test(after);
      if (!(i === 0 || previous === "^" || previous === "\\.") || !labelAfter)
        return `${PLACEHOLDER} must stand for whole labels: after the start, ^ or \\. and before \\., $ or the end`;
      found++;
      previous = PLACEHOLDER;
      i += PLACEHOLDER.length - 1;
    } else if (inClass) {
      if (char === "]") [inClass, previous] = [false, "]"];
    } else {
      if (char === "[") inClass = true;
      previous = char ?? "";
    }
  }
  return found ? undefined : `must contain ${PLACEHOLDER} (a name without it could be any node's)`;
}

const escapeRegExp = (text: string) => text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&");

/** The pattern for one node, anchored at both ends. */
function patternFor(pattern: DnsNamePattern, node: string): RegExp {
  const source = pattern.text.replaceAll(PLACEHOLDER, () => escapeRegExp(node.toLowerCase()));
  return new RegExp(`^(?:${source})$`, "u");
}

export function matchesPattern(pattern: DnsNamePattern, node: string, name: string): boolean {
  return patternFor(pattern, node).test(name);
}

/** The existing nodes other than `node` to which the pattern also gives `name` (each a run of its labels). */
export function otherPatternNodes(
  pattern: DnsNamePattern,
  node: string,
  name: string,
  exists: (candidate: string) => boolean,
): string[] {
  const labels = name.split(".");
  const candidates = new Set<string>();
  for (let start = 0; start < labels.length; start++)
    for (let end = start + 1; end <= labels.length; end++) candidates.add(labels.slice(start, end).join("."));
  return [...candidates].filter(
    (candidate) => candidate !== node && exists(candidate) && matchesPattern(pattern, candidate, name),
  );
}
