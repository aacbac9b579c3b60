import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SECRETS_KEY_BYTES } from '../store/secrets.js';
import { ConfigError, StartupError } from './config.js';

export const SECRETS_KEY_FILE = 'secrets-key';

/** Why `text` is not a secrets key (32 bytes in base64), or null when it is one. */
export function secretsKeyProblem(text: string): string | null {
  const trimmed = text.trim();
  const bytes = /^[A-Za-z0-9+/]+={0,2}$/.test(trimmed) ? Buffer.from(trimmed, 'base64').length : null;
  if (bytes === SECRETS_KEY_BYTES) return null;
  return `expected ${SECRETS_KEY_BYTES} random bytes in base64, as \`openssl rand -base64 32\` prints them${bytes === null ? '' : `, got ${bytes} bytes`}`;
}

/**
 * The key that encrypts the projects' secrets: config.yml's `secrets.key` when given (servers sharing a
 * database share it), otherwise the `secrets-key` file in the server's folder, made on the first start (0600).
 */
export function loadSecretsKey(dir: string, configured: string | undefined): Buffer {
  if (configured !== undefined) {
    const problem = secretsKeyProblem(configured);
    if (problem) throw new ConfigError(`secrets.key in config.yml: ${problem}`);
    return Buffer.from(configured.trim(), 'base64');
  }
  const path = join(dir, SECRETS_KEY_FILE);
  try {
    writeFileSync(path, `${randomBytes(SECRETS_KEY_BYTES).toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const text = readFileSync(path, 'utf8');
  const problem = secretsKeyProblem(text);
  if (problem) throw new StartupError(`${path}: ${problem}; it encrypts the projects' secrets, so restore it from a backup rather than replace it`);
  return Buffer.from(text.trim(), 'base64');
}
