/** Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours each cost 1. */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) => Array.from({ length: cols }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.length][b.length];
}

/**
 * The candidate a typo most likely meant, or null when none is close enough to be worth suggesting.
 * Comparison ignores case; one edit is allowed per three characters of input, and at least one.
 */
export function closestMatch(input: string, candidates: readonly string[]): string | null {
  const wanted = input.toLowerCase();
  const allowed = Math.max(1, Math.floor(wanted.length / 3));
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const distance = editDistance(wanted, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return bestDistance <= allowed ? best : null;
}

export function quoteList(values: readonly (string | number)[]): string {
  return values.map((v) => (typeof v === 'string' ? `"${v}"` : String(v))).join(', ');
}
