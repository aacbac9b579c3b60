import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Browser, ConsoleMessage, Page, Request, Response } from 'playwright-core';
import { eventually, type TestServer } from './server.js';

const BUILD_SCRIPT = fileURLToPath(new URL('../../console/build.ts', import.meta.url));

let built: Promise<string> | null = null;

/** The console built by its own build script into a folder of this test process, so that parallel suites never share one. */
export function builtConsole(): Promise<string> {
  built ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orch-console-'));
    await promisify(execFile)(process.execPath, ['--import', 'tsx', BUILD_SCRIPT, '--out', dir]);
    return dir;
  })();
  return built;
}

export interface ConsoleSignIn {
  status: number;
  /** `name=value` of the session cookie, as a browser sends it back. */
  cookie: string;
  setCookie: string;
  csrfToken: string;
  body: any;
}

/** Signs in as the console does: the token in the body, the session in the answer's cookie. */
export async function signInToConsole(url: string, token: string): Promise<ConsoleSignIn> {
  const response = await fetch(`${url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
  const setCookie = response.headers.get('set-cookie') ?? '';
  const body = await response.json();
  return { status: response.status, setCookie, cookie: setCookie.split(';')[0], csrfToken: body.csrfToken ?? '', body };
}

/** Ends a console suite: the browser closed, every run aborted, fleet `local` deleted and its instances gone, the server stopped. */
export async function endConsoleSuite(browser: Browser | undefined, server: TestServer | undefined): Promise<void> {
  await browser?.close();
  if (!server) return;
  for (const run of (await server.api('GET', '/api/projects/main/runs')).body) await server.api('POST', `/api/projects/main/runs/${run.name}/stop`, { abort: true });
  await server.api('DELETE', '/api/projects/main/fleets/local');
  await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 30_000, 'the local instances to go');
  await server.stop();
}

/** A new browser context signed in with `token` through the sign-in page, then on `path`; a dialog opening fails the test. */
export async function signedInPage(browser: Browser, server: TestServer, token: string, path: string, waitMs: number): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on('dialog', (dialog) => { throw new Error(`a dialog opened: ${dialog.message()}`); });
  await openSignInForm(page, server.url, waitMs);
  await page.locator('#token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('header.top nav').getByRole('link', { name: 'Runs' }).waitFor({ timeout: waitMs });
  await page.goto(`${server.url}${path}`);
  return page;
}

/**
 * Opens the console at `url` and waits for its sign-in form. When the form does not come, the failure says what the
 * page showed and which of its requests failed, so that a run that fails once can be read afterwards.
 */
export async function openSignInForm(page: Page, url: string, waitMs: number): Promise<void> {
  const seen: string[] = [];
  const failed = (request: Request) => seen.push(`request failed: ${request.method()} ${request.url()} (${request.failure()?.errorText})`);
  const answered = (response: Response) => {
    if (response.status() >= 400) seen.push(`answered ${response.status()}: ${response.request().method()} ${response.url()}`);
  };
  const scriptError = (error: Error) => seen.push(`script error: ${error.message}`);
  const consoleError = (message: ConsoleMessage) => {
    if (message.type() === 'error') seen.push(`console error: ${message.text()}`);
  };
  page.on('requestfailed', failed).on('response', answered).on('pageerror', scriptError).on('console', consoleError);
  try {
    const started = Date.now();
    await page.goto(`${url}/`);
    const loadedMs = Date.now() - started;
    try {
      await page.locator('#token').waitFor({ timeout: waitMs });
    } catch (error) {
      const shown = await page.locator('body').innerText({ timeout: 1000 }).catch((reason: Error) => `(unreadable: ${reason.message})`);
      throw new Error(`the sign-in form did not show within ${waitMs} ms of the page loading (in ${loadedMs} ms); `
        + `the page showed ${JSON.stringify(shown.slice(0, 500))}; ${seen.length ? seen.join('; ') : 'no request failed and no script error'}`, { cause: error });
    }
  } finally {
    page.off('requestfailed', failed).off('response', answered).off('pageerror', scriptError).off('console', consoleError);
  }
}
