import { expect } from 'chai';
import fc from 'fast-check';
import { formatDuration, parseDuration, parseDurationOrOff } from '../api/duration.js';
import { canonicalGpuName, parseGpu, parseGpuSpec } from '../api/gpu.js';
import type { Offer } from '../api/offer.js';
import { parseCountRange, parseSizeRange } from '../api/quantity.js';
import {
  describeRequirement, describeRequirementInWords, formatGpu, formatSize, intersectRequirements, KNOWN_GPUS, normalizeResources, offerSatisfies, parseSize,
  type ResourceRequirement,
} from '../api/resources.js';

const GB = 1024;
const ANY = { min: null, max: null };

function offer(gpu: { name: string; count: number }, overrides: Partial<Offer> = {}): Offer {
  const memoryMib = KNOWN_GPUS.find((known) => known.name === gpu.name)?.memoryMib ?? 0;
  return {
    backend: 'gpucloud', offerId: 'o1', gpu: { name: gpu.name, memoryMib, count: gpu.count },
    cpus: 16, memoryMib: 128 * GB, diskMib: 500 * GB, region: 'eu-1', pricePerHour: 2, availability: 'available',
    ...overrides,
  };
}

function run(gpu: string | number | undefined, rest: Record<string, string | number> = {}): ResourceRequirement {
  return normalizeResources(gpu === undefined ? rest : { gpu, ...rest }, 'run');
}

describe('api: GPU spec grammar', () => {
  const cases: [string, { models: string[] | null; memoryMib: { min: number | null; max: number | null } | null; count: { min: number | null; max: number | null } | null }][] = [
    ['L4', { models: ['L4'], memoryMib: null, count: null }],
    ['L4:24GB', { models: ['L4'], memoryMib: { min: 24 * GB, max: 24 * GB }, count: null }],
    ['H100:2', { models: ['H100'], memoryMib: null, count: { min: 2, max: 2 } }],
    ['RTXPRO6000:96GB', { models: ['RTXPRO6000'], memoryMib: { min: 96 * GB, max: 96 * GB }, count: null }],
    ['RTXPRO6000:8', { models: ['RTXPRO6000'], memoryMib: null, count: { min: 8, max: 8 } }],
    ['H100,H200:8', { models: ['H100', 'H200'], memoryMib: null, count: { min: 8, max: 8 } }],
    ['24GB..', { models: null, memoryMib: { min: 24 * GB, max: null }, count: null }],
    ['1..8', { models: null, memoryMib: null, count: { min: 1, max: 8 } }],
    ['0..8', { models: null, memoryMib: null, count: { min: 0, max: 8 } }],
    ['2:H100', { models: ['H100'], memoryMib: null, count: { min: 2, max: 2 } }],
    ['1..2:80GB:h100', { models: ['H100'], memoryMib: { min: 80 * GB, max: 80 * GB }, count: { min: 1, max: 2 } }],
    ['RTX PRO 6000:96GB', { models: ['RTXPRO6000'], memoryMib: { min: 96 * GB, max: 96 * GB }, count: null }],
    ['rtx-pro-6000', { models: ['RTXPRO6000'], memoryMib: null, count: null }],
    ['nvidia:24GB..80GB:..4', { models: null, memoryMib: { min: 24 * GB, max: 80 * GB }, count: { min: null, max: 4 } }],
  ];
  for (const [text, expected] of cases) {
    it(`reads ${text}`, () => expect(parseGpuSpec(text)).to.deep.equal(expected));
  }

  it('reads the object form and a bare count', () => {
    expect(parseGpu({ name: ['h200', 'H100'], memory: '80GB..', count: '1..2' }))
      .to.deep.equal({ models: ['H200', 'H100'], memoryMib: { min: 80 * GB, max: null }, count: { min: 1, max: 2 } });
    expect(parseGpu({ name: 'L4,H100' })).to.deep.equal({ models: ['L4', 'H100'], memoryMib: null, count: null });
    expect(parseGpu(2)).to.deep.equal({ models: null, memoryMib: null, count: { min: 2, max: 2 } });
  });

  it('names the problem in a bad spec', () => {
    expect(() => parseGpuSpec('H10')).to.throw('unknown GPU model "H10"; did you mean "H100"?');
    expect(() => parseGpuSpec('rtxpro600:8')).to.throw('unknown GPU model "rtxpro600"; did you mean "RTXPRO6000"?');
    expect(() => parseGpuSpec('Voodoo5')).to.throw('unknown GPU model "Voodoo5"; known models are NVIDIA ones such as H100');
    expect(() => parseGpuSpec('H100:2:4')).to.throw('invalid GPU spec "H100:2:4": it gives the count twice');
    expect(() => parseGpuSpec('24GB:80GB')).to.throw('it gives the memory twice');
    expect(() => parseGpuSpec('H100:')).to.throw('empty part');
    expect(() => parseGpuSpec('H100:4..2')).to.throw('invalid GPU count "4..2": the minimum 4 is greater than the maximum 2');
    expect(() => parseGpuSpec('80GB..24GB')).to.throw('invalid size range "80GB..24GB": the minimum 80GB is greater than the maximum 24GB');
  });

  it('knows the memory of each model', () => {
    const sizes = (name: string) => KNOWN_GPUS.filter((gpu) => gpu.name === name).map((gpu) => formatSize(gpu.memoryMib));
    expect([sizes('L4'), sizes('H100'), sizes('H200'), sizes('RTXPRO6000'), sizes('A100'), sizes('MI300X')]).to.deep.equal([['24GB'], ['80GB'], ['141GB'], ['96GB'], ['40GB', '80GB'], ['192GB']]);
    expect(canonicalGpuName(' h200 ')).to.equal('H200');
  });
});

