import type { CAC } from 'cac';
import { BUDGET_PERIODS, ON_EXCEED } from '../../api/costs.js';
import type { Project } from '../../api/objects.js';
import { optionText } from '../args.js';
import { ApiClient } from '../client.js';
import { checkProjectName, configPath, loadConfig, normalizeUrl, saveConfig, withDefault, withProject } from '../config.js';
import { action, CliError } from '../errors.js';
import { printJson } from '../format.js';
import { budgetAction } from '../budget.js';
import { renderTable } from '../table.js';

interface ProjectFlags {
  default?: boolean;
  json?: boolean;
}

const ACTIONS = ['add', 'list', 'set-default', 'budget'];

export function registerProject(cli: CAC): void {
  cli.command('project [action] [name]', 'Manage the servers and projects this client talks to: add, list, set-default; budget [set|remove] shows or changes a project\'s budget')
    .option('--name <name>', 'add: the project\'s name on the server')
    .option('--url <url>', 'add: the server\'s URL, e.g. http://127.0.0.1:3000')
    .option('--token <token>', 'add: your token on that server')
    .option('--default', 'add: make it the default project')
    .option('--json', 'list, budget: print JSON (without tokens)')
    .option('--amount <dollars>', 'budget set: dollars per period')
    .option('--period <period>', `budget set: ${BUDGET_PERIODS.join(', ')} (calendar, UTC)`)
    .option('--on-exceed <action>', `budget set: ${ON_EXCEED.join(', ')} (default warn)`)
    .option('--alerts <percents>', 'budget set: percentages that record an alert, such as 50,80,100')
    .option('--project <name>', 'budget: the project (default: the default project)')
    .example('orchestrator project add --name main --url http://127.0.0.1:3000 --token TOKEN')
    .example('orchestrator project set-default main')
    .example('orchestrator project budget set --amount 500 --period month --on-exceed stop_new')
    .action(action(async (verb: string | undefined, name: string | undefined, flags: ProjectFlags) => {
      switch (verb ?? 'list') {
        case 'add': return addProject(flags);
        case 'list': return listProjects(flags);
        case 'set-default': return setDefault(name);
        case 'budget': return budgetAction(name, flags);
        default: throw new CliError(`unknown project action "${verb}"; use one of ${ACTIONS.join(', ')}`);
      }
    }));
}

function required(flag: string): string {
  const value = optionText([flag]);
  if (value === undefined || value.trim() === '') throw new CliError(`project add needs --${flag}`);
  return value.trim();
}

async function addProject(flags: ProjectFlags): Promise<void> {
  const name = required('name');
  const url = normalizeUrl(required('url'));
  const token = required('token');
  checkProjectName(name);
  const project = await new ApiClient({ name, url, token }).get<Project>(`/api/projects/${encodeURIComponent(name)}`);
  const config = withProject(loadConfig(), { name, url, token }, flags.default === true);
  saveConfig(config);
  const isDefault = config.projects.find((p) => p.name === name)?.default === true;
  process.stdout.write(`project ${name} at ${url} added${isDefault ? ' as the default' : ''} (backends: ${project.backends.join(', ') || 'none'}); settings in ${configPath()}\n`);
}

function listProjects(flags: ProjectFlags): void {
  const { projects } = loadConfig();
  if (flags.json === true) {
    printJson(projects.map((p) => ({ name: p.name, url: p.url, default: p.default === true })));
    return;
  }
  if (projects.length === 0) {
    process.stdout.write('no projects; add one with orchestrator project add --name NAME --url URL --token TOKEN\n');
    return;
  }
  process.stdout.write(renderTable(['project', 'url', 'default'], projects.map((p) => [p.name, p.url, p.default ? 'yes' : ''])));
}

function setDefault(name: string | undefined): void {
  const chosen = name ?? optionText(['name']);
  if (!chosen) throw new CliError('give the project: orchestrator project set-default NAME');
  saveConfig(withDefault(loadConfig(), String(chosen)));
  process.stdout.write(`default project: ${chosen}\n`);
}
