/**
 * How long the `orchestrator` command takes to start: `orchestrator --version`, which loads every command's
 * registration and nothing else, as each command (`ps`, `apply`, `logs`) pays it before its first request.
 *
 *   npm run bench:cli-start                                       # this build, 15 runs
 *   npm run bench:cli-start -- --compare-cli OLD/dist/cli/main.js --runs 15
 *
 * Each build and the reference run in turn, run after run, so that all see the same load on a shared machine; each
 * figure is the median over the runs. Reference: a bare `node -e 0`, the floor of any Node command.
 */
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median } from './quantiles.js';

const flag = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
};
const RUNS = Number(flag('runs') ?? 15);
const THIS_CLI = join(dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js');
const COMMANDS: { label: string; args: string[] }[] = [
  { label: 'orchestrator --version (this build)', args: [THIS_CLI, '--version'] },
  ...(flag('compare-cli') ? [{ label: `orchestrator --version (${flag('compare-cli')})`, args: [flag('compare-cli')!, '--version'] }] : []),
  { label: 'reference: node -e 0', args: ['-e', '0'] },
];

function wallMs(args: string[]): number {
  const started = performance.now();
  const done = spawnSync(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  if (done.status !== 0) throw new Error(`node ${args.join(' ')} ended with ${done.status ?? done.signal}`);
  return performance.now() - started;
}

for (const command of COMMANDS) wallMs(command.args);
const times = COMMANDS.map(() => [] as number[]);
for (let run = 0; run < RUNS; run++) COMMANDS.forEach((command, i) => times[i]!.push(wallMs(command.args)));

console.log(`# the command's start, wall time, medians of ${RUNS} runs in turn`);
const reference = median(times.at(-1)!);
COMMANDS.forEach((command, i) => {
  const ms = median(times[i]!);
  const ratio = i === COMMANDS.length - 1 ? '' : ` (${(ms / reference).toFixed(1)}x the reference${i > 0 ? `; this build ÷ it: ${(median(times[0]!) / ms).toFixed(2)}` : ''})`;
  console.log(`${command.label}: ${ms.toFixed(0)} ms${ratio}`);
});
