import type { GpuInfo } from './offer.js';
import { formatRange, formatSize, looksLikeSize, parseCountRange, parseSizeRange, type Range } from './quantity.js';
import { closestMatch } from './suggest.js';

/** The GPU models this orchestrator knows, by canonical name, with the memory of one card. */
export const KNOWN_GPUS: readonly { name: string; memoryMib: number }[] = [
  { name: 'L4', memoryMib: 24 * 1024 },
  { name: 'H100', memoryMib: 80 * 1024 },
  { name: 'H200', memoryMib: 141 * 1024 },
  { name: 'RTXPRO6000', memoryMib: 96 * 1024 },
];

/** A GPU requirement as written; null marks a part that was left out, so that defaults can fill it. */
export interface GpuSpecParts {
  models: string[] | null;
  memoryMib: Range | null;
  count: Range | null;
}

export interface GpuObjectInput {
  name?: string | string[];
  memory?: string | number;
  count?: string | number;
}

const GPU_COUNT_RULES = { least: 0, bounded: false, what: 'GPU count' };

function modelKey(name: string): string {
  return name.toUpperCase().replace(/[\s_-]/g, '');
}

/** Whether two names denote the same model, whatever their case or spacing. */
export function modelsMatch(a: string, b: string): boolean {
  return modelKey(a) === modelKey(b);
}

/** The canonical name of a GPU model written in any case or spacing (`rtx pro 6000` → `RTXPRO6000`). */
export function canonicalGpuName(name: string): string {
  const key = modelKey(name);
  const known = KNOWN_GPUS.find((gpu) => modelKey(gpu.name) === key);
  if (known) return known.name;
  const names = KNOWN_GPUS.map((gpu) => gpu.name);
  const suggestion = closestMatch(key, names);
  const hint = suggestion ? `did you mean "${suggestion}"?` : `known models: ${names.join(', ')}`;
  throw new Error(`unknown GPU model "${name.trim()}"; ${hint}`);
}

/** One model or several, as `H100,H200` or a list. */
export function parseGpuModels(input: string | readonly string[]): string[] {
  const names = typeof input === 'string' ? input.split(',') : [...input];
  if (names.length === 0 || names.some((name) => name.trim() === '')) {
    throw new Error(`invalid GPU model list "${[...names].join(',')}"; expected names such as H100 or H100,H200`);
  }
  return [...new Set(names.map(canonicalGpuName))];
}

/**
 * The GPU grammar: parts joined by `:` in any order; a size or size range is memory per card,
 * a whole number or range is the count, anything else a model or a comma-separated list of models.
 * `H100:2`, `L4:24GB`, `H100,H200:8`, `24GB..:1..8`.
 */
export function parseGpuSpec(text: string): GpuSpecParts {
  const parts: GpuSpecParts = { models: null, memoryMib: null, count: null };
  const once = (field: keyof GpuSpecParts, label: string): void => {
    if (parts[field] !== null) throw new Error(`invalid GPU spec "${text}": it gives the ${label} twice`);
  };
  const pieces = text.split(':');
  for (const raw of pieces) {
    const piece = raw.trim();
    if (piece === '') throw new Error(`invalid GPU spec "${text}": empty part; expected e.g. H100, H100:2 or L4:24GB:1..2`);
    if (/^\d*(\.\.\d*)?$/.test(piece)) {
      once('count', 'count');
      parts.count = parseCountRange(piece, GPU_COUNT_RULES);
    } else if (piece.split('..').every((end) => end.trim() === '' || looksLikeSize(end))) {
      once('memoryMib', 'memory');
      parts.memoryMib = parseSizeRange(piece);
    } else if (piece.toLowerCase() === 'nvidia') {
      continue;
    } else {
      once('models', 'model');
      parts.models = parseGpuModels(piece);
    }
  }
  return parts;
}

/** Any accepted form of `resources.gpu`: the grammar string, a bare count, or `{name, memory, count}`. */
export function parseGpu(input: string | number | GpuObjectInput): GpuSpecParts {
  if (typeof input === 'string') return parseGpuSpec(input);
  if (typeof input === 'number') return { models: null, memoryMib: null, count: parseCountRange(input, GPU_COUNT_RULES) };
  return {
    models: input.name === undefined ? null : parseGpuModels(input.name),
    memoryMib: input.memory === undefined ? null : parseSizeRange(input.memory),
    count: input.count === undefined ? null : parseCountRange(input.count, GPU_COUNT_RULES),
  };
}

/** `H100:80GB:2` for the GPUs of a machine, `-` when it has none. */
export function formatGpu(gpu: GpuInfo): string {
  if (gpu.count === 0) return '-';
  return `${gpu.name}:${formatSize(gpu.memoryMib)}:${gpu.count}`;
}

export function formatGpuParts(models: string[] | null, memoryMib: Range, count: Range): string {
  return [models ? models.join(',') : '', formatRange(memoryMib, formatSize), formatRange(count)].filter((part) => part !== '').join(':');
}
