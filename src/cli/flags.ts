// Command-line flags in Go/pflag syntax. One table per program is the single source for parsing,
// --help, the docs' flag tables and the Helm values names, so they cannot drift apart.
import { parseDuration } from "./duration.ts";
import { markdownTable } from "./markdown.ts";

export type FlagType = "string" | "bool" | "int" | "float" | "duration" | "list";

/** What a flag of each type parses to. Durations are milliseconds; lists are comma-separated. */
export interface FlagValueTypes {
  string: string;
  bool: boolean;
  int: number;
  float: number;
  duration: number;
  list: string[];
}

export interface FlagSpec<N extends string = string, T extends FlagType = FlagType> {
  /** Without dashes: "node-name". */
  readonly name: N;
  readonly type: T;
  /** Written as a user would type it ("10s", "true", "8.8.8.8") and parsed like user input. */
  readonly default: string;
  /** Environment variable read when the flag is not on the command line (empty counts as unset). */
  readonly env?: string;
  readonly help: string;
  /** Helm values path that sets this flag, e.g. "ipDetection.externalIPTarget". */
  readonly helm?: string;
  /** An empty value (after flag, env and default) is an error. */
  readonly required?: boolean;
  /**
   * Durations: the longest accepted, in ms. Default: Node's longest timer (about 596h), for durations that are
   * waited on; a duration that is only compared or passed on may allow more.
   */
  readonly maxMs?: number;
  /** Checks the parsed value; returns what is wrong, or undefined. */
  validate?(value: FlagValueTypes[T]): string | undefined;
}

/** Identity that keeps the flag's name and type as literal types, so parseFlags can type its result. */
export function flag<const N extends string, T extends FlagType>(spec: FlagSpec<N, T>): FlagSpec<N, T> {
  return spec;
}

export type FlagValues<T extends readonly FlagSpec[]> = {
  -readonly [S in T[number] as S["name"]]: FlagValueTypes[S["type"]];
};

export interface ParsedFlags<T extends readonly FlagSpec[]> {
  values: FlagValues<T>;
  /** Flags the user set, on the command line or through their env var (pflag's "Changed"). */
  given: ReadonlySet<T[number]["name"]>;
}

/** Bad command-line input; the CLI prints its one-line message and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** -h/--help was given; the CLI prints usage(program, table) and exits 0. */
export class HelpRequested extends Error {
  override name = "HelpRequested";
  readonly table: readonly FlagSpec[];
  constructor(table: readonly FlagSpec[]) {
    super("help requested");
    this.table = table;
  }
}

/** --version was given; the CLI prints versionText(program) and exits 0. */
export class VersionRequested extends Error {
  override name = "VersionRequested";
  constructor() {
    super("version requested");
  }
}

/** The environment the parser reads (process.env fits). */
export type Env = Readonly<Record<string, string | undefined>>;

/**
 * Flags from `argv` (without node and script), then each flag's env var, then its default.
 * Accepts --name=value, --name value, a single leading dash as Go's flag package does, and bare
 * booleans (--x, never consuming the next argument). A repeated list flag appends, like pflag's
 * stringSlice; any other repeated flag keeps its last value.
 */
export function parseFlags<const T extends readonly FlagSpec[]>(
  table: T,
  argv: readonly string[],
  env: Env,
): ParsedFlags<T> {
  const onCommandLine = scan(table, argv);
  const values: Record<string, unknown> = {};
  const given = new Set<string>();
  for (const spec of table) {
    const occurrences = onCommandLine.get(spec.name);
    const fromEnv = spec.env ? env[spec.env] : undefined;
    let value: unknown;
    let shown: string;
    let source = `--${spec.name}`;
    if (occurrences) {
      value = resolveOccurrences(spec, occurrences);
      shown = spec.type === "list" ? occurrences.join(",") : (occurrences.at(-1) as string);
      given.add(spec.name);
    } else if (fromEnv) {
      source = `${spec.env} (--${spec.name})`;
      value = convert(spec, fromEnv, source);
      shown = fromEnv;
      given.add(spec.name);
    } else {
      value = convert(spec, spec.default, source);
      shown = spec.default;
    }
    if (spec.required && (value === "" || (Array.isArray(value) && value.length === 0))) {
      throw new UsageError(`missing required flag --${spec.name}${spec.env ? ` (or env ${spec.env})` : ""}`);
    }
    const problem = spec.validate?.(value as never);
    if (problem) throw new UsageError(`invalid value "${shown}" for ${source}: ${problem}`);
    values[spec.name] = value;
  }
  return { values: values as FlagValues<T>, given: given as ReadonlySet<T[number]["name"]> };
}