describe('api: sizes and ranges', () => {
  it('reads sizes in binary units, a bare number as GB', () => {
    expect(parseSize('512MB')).to.equal(512);
    expect(parseSize('100GB')).to.equal(100 * GB);
    expect(parseSize('1TB')).to.equal(1024 * GB);
    expect(parseSize('1.5gb')).to.equal(1536);
    expect(parseSize('8 GiB')).to.equal(8 * GB);
    expect(parseSize(16)).to.equal(16 * GB);
    expect(parseSize('16')).to.equal(16 * GB);
    expect(() => parseSize('100XB')).to.throw('invalid size "100XB"; expected a size such as 512MB, 24GB, 1.5TB; a bare number means GB');
    expect(() => parseSize(-1)).to.throw('invalid size -1');
  });

  it('writes sizes in the largest whole unit', () => {
    expect([512, 1024, 1536, 81920, 144384, 1024 * GB, 1536 * GB].map(formatSize)).to.deep.equal(['512MB', '1GB', '1.5GB', '80GB', '141GB', '1TB', '1536GB']);
  });

  it('reads back every size it writes in whole GB', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 100_000 }), (gb) => parseSize(formatSize(gb * GB)) === gb * GB));
  });

  it('reads size ranges, a single size meaning exactly that', () => {
    expect(parseSizeRange('100GB..')).to.deep.equal({ min: 100 * GB, max: null });
    expect(parseSizeRange('..1TB')).to.deep.equal({ min: null, max: 1024 * GB });
    expect(parseSizeRange('24GB..80GB')).to.deep.equal({ min: 24 * GB, max: 80 * GB });
    expect(parseSizeRange('200GB')).to.deep.equal({ min: 200 * GB, max: 200 * GB });
    expect(() => parseSizeRange('..')).to.throw('give at least one end of the range');
    expect(() => parseSizeRange('1GB..2GB..3GB')).to.throw('a range has one ".."');
  });

  it('reads count ranges under the rules of the field', () => {
    const nodes = { least: 0, bounded: true, what: 'node count' };
    expect(parseCountRange(2, nodes)).to.deep.equal({ min: 2, max: 2 });
    expect(parseCountRange('0..2', nodes)).to.deep.equal({ min: 0, max: 2 });
    expect(() => parseCountRange('3..1', nodes)).to.throw('invalid node count "3..1": the minimum 3 is greater than the maximum 1');
    expect(() => parseCountRange('2..', nodes)).to.throw('the range needs an upper bound, e.g. 2..6');
    expect(() => parseCountRange('0', { least: 1, bounded: false, what: 'CPU count' })).to.throw('invalid CPU count "0": 0 is below the minimum of 1');
    expect(() => parseCountRange('two', nodes)).to.throw('expected a whole number or a range such as 0..8');
    expect(parseCountRange('4..', { least: 1, bounded: false, what: 'CPU count' })).to.deep.equal({ min: 4, max: null });
  });
});

