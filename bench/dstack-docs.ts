/**
 * How many of dstack's documented configurations this orchestrator accepts: every YAML block of a fleet,
 * task, service or dev environment in a dstack checkout's docs (mkdocs/ and examples/ markdown) and every
 * such file under examples/, parsed as `orchestrator apply` parses them. Prints the accepted share, the
 * configurations refused by name (every message says "not supported" or "deprecated"), the excerpts (blocks
 * that dstack refuses as well: a required field left out, a `...` placeholder, lines of resources that lost
 * their indentation), and those refused otherwise, each with its messages. Of the accepted, it counts those
 * whose commands call uv or pip and whether each is run where they work as in dstack (see usesPythonTools).
 *
 *   node dist/bench/dstack-docs.js /path/to/dstack
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseSpecText, type ConfigSpec, type SpecError } from '../api/parse.js';
import { jobContainer } from '../api/run-container.js';

const KINDS = ['task', 'service', 'fleet', 'dev-environment'];

interface Config { place: string; text: string }

function files(root: string, pattern: RegExp): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (pattern.test(name)) found.push(path);
    }
  };
  walk(root);
  return found.sort();
}

function kindOf(text: string): string | undefined {
  return /^type:\s*["']?([a-z-]+)/m.exec(text)?.[1];
}

/** The fenced YAML blocks of a markdown file whose top-level type is one of the four kinds, indentation removed. */
function markdownConfigs(file: string, checkout: string): Config[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  const configs: Config[] = [];
  for (let start = 0; start < lines.length; start++) {
    const fence = /^(\s*)```ya?ml/.exec(lines[start]!);
    if (!fence) continue;
    const indent = fence[1]!.length;
    let end = start + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++;
    const text = lines.slice(start + 1, end).map((line) => line.slice(indent)).join('\n');
    if (KINDS.includes(kindOf(text) ?? '')) configs.push({ place: `${relative(checkout, file)}:${start + 2}`, text });
    start = end;
  }
  return configs;
}

const PYTHON_TOOLS = /(^|[\s;&|(])(uv|uvx|pip3?)\s/m;

/** The container settings of each job a run starts: one, or one per replica group, whose image or python replaces both of the service's. */
function jobSettings(spec: Record<string, unknown>): { commands: string[]; namesImage: boolean; container: ReturnType<typeof jobContainer> }[] {
  const commandsOf = (fields: Record<string, unknown>) => (fields.type === 'dev-environment' ? fields.init : fields.commands) as string[] | undefined ?? [];
  const groups = Array.isArray(spec.replicas) ? spec.replicas as Record<string, unknown>[] : [{}];
  return groups.map((group) => {
    const own = group.image !== undefined || group.python !== undefined;
    const merged: Record<string, unknown> = { ...spec, ...(own ? { image: group.image, python: group.python } : {}), commands: group.commands ?? spec.commands };
    const commands = commandsOf(merged);
    return { commands, namesImage: merged.image !== undefined || merged.docker === true, container: jobContainer(merged as Parameters<typeof jobContainer>[0], commands) };
  });
}

/**
 * Whether a run's commands call uv or pip, and whether they then run where those work as in dstack: in an image
 * of ours with the virtual environment made for them (venvPython), or in an image the configuration names
 * (its own `image`, or dstack's Docker-in-Docker image), which is the same image there as here.
 */
function usesPythonTools(spec: ConfigSpec): { calls: boolean; kept: boolean } {
  const jobs = jobSettings(spec as Record<string, unknown>).filter((job) => job.commands.some((command) => PYTHON_TOOLS.test(command)));
  return { calls: jobs.length > 0, kept: jobs.every((job) => job.namesImage || job.container.venvPython !== undefined) };
}

function main(): void {
  const checkout = process.argv[2];
  if (!checkout) {
    console.error('usage: node dist/bench/dstack-docs.js /path/to/dstack (a checkout of github.com/dstackai/dstack)');
    process.exit(2);
  }
  const configs = [
    ...['mkdocs', 'examples'].flatMap((dir) => files(join(checkout, dir), /\.md$/)).flatMap((file) => markdownConfigs(file, checkout)),
    ...files(join(checkout, 'examples'), /\.ya?ml$/)
      .map((file) => ({ place: relative(checkout, file), text: readFileSync(file, 'utf8') }))
      .filter((config) => KINDS.includes(kindOf(config.text) ?? '')),
  ];
  // `${{ env.NAME }}` and bare env entries take a value, as they would from the applying user's environment.
  const environment = new Proxy({}, { get: () => 'value', has: () => true }) as Record<string, string>;
  const named = (error: SpecError) => /not supported|deprecated/.test(error.message);
  const partOfExcerpt = (error: SpecError) => /required field is missing|got "\.\.\."|belongs under resources|^expected a map with gpu, .*got nothing$/.test(error.message);
  const refused: { place: string; errors: SpecError[] }[] = [];
  const toolsLost: string[] = [];
  let callingTools = 0;
  for (const config of configs) {
    const { specs, errors } = parseSpecText(config.text, config.place, environment);
    if (errors.length > 0) {
      refused.push({ place: config.place, errors });
      continue;
    }
    const tools = specs.filter((spec) => spec.type !== 'fleet').map(usesPythonTools);
    if (tools.some((t) => t.calls)) callingTools++;
    if (!tools.every((t) => t.kept)) toolsLost.push(config.place);
  }
  const byName = refused.filter((r) => r.errors.every(named));
  const excerpts = refused.filter((r) => !r.errors.every(named) && r.errors.every(partOfExcerpt));
  const otherwise = refused.filter((r) => !byName.includes(r) && !excerpts.includes(r));
  const accepted = configs.length - refused.length;
  const complete = configs.length - excerpts.length;
  const share = (part: number, whole: number) => `${(100 * part / whole).toFixed(1)}%`;
  console.log(`${configs.length} configurations: ${accepted} accepted (${share(accepted, configs.length)}), ${byName.length} refused by name, ${excerpts.length} excerpts, ${otherwise.length} refused otherwise`);
  console.log(`of the ${complete} complete configurations (excerpts left out): ${accepted} accepted (${share(accepted, complete)}), ${byName.length} refused by name (${share(byName.length, complete)})`);
  const kept = accepted - toolsLost.length;
  console.log(`accepted with their meaning kept: ${kept} (${share(kept, complete)} of the complete); ${callingTools} accepted call uv or pip, ${toolsLost.length} of them where neither the image nor a virtual environment gives them as dstack does${toolsLost.map((place) => `\n  ${place}`).join('')}`);
  const features = new Map<string, number>();
  for (const error of byName.flatMap((r) => r.errors)) features.set(error.path, (features.get(error.path) ?? 0) + 1);
  console.log(`\nrefused by name, by field:\n${[...features].sort((a, b) => b[1] - a[1]).map(([path, count]) => `  ${String(count).padStart(4)}  ${path}`).join('\n')}`);
  console.log(`\nexcerpts, which dstack refuses as well:\n${excerpts.map((r) => `  ${r.place}: ${r.errors.map((e) => e.path).join(', ')}`).join('\n')}`);
  console.log(`\nrefused otherwise:\n${otherwise.map((r) => `  ${r.place}\n${r.errors.map((e) => `    ${e.path}: ${e.message}`).join('\n')}`).join('\n')}`);
}

main();
