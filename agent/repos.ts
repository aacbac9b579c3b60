import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import type { JobRepo } from '../api/agent.js';
import { prepareJobDirectory } from './job-files.js';

/** A clone that takes longer than this fails the job rather than hanging it in `pending`. */
const GIT_TIMEOUT_MS = 10 * 60_000;

/** The URL with any user name and password replaced, for messages: a token in a repo URL never reaches a log. */
export function redactedUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.username === '' && parsed.password === '') return url;
    parsed.username = '***';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, '$1***@');
  }
}

/** Runs git without a terminal to ask for credentials on; rejects with the end of its stderr, credentials removed. */
function git(args: string[], url: string, stdin?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, {
      env: { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_ASKPASS: 'true', LC_ALL: 'C' },
      stdio: [stdin ? 'pipe' : 'ignore', 'ignore', 'pipe'],
      timeout: GIT_TIMEOUT_MS,
    });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    child.once('error', (error) => reject(new Error(error.message)));
    child.once('close', (code, signal) => {
      if (code === 0) return resolve();
      const why = signal ? `git was killed (${signal}) after ${GIT_TIMEOUT_MS / 60_000} minutes` : stderr.trim().split('\n').slice(-3).join('; ');
      reject(new Error(why.replaceAll(url, redactedUrl(url)) || `git exited with code ${code}`));
    });
    if (stdin) child.stdin!.end(stdin);
  });
}

/**
 * Puts `repo` at `target`, a directory on this machine that is missing or empty: a clone of its URL at its
 * commit (or branch) with the applier's uncommitted changes applied, or its uploaded working tree. Throws an
 * Error that names the repo and says what to do.
 */
export async function checkoutRepo(repo: JobRepo, target: string): Promise<void> {
  if (repo.url === undefined) {
    await prepareJobDirectory(target, undefined, repo.files ?? []);
    return;
  }
  const url = repo.url;
  const shown = redactedUrl(url);
  await mkdir(target, { recursive: true });
  const branch = repo.branch === undefined ? [] : ['--branch', repo.branch];
  try {
    await git(['clone', '--quiet', ...branch, '--', url, target], url);
  } catch (error) {
    throw new Error(`could not clone ${shown}${repo.branch ? ` (branch ${repo.branch})` : ''} into ${repo.path}: ${(error as Error).message}`);
  }
  if (repo.hash !== undefined) {
    try {
      await git(['-C', target, '-c', 'advice.detachedHead=false', 'checkout', '--quiet', repo.hash], url);
    } catch {
      throw new Error(`commit ${repo.hash} is not in ${shown}; push it (git push), then apply again`);
    }
  }
  if (repo.diffBase64 !== undefined && repo.diffBase64 !== '') {
    try {
      await git(['-C', target, 'apply', '--whitespace=nowarn', '-'], url, Buffer.from(repo.diffBase64, 'base64'));
    } catch (error) {
      throw new Error(`could not apply the uncommitted changes to ${shown} at ${repo.hash ?? repo.branch ?? 'its default branch'}: ${(error as Error).message}`);
    }
  }
}

/**
 * The repos to put in place, given `holdsFiles` (whether something is at a path already, such as the image's
 * files): one with `ifExists: skip` is left out there, one with `ifExists: error` throws an Error that says so;
 * without `ifExists` the repo goes over what is there.
 */
export async function reposToPlace(repos: readonly JobRepo[], holdsFiles: (path: string) => Promise<boolean>): Promise<JobRepo[]> {
  const placed: JobRepo[] = [];
  for (const repo of repos) {
    if (repo.ifExists !== undefined && await holdsFiles(repo.path)) {
      if (repo.ifExists === 'error') throw new Error(`${repo.path} is not empty, and its repo says if_exists: error; give the repo another path, or if_exists: skip to keep what is there`);
      continue;
    }
    placed.push(repo);
  }
  return placed;
}
