import type { GpuInfo } from './offer.js';
import { formatRange, formatSize, looksLikeSize, parseCountRange, parseSizeRange, type Range } from './quantity.js';
import { closestMatch } from './suggest.js';

export type GpuVendor = 'nvidia' | 'amd' | 'intel' | 'tenstorrent';

export const VENDOR_NAMES: Record<GpuVendor, string> = { nvidia: 'NVIDIA', amd: 'AMD', intel: 'Intel', tenstorrent: 'Tenstorrent' };

/** The models of each vendor, each with the memory of one card in GB (several sizes where the model comes in several). */
const CATALOGUE: Record<GpuVendor, Record<string, readonly number[]>> = {
  nvidia: {
    // Datacenter
    L4: [24], H100: [80], H200: [141], RTXPRO6000: [96], B300: [288], B200: [180], GB300: [288], GB200: [186], GH200: [96, 144], GB10: [128], H100NVL: [94], H800: [80],
    A100: [40, 80], A800: [40, 80], A40: [48], A30: [24], A16: [16], A10: [24], A10G: [24], A2: [16], L40: [48], L40S: [48], L20: [48],
    T4: [16], V100: [16, 32], P100: [16], P40: [24], P4: [8], K80: [12],
    // Workstation and desktop
    RTXPRO5000: [48], RTXPRO4500: [32], RTXPRO4000: [24],
    RTX6000ADA: [48], RTX5000ADA: [32], RTX4500ADA: [24], RTX4000ADA: [20], RTX2000ADA: [16],
    A6000: [48], A5500: [24], A5000: [24], A4500: [20], A4000: [16], RTX8000: [48], RTX6000: [24],
    RTX5090: [32], RTX5080: [16], RTX4090: [24], RTX4080: [16], RTX3090: [24], RTX3090TI: [24], RTX3080: [10, 12], RTX3080TI: [12],
    RTX3070: [8], RTX3060: [8, 12], RTX3060TI: [8],
  },
  amd: { MI355X: [288], MI350X: [288], MI325X: [256], MI300X: [192], MI300A: [128], MI250X: [128], MI250: [128], MI210: [64], MI100: [32] },
  intel: { Gaudi: [32], Gaudi2: [96], Gaudi3: [128] },
  // A Galaxy is 32 chips, each counted as one GPU: Wormhole (wh) or Blackhole (bh).
  tenstorrent: { 'n150': [12], 'n300': [24], 'p100a': [28], 'p150a': [32], 'p150': [32], 'p300': [64], 'tt-galaxy-wh': [12], 'tt-galaxy-bh': [32] },
};

/** How a model is written where it differs from its key: `RTX6000Ada`, not `RTX6000ADA`. */
const SPELLING: Record<string, string> = { RTX6000ADA: 'RTX6000Ada', RTX5000ADA: 'RTX5000Ada', RTX4500ADA: 'RTX4500Ada', RTX4000ADA: 'RTX4000Ada', RTX2000ADA: 'RTX2000Ada', RTX3090TI: 'RTX3090Ti', RTX3080TI: 'RTX3080Ti', RTX3060TI: 'RTX3060Ti' };

/** The GPU and accelerator models this orchestrator knows, by canonical name and vendor, one entry per memory size. */
export const KNOWN_GPUS: readonly { name: string; vendor: GpuVendor; memoryMib: number }[] = (Object.keys(CATALOGUE) as GpuVendor[]).flatMap((vendor) =>
  Object.entries(CATALOGUE[vendor]).flatMap(([name, sizes]) => sizes.map((gb) => ({ name: SPELLING[name] ?? name, vendor, memoryMib: gb * 1024 }))));

const KNOWN_NAMES = [...new Set(KNOWN_GPUS.map((gpu) => gpu.name))];

/** A GPU requirement as written; null marks a part that was left out, so that defaults can fill it. */
export interface GpuSpecParts {
  models: string[] | null;
  memoryMib: Range | null;
  count: Range | null;
}

export interface GpuObjectInput {
  vendor?: string;
  name?: string | string[];
  memory?: string | number;
  count?: string | number;
}

const GPU_COUNT_RULES = { least: 0, bounded: false, what: 'GPU count' };

/** Vendor words of dstack's GPU spec; `google` and `tpu` name TPUs, which no backend here offers. */
const VENDOR_WORDS: Record<string, GpuVendor | 'google'> = {
  nvidia: 'nvidia', amd: 'amd', intel: 'intel', tenstorrent: 'tenstorrent', tt: 'tenstorrent', google: 'google', tpu: 'google',
};

export const TPU_REFUSAL = 'Google TPUs are not supported: the backends here (gpucloud, local, kubernetes) offer machines with NVIDIA GPUs or none';

function modelKey(name: string): string {
  return name.toUpperCase().replace(/[\s_-]/g, '');
}

const BY_KEY = new Map(KNOWN_GPUS.map((gpu) => [modelKey(gpu.name), gpu]));

