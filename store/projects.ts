import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { Project } from '../api/objects.js';
import type { BackendConfig } from '../backends/config.js';
import type { Queryable } from './db.js';

export interface ProjectRecord {
  id: string;
  name: string;
  backends: BackendConfig[];
  createdAt: Date;
}


export interface UserRecord {
  id: string;
  name: string;
  globalRole: 'admin' | 'user';
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export function newToken(): string {
  return randomBytes(32).toString('base64url');
}

const toProject = (r: any): ProjectRecord => ({ id: r.id, name: r.name, backends: r.backends, createdAt: r.created_at });

export function projectView(p: ProjectRecord): Project {
  return { name: p.name, backends: p.backends.map((b) => b.type), createdAt: p.createdAt.toISOString() };
}

/** Creates the project or updates its backends; returns its record. */
export async function upsertProject(db: Queryable, name: string, backends: BackendConfig[]): Promise<ProjectRecord> {
  const rows = await db.query(
    `INSERT INTO projects (id, name, backends) VALUES ($1, $2, $3::jsonb)
     ON CONFLICT (name) DO UPDATE SET backends = EXCLUDED.backends RETURNING *`,
    [randomUUID(), name, backends]);
  return toProject(rows[0]);
}

export async function getProject(db: Queryable, name: string): Promise<ProjectRecord | null> {
  const rows = await db.query('SELECT * FROM projects WHERE name = $1', [name]);
  return rows[0] ? toProject(rows[0]) : null;
}

export async function getProjectById(db: Queryable, id: string): Promise<ProjectRecord> {
  const rows = await db.query('SELECT * FROM projects WHERE id = $1', [id]);
  return toProject(rows[0]);
}

export async function listProjectsOf(db: Queryable, user: UserRecord): Promise<ProjectRecord[]> {
  const rows = user.globalRole === 'admin'
    ? await db.query('SELECT * FROM projects ORDER BY name')
    : await db.query(`SELECT p.* FROM projects p JOIN memberships m ON m.project_id = p.id
                      WHERE m.user_id = $1 ORDER BY p.name`, [user.id]);
  return rows.map(toProject);
}

const toUser = (r: any): UserRecord => ({ id: r.id, name: r.name, globalRole: r.global_role });

/** Creates the user, or gives an existing one a new token. The token itself is never stored. */
export async function upsertUser(db: Queryable, name: string, token: string, globalRole: 'admin' | 'user'): Promise<UserRecord> {
  const rows = await db.query(
    `INSERT INTO users (id, name, token_hash, global_role) VALUES ($1, $2, $3, $4)
     ON CONFLICT (name) DO UPDATE SET token_hash = EXCLUDED.token_hash, global_role = EXCLUDED.global_role RETURNING *`,
    [randomUUID(), name, hashToken(token), globalRole]);
  return toUser(rows[0]);
}

export async function createUser(db: Queryable, name: string, globalRole: 'admin' | 'user'): Promise<{ user: UserRecord; token: string } | null> {
  const token = newToken();
  const rows = await db.query(
    `INSERT INTO users (id, name, token_hash, global_role) VALUES ($1, $2, $3, $4)
     ON CONFLICT (name) DO NOTHING RETURNING *`,
    [randomUUID(), name, hashToken(token), globalRole]);
  return rows[0] ? { user: toUser(rows[0]), token } : null;
}

/** Looks a token up by its hash; the index lookup on a hash leaks nothing about the token. */
export async function userByToken(db: Queryable, token: string): Promise<UserRecord | null> {
  const rows = await db.query('SELECT * FROM users WHERE token_hash = $1', [hashToken(token)]);
  return rows[0] ? toUser(rows[0]) : null;
}

export async function getUser(db: Queryable, name: string): Promise<UserRecord | null> {
  const rows = await db.query('SELECT * FROM users WHERE name = $1', [name]);
  return rows[0] ? toUser(rows[0]) : null;
}

export async function addMember(db: Queryable, projectId: string, userId: string, role: 'admin' | 'user'): Promise<void> {
  await db.query(
    `INSERT INTO memberships (project_id, user_id, role) VALUES ($1, $2, $3)
     ON CONFLICT (project_id, user_id) DO UPDATE SET role = EXCLUDED.role`, [projectId, userId, role]);
}

export async function isMember(db: Queryable, projectId: string, user: UserRecord): Promise<boolean> {
  if (user.globalRole === 'admin') return true;
  const rows = await db.query('SELECT 1 FROM memberships WHERE project_id = $1 AND user_id = $2', [projectId, user.id]);
  return rows.length > 0;
}