describe('api: resource requirements', () => {
  it('normalises a full resources block', () => {
    expect(normalizeResources({ gpu: 'H100:80GB:1..2', cpu: '8..', memory: '64GB..', disk: '100GB..', shm_size: '1GB' }, 'run')).to.deep.equal({
      gpu: { models: ['H100'], memoryMib: { min: 80 * GB, max: 80 * GB }, count: { min: 1, max: 2 } },
      cpus: { min: 8, max: null }, memoryMib: { min: 64 * GB, max: null }, diskMib: { min: 100 * GB, max: null }, shmSizeMib: GB,
    });
  });

  it('lets a run without gpu take any machine, and a named GPU without a count mean one card', () => {
    expect(normalizeResources(undefined, 'run')).to.deep.equal({ gpu: { models: null, memoryMib: ANY, count: { min: 0, max: null } }, cpus: ANY, memoryMib: ANY, diskMib: ANY, shmSizeMib: null });
    expect(normalizeResources({}, 'fleet').gpu).to.deep.equal({ models: null, memoryMib: ANY, count: { min: 0, max: null } });
    expect(run('H100').gpu.count).to.deep.equal({ min: 1, max: 1 });
    expect(normalizeResources({ gpu: 'H100' }, 'fleet').gpu.count).to.deep.equal({ min: 1, max: null });
    expect(run(0).gpu.count).to.deep.equal({ min: 0, max: 0 });
  });

  it('matches offers against requirements', () => {
    expect(offerSatisfies(offer({ name: 'H100', count: 2 }), run('H100:1..2'))).to.equal(true);
    expect(offerSatisfies(offer({ name: 'H100', count: 4 }), run('H100:1..2'))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'H200', count: 1 }), run('H100'))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'H200', count: 1 }), run('H100,H200'))).to.equal(true);
    expect(offerSatisfies(offer({ name: 'L4', count: 1 }), run('40GB..'))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'H200', count: 1 }), run('40GB..'))).to.equal(true);
    expect(offerSatisfies(offer({ name: 'L4', count: 1 }), run('H100', { disk: '1TB..' }))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'L4', count: 1 }), run('L4', { cpu: '32..' }))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'L4', count: 1 }), run('L4', { memory: '..64GB' }))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'L4', count: 1 }), run('L4', { memory: '64GB..', disk: '500GB', cpu: 16 }))).to.equal(true);
  });

  it('lets a machine without GPUs satisfy a count range that includes 0, whatever the model', () => {
    const cpuOnly = offer({ name: '', count: 0 });
    expect(offerSatisfies(cpuOnly, normalizeResources({ gpu: 'H100:0..8' }, 'fleet'))).to.equal(true);
    expect(offerSatisfies(cpuOnly, run(undefined))).to.equal(true);
    expect(offerSatisfies(cpuOnly, run('H100'))).to.equal(false);
    expect(offerSatisfies(offer({ name: 'L4', count: 1 }), run(0))).to.equal(false);
  });

  it('intersects requirements', () => {
    const fleet = normalizeResources({ gpu: 'H100,H200:0..8', disk: '200GB..' }, 'fleet');
    expect(intersectRequirements(fleet, run('H200:2', { disk: '..1TB', shm_size: '2GB' }))).to.deep.equal({
      gpu: { models: ['H200'], memoryMib: ANY, count: { min: 2, max: 2 } },
      cpus: ANY, memoryMib: ANY, diskMib: { min: 200 * GB, max: 1024 * GB }, shmSizeMib: 2 * GB,
    });
    expect(intersectRequirements(fleet, run('H100:16'))).to.equal(null);
    expect(intersectRequirements(fleet, run(undefined, { disk: '100GB' }))).to.equal(null);
    expect(intersectRequirements(run('L4'), run('H100'))).to.equal(null);
    expect(intersectRequirements(run('24GB'), run('80GB'))).to.equal(null);
  });

  it('keeps only machines without GPUs when the GPU parts cannot both hold but both allow none', () => {
    const fleet = normalizeResources({ gpu: 'H100:0..8' }, 'fleet');
    expect(intersectRequirements(fleet, run('L4:0..2'))?.gpu).to.deep.equal({ models: null, memoryMib: ANY, count: { min: 0, max: 0 } });
    expect(intersectRequirements(fleet, run(0))?.gpu).to.deep.equal({ models: null, memoryMib: ANY, count: { min: 0, max: 0 } });
  });

  it('describes requirements briefly', () => {
    expect(describeRequirement(run('H100:80GB:1..2', { disk: '100GB..' }))).to.equal('H100:80GB:1..2, disk 100GB..');
    expect(describeRequirement(run(undefined))).to.equal('any machine');
    expect(describeRequirement(run(0, { cpu: '4..', memory: '16GB..32GB', shm_size: '512MB' }))).to.equal('no GPU, cpu 4.., memory 16GB..32GB, shm 512MB');
    expect(describeRequirement(normalizeResources({ gpu: 'H100,H200' }, 'fleet'))).to.equal('H100,H200:1..');
    expect(describeRequirement(run('24GB..'))).to.equal('24GB..:1');
  });

  it('describes requirements in words for plans', () => {
    expect(describeRequirementInWords(normalizeResources({ gpu: '24GB..' }, 'fleet'))).to.equal('1 or more GPUs with 24 GB or more');
    expect(describeRequirementInWords(run('H100:80GB:1..2', { disk: '100GB..' }))).to.equal('1 to 2 H100 GPUs with 80 GB, 100 GB or more disk');
    expect(describeRequirementInWords(run(undefined))).to.equal('any machine');
    expect(describeRequirementInWords(run(0, { cpu: '4', memory: '..32GB', shm_size: '512MB' }))).to.equal('no GPU, 4 CPUs, up to 32 GB memory, 512 MB shared memory');
    expect(describeRequirementInWords(normalizeResources({ gpu: 'H100,H200' }, 'fleet'))).to.equal('1 or more H100 or H200 GPUs');
    expect(describeRequirementInWords(run('L4:16GB..24GB', { cpu: '1' }))).to.equal('1 L4 GPU with 16 GB to 24 GB, 1 CPU');
  });

  it('formats the GPUs of a machine', () => {
    expect(formatGpu({ name: 'H100', memoryMib: 80 * GB, count: 2 })).to.equal('H100:80GB:2');
    expect(formatGpu({ name: '', memoryMib: 0, count: 0 })).to.equal('-');
  });
});