/** TPU names as dstack takes them: `v5litepod-8`, `v6e-8`, `v4`, with or without the deprecated `tpu-` prefix. */
function looksLikeTpu(name: string): boolean {
  return /^(tpu-)?v\d+[a-z]*(-\d+)?$/i.test(name.trim());
}

/** Whether two names denote the same model, whatever their case or spacing. */
export function modelsMatch(a: string, b: string): boolean {
  return modelKey(a) === modelKey(b);
}

/** The vendor of a known model, by its name in any case or spacing; null for a name this orchestrator does not know. */
export function gpuVendorOf(name: string): GpuVendor | null {
  return BY_KEY.get(modelKey(name))?.vendor ?? null;
}

/** The canonical name of a GPU model written in any case or spacing (`rtx pro 6000` → `RTXPRO6000`). */
export function canonicalGpuName(name: string): string {
  const known = BY_KEY.get(modelKey(name));
  if (known) return known.name;
  if (looksLikeTpu(name)) throw new Error(`${TPU_REFUSAL} ("${name.trim()}" is a TPU)`);
  const suggestion = closestMatch(modelKey(name), KNOWN_NAMES);
  const hint = suggestion ? `did you mean "${suggestion}"?` : 'known models are NVIDIA ones such as H100, A100 or L40S, AMD Instinct such as MI300X, Intel Gaudi and Tenstorrent cards (docs/configuration.md lists them all)';
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

/** A vendor as written (`nvidia`, `AMD`, `tt`); throws for TPUs and for words that are no vendor. */
export function parseGpuVendor(word: string): GpuVendor {
  const vendor = VENDOR_WORDS[word.trim().toLowerCase()];
  if (vendor === 'google') throw new Error(TPU_REFUSAL);
  if (vendor === undefined) throw new Error(`unknown GPU vendor "${word.trim()}"; expected one of nvidia, amd, intel, tenstorrent`);
  return vendor;
}

/**
 * The models a vendor leaves: for NVIDIA any model (every backend here reports NVIDIA cards, by whatever name
 * nvidia-smi gives them), for another vendor its known models; a model of another vendor is an error.
 */
function modelsOfVendor(vendor: GpuVendor, models: string[] | null): string[] | null {
  if (models === null) return vendor === 'nvidia' ? null : KNOWN_NAMES.filter((name) => gpuVendorOf(name) === vendor);
  for (const model of models) {
    const own = gpuVendorOf(model)!;
    if (own !== vendor) throw new Error(`${model} is an ${VENDOR_NAMES[own]} GPU, not ${VENDOR_NAMES[vendor]}`);
  }
  return models;
}

/**
 * The GPU grammar: parts joined by `:` in any order; a vendor (nvidia, amd, intel, tenstorrent), a size or
 * size range is memory per card, a whole number or range is the count, anything else a model or a
 * comma-separated list of models. `H100:2`, `L4:24GB`, `H100,H200:8`, `24GB..:1..8`, `amd:MI300X:8`.
 */
export function parseGpuSpec(text: string): GpuSpecParts {
  const parts: GpuSpecParts = { models: null, memoryMib: null, count: null };
  let vendor: GpuVendor | null = null;
  const once = (given: boolean, label: string): void => {
    if (given) throw new Error(`invalid GPU spec "${text}": it gives the ${label} twice`);
  };
  for (const raw of text.split(':')) {
    const piece = raw.trim();
    if (piece === '') throw new Error(`invalid GPU spec "${text}": empty part; expected e.g. H100, H100:2 or L4:24GB:1..2`);
    if (/^\d*(\.\.\d*)?$/.test(piece)) {
      once(parts.count !== null, 'count');
      parts.count = parseCountRange(piece, GPU_COUNT_RULES);
    } else if (piece.split('..').every((end) => end.trim() === '' || looksLikeSize(end))) {
      once(parts.memoryMib !== null, 'memory');
      parts.memoryMib = parseSizeRange(piece);
    } else if (Object.hasOwn(VENDOR_WORDS, piece.toLowerCase())) {
      once(vendor !== null, 'vendor');
      vendor = parseGpuVendor(piece);
    } else {
      once(parts.models !== null, 'model');
      parts.models = parseGpuModels(piece);
    }
  }
  if (vendor !== null) parts.models = modelsOfVendor(vendor, parts.models);
  return parts;
}

/** Any accepted form of `resources.gpu`: the grammar string, a bare count, or `{vendor, name, memory, count}`. */
export function parseGpu(input: string | number | GpuObjectInput): GpuSpecParts {
  if (typeof input === 'string') return parseGpuSpec(input);
  if (typeof input === 'number') return { models: null, memoryMib: null, count: parseCountRange(input, GPU_COUNT_RULES) };
  const models = input.name === undefined ? null : parseGpuModels(input.name);
  return {
    models: input.vendor === undefined ? models : modelsOfVendor(parseGpuVendor(input.vendor), models),
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
