import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { SecretInfo } from '../api/secrets.js';
import type { Queryable, Row } from './db.js';

/** AES-256-GCM: a 32-byte key, a fresh 12-byte nonce per value, a 16-byte tag. */
export const SECRETS_KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** The stored form's version, so that a later change of scheme can tell old values apart. */
const FORMAT = 'v1';

/** A value that the server's key cannot open: set under another key, or changed in the database. */
export class SecretUndecryptableError extends Error {}

/**
 * Encrypts and decrypts secret values with the server's key. The project and name are bound to each value
 * (GCM's additional data), so a value copied to another secret or project in the database does not open.
 */
export class SecretBox {
  constructor(private readonly key: Buffer) {
    if (key.length !== SECRETS_KEY_BYTES) throw new Error(`a secrets key is ${SECRETS_KEY_BYTES} bytes, not ${key.length}`);
  }

  seal(projectId: string, name: string, value: string): string {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce);
    cipher.setAAD(Buffer.from(`${projectId}/${name}`));
    const data = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    return [FORMAT, nonce, cipher.getAuthTag(), data].map((part) => (typeof part === 'string' ? part : part.toString('base64'))).join(':');
  }

  open(projectId: string, name: string, sealed: string): string {
    const [format, nonce, tag, data] = sealed.split(':');
    try {
      if (format !== FORMAT || nonce === undefined || tag === undefined || data === undefined) throw new Error('unknown form');
      const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(nonce, 'base64'), { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(`${projectId}/${name}`));
      decipher.setAuthTag(Buffer.from(tag, 'base64'));
      return Buffer.concat([decipher.update(Buffer.from(data, 'base64')), decipher.final()]).toString('utf8');
    } catch {
      throw new SecretUndecryptableError(`secret ${name} cannot be decrypted with this server's key: it was set under another key (every server on one database needs the same secrets key; see docs/server.md)`);
    }
  }
}

const toInfo = (row: Row): SecretInfo => ({ name: row.name, createdAt: row.created_at.toISOString(), updatedAt: row.updated_at.toISOString() });

/** Sets the secret's value; `created` says whether it is new. */
export async function setSecret(db: Queryable, box: SecretBox, projectId: string, name: string, value: string): Promise<{ secret: SecretInfo; created: boolean }> {
  const rows = await db.query(
    `INSERT INTO secrets (project_id, name, sealed) VALUES ($1, $2, $3)
     ON CONFLICT (project_id, name) DO UPDATE SET sealed = EXCLUDED.sealed, updated_at = now()
     RETURNING name, created_at, updated_at, (xmax = 0) AS created`, [projectId, name, box.seal(projectId, name, value)]);
  return { secret: toInfo(rows[0]!), created: rows[0]!.created === true };
}

/** The secret's value and dates, or null when the project has no secret of that name. */
export async function getSecret(db: Queryable, box: SecretBox, projectId: string, name: string): Promise<(SecretInfo & { value: string }) | null> {
  const rows = await db.query('SELECT * FROM secrets WHERE project_id = $1 AND name = $2', [projectId, name]);
  return rows[0] ? { ...toInfo(rows[0]), value: box.open(projectId, name, rows[0].sealed) } : null;
}

/** The project's secrets by name: names and dates, never values. */
export async function listSecrets(db: Queryable, projectId: string): Promise<SecretInfo[]> {
  return (await db.query('SELECT name, created_at, updated_at FROM secrets WHERE project_id = $1 ORDER BY name', [projectId])).map(toInfo);
}

/** Whether there was such a secret to delete. */
export async function deleteSecret(db: Queryable, projectId: string, name: string): Promise<boolean> {
  return (await db.query('DELETE FROM secrets WHERE project_id = $1 AND name = $2 RETURNING name', [projectId, name])).length > 0;
}

/** The values of the named secrets that exist; a name missing from the answer has no secret. */
export async function secretValues(db: Queryable, box: SecretBox, projectId: string, names: readonly string[]): Promise<Map<string, string>> {
  if (names.length === 0) return new Map();
  const rows = (await db.query('SELECT name, sealed FROM secrets WHERE project_id = $1', [projectId])).filter((row) => names.includes(row.name));
  return new Map(rows.map((row) => [row.name as string, box.open(projectId, row.name, row.sealed)]));
}

/**
 * The values of the secrets a job or probe names, or why it cannot have them: a secret the project does not have
 * (named, never a value), or one this server's key cannot open.
 */
export async function requiredSecrets(db: Queryable, box: SecretBox, projectId: string, names: readonly string[]): Promise<Map<string, string> | string> {
  let values: Map<string, string>;
  try {
    values = await secretValues(db, box, projectId, names);
  } catch (error) {
    if (error instanceof SecretUndecryptableError) return error.message;
    throw error;
  }
  const missing = names.filter((name) => !values.has(name));
  if (missing.length === 0) return values;
  const [noun, verb, pronoun] = missing.length === 1 ? ['secret', 'is', 'it'] : ['secrets', 'are', 'each'];
  return `${noun} ${missing.join(', ')} ${verb} not set in the project; set ${pronoun} with: orchestrator secret set ${missing[0]}`;
}
