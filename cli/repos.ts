import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve, sep } from 'node:path';
import type { JobFile, JobRepo } from '../api/agent.js';
import { parseRepoEntry, type RepoEntry } from '../api/mappings.js';
import { CliError } from './errors.js';
import { expandHome, MAX_UPLOAD_BYTES, type UploadBudget } from './upload.js';

/** How long a remote may take to answer `git ls-remote` before the repo is uploaded from the working tree instead. */
const REMOTE_TIMEOUT_MS = 15_000;

interface GitResult {
  ok: boolean;
  stdout: Buffer;
  stderr: string;
}

function git(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): GitResult {
  const result = spawnSync('git', args, {
    cwd, timeout: timeoutMs, maxBuffer: 2 * MAX_UPLOAD_BYTES + 1024 * 1024,
    env: { ...process.env, GIT_TERMINAL_PROMPT: '0', LC_ALL: 'C', ...env },
  });
  if (result.error && (result.error as NodeJS.ErrnoException).code === 'ENOENT') throw new CliError('repos: git is not installed; install it to apply a run with local repos');
  return { ok: result.status === 0, stdout: result.stdout ?? Buffer.alloc(0), stderr: (result.stderr ?? Buffer.alloc(0)).toString().trim() };
}

function text(result: GitResult): string {
  return result.stdout.toString().trim();
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** The remote the instance is to clone from: the current branch's upstream, else origin, else the only one. */
function remoteName(root: string): string | null {
  const upstream = git(root, ['rev-parse', '--abbrev-ref', '--symbolic-full-name', '@{u}']);
  if (upstream.ok && text(upstream).includes('/')) return text(upstream).split('/')[0]!;
  const remotes = text(git(root, ['remote'])).split('\n').filter(Boolean);
  if (remotes.includes('origin')) return 'origin';
  return remotes.length === 1 ? remotes[0]! : null;
}

/**
 * The commit the instance checks out: HEAD when the remote has it, else the newest commit HEAD shares with
 * the remote's branches (the unpushed commits then travel in the diff); null when they share none.
 */
function baseCommit(root: string, tips: string[]): string | null {
  const head = text(git(root, ['rev-parse', 'HEAD']));
  const known = tips.filter((tip) => git(root, ['cat-file', '-e', `${tip}^{commit}`]).ok);
  if (known.some((tip) => tip === head || git(root, ['merge-base', '--is-ancestor', head, tip]).ok)) return head;
  if (known.length === 0) return null;
  const shared = git(root, ['merge-base', head, ...known]);
  return shared.ok ? text(shared) : null;
}

/** Every change of the working tree since `base`, untracked files included, ignored ones not, without touching the user's index. */
function workingTreeDiff(root: string, base: string): Buffer {
  const scratch = mkdtempSync(join(tmpdir(), 'orchestrator-repo-'));
  try {
    const index = join(scratch, 'index');
    const realIndex = resolve(root, text(git(root, ['rev-parse', '--git-path', 'index'])));
    if (existsSync(realIndex)) copyFileSync(realIndex, index);
    const env = { GIT_INDEX_FILE: index };
    const added = git(root, ['add', '--all', '--', '.'], env);
    if (!added.ok) throw new CliError(`repos: ${root}: git add failed: ${added.stderr}`);
    const diff = git(root, ['diff', '--cached', '--binary', '--no-color', '--no-ext-diff', base], env);
    if (!diff.ok) throw new CliError(`repos: ${root}: git diff failed: ${diff.stderr}`);
    return diff.stdout;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The files of a working tree: for a git repo those git does not ignore, else every regular file under the folder. */
function treeFiles(root: string, isGit: boolean): string[] {
  if (isGit) {
    return text(git(root, ['ls-files', '-z', '--cached', '--others', '--exclude-standard'])).split('\0').filter(Boolean);
  }
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.isFile()) files.push(relative(root, full).split(sep).join('/'));
    }
  };
  walk(root);
  return files.sort();
}

