// klog-style leveled logging: info at verbosity N is printed when N <= --v; warnings and errors always.
// `log.v(4)?.("msg", { … })` returns undefined when level 4 is off, so the fields are never even built.

export type LogFormat = "text" | "json";
export const LOG_FORMATS: readonly LogFormat[] = ["text", "json"];

export type Fields = Readonly<Record<string, unknown>>;
export type LogFn = (msg: string, fields?: Fields) => void;

export interface Logger {
  readonly verbosity: number;
  /** Info at level 0: always printed. */
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  /** The info function for `level`, or undefined when that level is off. */
  v(level: number): LogFn | undefined;
  /** A logger that adds `fields` to every line (e.g. { node }). */
  with(fields: Fields): Logger;
}

export interface LoggerOptions {
  verbosity: number;
  format: LogFormat;
  /** One line, without its newline. Default: stderr, like klog. */
  write?: (line: string) => void;
  now?: () => Date;
}

type Severity = "info" | "warning" | "error";

export function createLogger(options: LoggerOptions, fixed: Fields = {}): Logger {
  const write = options.write ?? ((line: string) => process.stderr.write(`${line}\n`));
  const now = options.now ?? (() => new Date());
  const format = options.format === "json" ? jsonLine : textLine;
  const emit =
    (severity: Severity, level: number): LogFn =>
    (msg, fields) =>
      write(format(now(), severity, level, msg, fields ? { ...fixed, ...fields } : fixed));
  const byLevel = Array.from({ length: options.verbosity + 1 }, (_, level) => emit("info", level));
  return {
    verbosity: options.verbosity,
    info: emit("info", 0),
    warn: emit("warning", 0),
    error: emit("error", 0),
    v: (level) => byLevel[level],
    with: (fields) => createLogger(options, { ...fixed, ...fields }),
  };
}

const SEVERITY_LETTER: Record<Severity, string> = { info: "I", warning: "W", error: "E" };
const pad = (n: number, width = 2) => String(n).padStart(width, "0");

/** `I1122 06:00:00.000000   12345] msg key=value` (klog's header without file:line; UTC). */
function textLine(time: Date, severity: Severity, _level: number, msg: string, fields: Fields): string {
  const header =
    `${SEVERITY_LETTER[severity]}${pad(time.getUTCMonth() + 1)}${pad(time.getUTCDate())} ` +
    `${pad(time.getUTCHours())}:${pad(time.getUTCMinutes())}:${pad(time.getUTCSeconds())}.` +
    `${pad(time.getUTCMilliseconds(), 3)}000 ${String(process.pid).padStart(7)}]`;
  let line = `${header} ${/[\n\r]/.test(msg) ? JSON.stringify(msg) : msg}`;
  for (const [key, value] of Object.entries(fields)) line += ` ${key}=${textValue(value)}`;
  return line;
}

function textValue(value: unknown): string {
  if (typeof value === "string") return /^[^\s"=\\]+$/.test(value) ? value : JSON.stringify(value);
  if (value instanceof Error) return JSON.stringify(errorText(value));
  if (value === undefined || value === null || typeof value !== "object") return String(value);
  return safeJson(value);
}

const RESERVED = new Set(["ts", "level", "v", "msg"]);

/** One JSON object per line: ts, level, v (info only), msg, then the fields. */
function jsonLine(time: Date, severity: Severity, level: number, msg: string, fields: Fields): string {
  const entry: Record<string, unknown> = { ts: time.toISOString(), level: severity };
  if (severity === "info") entry.v = level;
  entry.msg = msg;
  for (const [key, value] of Object.entries(fields)) entry[RESERVED.has(key) ? `field_${key}` : key] = value;
  return safeJson(entry);
}

/**
 * An Error on one line: its message, else its code or name (a refused dual-stack connect is an
 * AggregateError with an empty message), then the errors it aggregates and its cause.
 */
function errorText(err: Error, depth = 0): string {
  const text = (value: unknown) => (value instanceof Error ? errorText(value, depth + 1) : String(value));
  let line = err.message || (err as NodeJS.ErrnoException).code || err.name;
  if (depth >= 4) return line; // deep enough, and a cause chain may loop
  if (err instanceof AggregateError && err.errors.length > 0) line += ` (${err.errors.map(text).join("; ")})`;
  const cause = err.cause === undefined ? "" : text(err.cause);
  return cause && !line.includes(cause) ? `${line}: ${cause}` : line; // some messages already end with it
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value, (_key, item: unknown) => {
      if (item instanceof Error) return errorText(item);
      if (typeof item === "bigint") return item.toString();
      return item;
    });
  } catch {
    return JSON.stringify(String(value)); // circular: a log line must never throw
  }
}