/** Raw values per flag name, in command-line order. */
function scan(table: readonly FlagSpec[], argv: readonly string[]): Map<string, string[]> {
  const byName = new Map(table.map((spec) => [spec.name, spec]));
  const found = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === "--") {
      if (i + 1 < argv.length) throw new UsageError(`unexpected argument "${argv[i + 1]}"`);
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      throw new UsageError(`unexpected argument "${arg}" (flags are written --name=value)`);
    }
    const body = arg.replace(/^--?/, "");
    const eq = body.indexOf("=");
    const name = eq < 0 ? body : body.slice(0, eq);
    if (name === "h" || name === "help") throw new HelpRequested(table);
    if (name === "version") throw new VersionRequested();
    const spec = byName.get(name);
    if (!spec) throw new UsageError(`unknown flag: --${name}`);
    let value: string;
    if (eq >= 0) value = body.slice(eq + 1);
    else if (spec.type === "bool") value = "true";
    else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith("--"))
        throw new UsageError(`flag needs an argument: --${name}`);
      value = next;
      i++;
    }
    found.set(name, [...(found.get(name) ?? []), value]);
  }
  return found;
}

function resolveOccurrences(spec: FlagSpec, occurrences: string[]): unknown {
  const source = `--${spec.name}`;
  const parsed = occurrences.map((raw) => convert(spec, raw, source));
  return spec.type === "list" ? (parsed as string[][]).flat() : parsed.at(-1);
}

// Node's timers overflow above 2^31-1 ms and then fire after 1 ms: a longer duration would spin.
export const MAX_TIMER_MS = 2 ** 31 - 1;

function convert(spec: FlagSpec, raw: string, source: string): unknown {
  const fail = (reason: string) => new UsageError(`invalid value "${raw}" for ${source}: ${reason}`);
  switch (spec.type) {
    case "string":
      return raw;
    case "list":
      return splitList(raw);
    case "bool": {
      const value = parseBool(raw);
      if (value === undefined) throw fail("not a boolean (true or false)");
      return value;
    }
    case "int": {
      const value = /^[-+]?\d+$/.test(raw) ? Number(raw) : Number.NaN;
      if (!Number.isSafeInteger(value)) throw fail("not an integer");
      return value;
    }
    case "float": {
      if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw)) throw fail("not a number");
      return Number(raw);
    }
    case "duration": {
      const ms = parseDuration(raw);
      if (ms === undefined) throw fail("not a duration (e.g. 10s, 1m30s, 500ms)");
      if (ms < 0) throw fail("must not be negative");
      const maxMs = spec.maxMs ?? MAX_TIMER_MS;
      if (ms > maxMs) throw fail(`too long (at most ${Math.floor(maxMs / 3_600_000)}h)`);
      return ms;
    }
  }
}

/** Comma-separated, items trimmed, empty items dropped: "" is the empty list. */
export function splitList(raw: string): string[] {
  return raw
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
}

const TRUE = new Set(["1", "t", "T", "true", "TRUE", "True"]);
const FALSE = new Set(["0", "f", "F", "false", "FALSE", "False"]);

/** Go's strconv.ParseBool: undefined where Go returns an error. */
export function parseBool(raw: string): boolean | undefined {
  if (TRUE.has(raw)) return true;
  if (FALSE.has(raw)) return false;
  return undefined;
}

const TYPE_IN_USAGE: Record<FlagType, string> = {
  string: "string",
  bool: "",
  int: "int",
  float: "float",
  duration: "duration",
  list: "strings",
};

/** The text --help prints: one line per flag, pflag style. */
/** A subcommand a program runs instead of its default work (`program release-all [flags]`), shown by --help. */
export interface Command {
  name: string;
  help: string;
}

export function usage(program: string, table: readonly FlagSpec[], commands: readonly Command[] = []): string {
  const rows = table.map((spec) => [
    `  --${spec.name}${TYPE_IN_USAGE[spec.type] ? ` ${TYPE_IN_USAGE[spec.type]}` : ""}`,
    `${spec.help}${spec.env ? ` [env ${spec.env}]` : ""}${defaultInUsage(spec)}`,
  ]);
  rows.push(["  --version", "Print the version, the commit and the runtime, and exit."]);
  rows.push(["  -h, --help", "Show this help and exit."]);
  const width = Math.max(...rows.map(([left]) => (left as string).length)) + 3;
  const lines = rows.map(([left, right]) => `${(left as string).padEnd(width)}${right}`);
  const named = commands.map(({ name, help }) => `  ${name.padEnd(width - 2)}${help}`);
  return commands.length === 0
    ? `Usage: ${program} [flags]\n\nFlags:\n${lines.join("\n")}\n`
    : `Usage: ${program} [command] [flags]\n\nCommands:\n${named.join("\n")}\n\nFlags:\n${lines.join("\n")}\n`;
}

function defaultInUsage(spec: FlagSpec): string {
  if (spec.required) return " (required)";
  if (["", "false", "0", "0s"].includes(spec.default)) return ""; // pflag leaves zero values out
  return spec.type === "string" || spec.type === "list"
    ? ` (default "${spec.default}")`
    : ` (default ${spec.default})`;
}

/** The docs table (docs/reference.md): flag | env | default | helm value | description. */
export function flagsMarkdown(table: readonly FlagSpec[]): string {
  const code = (text: string) => `\`${text}\``;
  return markdownTable(
    ["flag", "env", "default", "helm value", "description"],
    table.map((spec) => [
      code(`--${spec.name}`),
      spec.env ? code(spec.env) : "",
      spec.required ? "required" : code(spec.default === "" ? '""' : spec.default),
      spec.helm ? code(spec.helm) : "—",
      spec.help,
    ]),
  );
}
