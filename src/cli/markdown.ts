// Markdown tables for the docs, generated from the programs' own tables (flags, metrics).

/** A table with a header row; a `|` inside a cell is escaped. */
export function markdownTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]) => `| ${cells.map((cell) => cell.replaceAll("|", "\\|")).join(" | ")} |`;
  return [line(headers), `|${headers.map(() => "---").join("|")}|`, ...rows.map(line)].join("\n").concat("\n");
}
