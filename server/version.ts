import { readFileSync } from 'node:fs';

function findVersion(): string {
  for (const candidate of ['../package.json', '../../package.json']) {
    try {
      return (JSON.parse(readFileSync(new URL(candidate, import.meta.url), 'utf8')) as { version: string }).version;
    } catch {
      continue;
    }
  }
  return '0.0.0';
}

export const VERSION = findVersion();
