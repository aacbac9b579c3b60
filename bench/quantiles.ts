/** The value at fraction `q` of the values in order (0.5: the median, 0.99: p99); NaN for no values. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export const median = (values: readonly number[]): number => quantile(values, 0.5);
