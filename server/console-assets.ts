import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Context, Next } from 'koa';
import { HttpError } from './http-errors.js';

/**
 * Scripts and styles only from the console's own files: no inline script, no eval, nothing from elsewhere.
 * The live stream and the API are the same origin.
 */
export const CONSOLE_CSP = [
  "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
  "font-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ');

const CONTENT_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.map': 'application/json', '.svg': 'image/svg+xml',
};
/** Built names carry a hash of their content, so a browser may keep them for a year. */
const IMMUTABLE = 'public, max-age=31536000, immutable';
const ASSET_PATH = /^\/assets\/([A-Za-z0-9_-]+\.[A-Za-z0-9.]+)$/;

/** Where `npm run build` writes the console: dist/console of the checkout, whether the server runs from dist/ or from source. */
export function consoleBuildDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'dist', 'console');
}

/**
 * Serves the console for every GET that no API route answered: its hashed files under /assets, and index.html,
 * never cached, for any other path, so that each page's own URL loads the console, which then shows that page.
 */
export function consoleMiddleware(buildDir = consoleBuildDir()) {
  return async (ctx: Context, next: Next) => {
    await next();
    if (ctx.body !== undefined || ctx.status !== 404) return;
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') return;
    if (ctx.path === '/api' || ctx.path.startsWith('/api/') || ctx.path === '/metrics') return;
    ctx.set('content-security-policy', CONSOLE_CSP);
    ctx.set('x-content-type-options', 'nosniff');
    ctx.set('referrer-policy', 'no-referrer');
    // Services share this origin, sandboxed (gateway/gateway.ts): neither their pages nor another site may frame the console or embed its files.
    ctx.set('x-frame-options', 'DENY');
    ctx.set('cross-origin-resource-policy', 'same-origin');
    const asset = ASSET_PATH.exec(ctx.path);
    if (ctx.path.startsWith('/assets/')) {
      if (!asset) return;
      const file = join(buildDir, 'assets', asset[1]);
      // The build wrote each file gzip-compressed beside it: sent as it is to a browser that takes gzip.
      const gzipped = ctx.acceptsEncodings('gzip', 'identity') === 'gzip' ? await readFile(`${file}.gz`).catch(() => null) : null;
      const body = gzipped ?? await readFile(file).catch(() => null);
      if (!body) return;
      ctx.type = CONTENT_TYPES[extname(asset[1])] ?? 'application/octet-stream';
      ctx.set('cache-control', IMMUTABLE);
      ctx.vary('accept-encoding');
      if (gzipped) ctx.set('content-encoding', 'gzip');
      ctx.body = body;
      return;
    }
    const index = await readFile(join(buildDir, 'index.html')).catch(() => null);
    if (!index) throw new HttpError(404, 'console_not_built', 'the web console is not built: run `npm run build` in the checkout, then reload this page');
    ctx.set('cache-control', 'no-cache');
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = index;
  };
}