function uploadTree(root: string, isGit: boolean, path: string, budget: UploadBudget, why: string): JobRepo {
  const files: JobFile[] = [];
  let bytes = 0;
  for (const name of treeFiles(root, isGit)) {
    const full = join(root, name);
    const stats = lstatSync(full, { throwIfNoEntry: false });
    if (!stats?.isFile()) continue;
    const content = readFileSync(full);
    bytes += content.length;
    if (bytes > budget.leftBytes) {
      throw new CliError(`repos: ${root} has no remote the instance can clone (${why}), and its working tree is over ${mib(budget.leftBytes)}, what is left of the ${mib(MAX_UPLOAD_BYTES)} one apply carries; push it to a git server the instance reaches`);
    }
    files.push({ path: name, contentBase64: content.toString('base64'), mode: stats.mode & 0o777 });
  }
  budget.leftBytes -= bytes;
  process.stderr.write(`repos: ${root}: ${why}; uploading its working tree (${files.length} files, ${mib(bytes)})\n`);
  return { path, files };
}

/** A local repo entry, read: the remote, the commit and the uncommitted changes, or the working tree when no remote answers. */
function localRepo(entry: RepoEntry, baseDir: string, budget: UploadBudget): JobRepo {
  const folder = resolve(baseDir, expandHome(entry.localPath!));
  if (!statSync(folder, { throwIfNoEntry: false })?.isDirectory()) throw new CliError(`repos: ${entry.localPath}: ${folder} is not a folder`);
  const top = git(folder, ['rev-parse', '--show-toplevel']);
  if (!top.ok) return uploadTree(folder, false, entry.path, budget, 'it is not a git repo');
  const root = text(top);
  if (!git(root, ['rev-parse', '--verify', '--quiet', 'HEAD']).ok) return uploadTree(root, true, entry.path, budget, 'it has no commit yet');
  const remote = remoteName(root);
  if (remote === null) return uploadTree(root, true, entry.path, budget, 'it has no remote');
  const url = text(git(root, ['remote', 'get-url', remote]));
  const listed = git(root, ['ls-remote', remote], {}, REMOTE_TIMEOUT_MS);
  if (!listed.ok) return uploadTree(root, true, entry.path, budget, `its remote ${remote} did not answer (${listed.stderr.split('\n').pop() || 'timed out'})`);
  const tips = [...new Set(text(listed).split('\n').map((line) => line.split('\t')[0]!).filter(Boolean))];
  const base = baseCommit(root, tips);
  if (base === null) return uploadTree(root, true, entry.path, budget, `its remote ${remote} has none of its commits`);
  const diff = workingTreeDiff(root, base);
  if (diff.length > budget.leftBytes) {
    throw new CliError(`repos: the changes in ${root} that ${remote} lacks (uncommitted, and commits since ${base.slice(0, 8)}) come to ${mib(diff.length)}, over the ${mib(budget.leftBytes)} left of the ${mib(MAX_UPLOAD_BYTES)} one apply carries; commit and push them, then apply again`);
  }
  budget.leftBytes -= diff.length;
  return { path: entry.path, url, hash: base, ...(diff.length > 0 ? { diffBase64: diff.toString('base64') } : {}) };
}

/**
 * A run's `repos` as the instance will check them out, one per entry: URL entries as written, local folders
 * (relative to the configuration's folder) read from this machine within what is left of `budget`.
 */
export function collectRepos(entries: readonly Parameters<typeof parseRepoEntry>[0][], baseDir: string, budget: UploadBudget): JobRepo[] {
  const repos = entries.map((written) => {
    const entry = parseRepoEntry(written);
    if (entry.url !== null) return { path: entry.path, url: entry.url, ...(entry.branch ? { branch: entry.branch } : {}), ...(entry.hash ? { hash: entry.hash } : {}) };
    return localRepo(entry, baseDir, budget);
  });
  const paths = new Set<string>();
  for (const repo of repos) {
    if (paths.has(repo.path)) throw new CliError(`repos: two repos go to ${repo.path}; give one of them another path`);
    paths.add(repo.path);
  }
  return repos;
}
