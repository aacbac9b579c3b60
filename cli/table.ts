import { inOneUnit } from './format.js';

const ELLIPSIS = '…';
const GAP = '  ';
const NARROWEST_COLUMN = 4;
/**
 * How wide a table or line may be: the terminal's width. Output that is not for a terminal (a pipe, a file) is not
 * cut, unless $COLUMNS gives a width; `wide` (the commands' --wide) is never cut.
 */
/** The flag of the commands that print tables: `.option(...WIDE_OPTION)`. */
export const WIDE_OPTION = ['-w, --wide', 'Do not cut long lines to the terminal\'s width (output that is not for a terminal is never cut)'] as const;

export function outputWidth(stream: NodeJS.WriteStream = process.stdout, wide = false): number {
  if (wide) return Infinity;
  if (stream.isTTY && stream.columns) return stream.columns;
  const fromEnvironment = Number(process.env.COLUMNS);
  return Number.isInteger(fromEnvironment) && fromEnvironment > 0 ? fromEnvironment : Infinity;
}

export function truncate(text: string, width: number): string {
  if (text.length <= width) return text;
  return width <= 0 ? '' : `${text.slice(0, width - 1)}${ELLIPSIS}`;
}

/**
 * Column widths that fit `width`: while too wide, the widest column gives up one character (the
 * rightmost of equals first), so long messages and names shrink before short status columns.
 */
function fitWidths(natural: number[], width: number): number[] {
  const widths = [...natural];
  const total = () => widths.reduce((sum, w) => sum + w, 0) + GAP.length * (widths.length - 1);
  while (total() > width) {
    let widest = -1;
    for (let index = widths.length - 1; index >= 0; index--) {
      if (widths[index]! > NARROWEST_COLUMN && (widest < 0 || widths[index]! > widths[widest]!)) widest = index;
    }
    if (widest < 0) break;
    widths[widest]!--;
  }
  return widths;
}

/** How a long list is shortened: the first `maxRows` rows, then a line that says how many more exist and which command shows them all. */
export interface RowLimit {
  maxRows: number;
  /** All the rows there are, where `rows` already holds only some of them (e.g. the server cut the list). */
  total?: number;
  /** A command that shows every row, e.g. `orchestrator offer --json`. */
  seeAll: string;
}

/**
 * A plain-text table with upper-case headers, cut to `width` columns with `…` where a cell does not
 * fit. A column of sizes is written in one unit. With `limit`, a longer list ends in `… N more; <command> shows all`.
 */
export function renderTable(headers: readonly string[], rows: readonly (readonly string[])[], width = outputWidth(), limit?: RowLimit): string {
  const shown = limit ? rows.slice(0, limit.maxRows) : rows;
  const columns = headers.map((_, index) => inOneUnit(shown.map((row) => (row[index] ?? '').replace(/\s*\n\s*/g, ' '))));
  const cells = [headers.map((h) => h.toUpperCase()), ...shown.map((_, row) => columns.map((column) => column[row]!))];
  const natural = headers.map((_, index) => Math.max(...cells.map((row) => row[index]!.length)));
  const widths = fitWidths(natural, width);
  return cells.map((row) => row
    .map((cell, index) => {
      const text = truncate(cell, widths[index]!);
      return index === row.length - 1 ? text : text.padEnd(widths[index]!);
    })
    .join(GAP)
    .trimEnd()).join('\n') + '\n' + (limit ? moreLine(shown.length, limit.total ?? rows.length, limit.seeAll) : '');
}

function moreLine(shown: number, total: number, seeAll: string): string {
  return total > shown ? `${ELLIPSIS} ${total - shown} more; ${seeAll} shows all\n` : '';
}