describe('api: durations', () => {
  it('reads single and combined units and bare seconds', () => {
    expect(['30s', '5m', '2h', '3d', '1w', '1h30m', '1d12h', 90, '90', 0].map(parseDuration)).to.deep.equal([30, 300, 7200, 259200, 604800, 5400, 129600, 90, 90, 0]);
  });

  it('reads off only where a limit can be turned off', () => {
    expect(parseDurationOrOff('off')).to.equal(null);
    expect(parseDurationOrOff('10m')).to.equal(600);
    expect(() => parseDuration('off')).to.throw('invalid duration "off": this duration cannot be turned off');
  });

  it('explains what is wrong with a bad duration', () => {
    expect(() => parseDuration('5 mins')).to.throw('invalid duration "5 mins"; expected a duration such as 30s, 5m, 2h, 3d, 1w, 1h30m or a number of seconds');
    expect(() => parseDuration('5y')).to.throw('unknown unit "y" (use s, m, h, d or w)');
    expect(() => parseDuration('30m1h')).to.throw('give each unit once, largest first');
    expect(() => parseDuration(-5)).to.throw('seconds must be a whole number, 0 or more');
    expect(() => parseDuration(1.5)).to.throw('invalid duration 1.5');
    expect(() => parseDurationOrOff('never')).to.throw('or off');
  });

  it('writes durations in the shortest form it reads back', () => {
    expect([0, 45, 300, 5400, 86400, 93784, 604800].map(formatDuration)).to.deep.equal(['0s', '45s', '5m', '1h30m', '1d', '1d2h3m4s', '1w']);
    fc.assert(fc.property(fc.integer({ min: 0, max: 10_000_000 }), (seconds) => parseDuration(formatDuration(seconds)) === seconds));
  });
});
