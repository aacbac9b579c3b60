/**
 * POSIX path arithmetic for paths inside a run's container, in plain code rather than node:path, so that the
 * configuration parser (and so the console's apply page) runs in a browser too.
 */

/** Whether a relative path climbs out of the folder it is relative to (`..`, `a/../../b`); an absolute path never does. */
export function leavesFolder(path: string): boolean {
  if (path.startsWith('/')) return false;
  let depth = 0;
  for (const segment of path.split('/')) {
    if (segment === '..') depth--;
    else if (segment !== '' && segment !== '.') depth++;
    if (depth < 0) return true;
  }
  return false;
}

/** `path` resolved against the absolute folder `base`, normalised, as `path.posix.resolve(base, path)` gives it. */
export function resolveInside(base: string, path: string): string {
  const segments: string[] = [];
  for (const segment of (path.startsWith('/') ? path : `${base}/${path}`).split('/')) {
    if (segment === '..') segments.pop();
    else if (segment !== '' && segment !== '.') segments.push(segment);
  }
  return `/${segments.join('/')}`;
}
