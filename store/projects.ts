import { hash, randomBytes, randomUUID } from 'node:crypto';
import type { Member, Project, Role, User } from '../api/objects.js';
import type { BackendConfig } from '../backends/config.js';
import { plannedOnce, type Db, type Queryable } from './db.js';

export interface ProjectRecord {
  id: string;
  name: string;
  backends: BackendConfig[];
  createdAt: Date;
}

/** The user that every server makes, or gives back its token, at each start. */
export const SERVER_ADMIN = 'admin';

export interface UserRecord {
  id: string;
  name: string;
  globalRole: Role;
  createdAt: Date;
}

export function hashToken(token: string): string {
  return hash('sha256', token, 'hex');
}

/** Hex, so that a token never starts with "-" and is never read as an option where it is passed as --token's value. */
export function newToken(): string {
  return randomBytes(32).toString('hex');
}

/** PostgreSQL's SQLSTATE for a unique index's conflict; PGlite reports the same. */
const UNIQUE_VIOLATION = '23505';

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
  const rows = await db.query(plannedOnce('SELECT * FROM projects WHERE name = $1'), [name]);
  return rows[0] ? toProject(rows[0]) : null;
}

export async function getProjectById(db: Queryable, id: string): Promise<ProjectRecord> {
  const rows = await db.query(plannedOnce('SELECT * FROM projects WHERE id = $1'), [id]);
  return toProject(rows[0]);
}

/** Every project's id. */
export async function listProjectIds(db: Queryable): Promise<string[]> {
  return (await db.query<{ id: string }>('SELECT id FROM projects')).map((row) => row.id);
}

export async function listProjectsOf(db: Queryable, user: UserRecord): Promise<ProjectRecord[]> {
  const rows = user.globalRole === 'admin'
    ? await db.query('SELECT * FROM projects ORDER BY name')
    : await db.query(`SELECT p.* FROM projects p JOIN memberships m ON m.project_id = p.id
                      WHERE m.user_id = $1 ORDER BY p.name`, [user.id]);
  return rows.map(toProject);
}

export const toUser = (r: any): UserRecord => ({ id: r.id, name: r.name, globalRole: r.global_role, createdAt: r.created_at });

export function userView(u: UserRecord): User {
  return { name: u.name, admin: u.globalRole === 'admin', createdAt: u.createdAt.toISOString() };
}

/**
 * Creates the user, or gives an existing one a new token. The token itself is never stored.
 * Two servers starting on one database insert the same admin at once: the loser trips over the
 * token's unique index before the name's conflict is seen, and once the winner has committed, its
 * second try updates that row.
 */
export async function upsertUser(db: Queryable, name: string, token: string, globalRole: Role): Promise<UserRecord> {
  const upsert = () => db.query(
    `INSERT INTO users (id, name, token_hash, global_role) VALUES ($1, $2, $3, $4)
     ON CONFLICT (name) WHERE deleted_at IS NULL
     DO UPDATE SET token_hash = EXCLUDED.token_hash, global_role = EXCLUDED.global_role RETURNING *`,
    [randomUUID(), name, hashToken(token), globalRole]);
  const rows = await upsert().catch((error: { code?: string }) => {
    if (error.code === UNIQUE_VIOLATION) return upsert();
    throw error;
  });
  return toUser(rows[0]);
}

/** A new user and its token, which exists only in this answer; null when the name is taken. */
export async function createUser(db: Queryable, name: string, globalRole: Role): Promise<{ user: UserRecord; token: string } | null> {
  const token = newToken();
  const rows = await db.query(
    `INSERT INTO users (id, name, token_hash, global_role) VALUES ($1, $2, $3, $4)
     ON CONFLICT (name) WHERE deleted_at IS NULL DO NOTHING RETURNING *`,
    [randomUUID(), name, hashToken(token), globalRole]);
  return rows[0] ? { user: toUser(rows[0]), token } : null;
}

/** Replaces the user's token; the old one, and every console session signed in with it, stop working here. */
export async function rotateToken(db: Queryable, user: UserRecord): Promise<string> {
  const token = newToken();
  await db.query('UPDATE users SET token_hash = $2 WHERE id = $1 AND deleted_at IS NULL', [user.id, hashToken(token)]);
  await db.query('DELETE FROM console_sessions WHERE user_id = $1', [user.id]);
  return token;
}

/**
 * Removes the user's token and memberships at once. The row stays, marked deleted, because the runs
 * it submitted still name it; its name is free for a new user.
 */
export async function deleteUser(db: Db, user: UserRecord): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.query('UPDATE users SET deleted_at = now(), token_hash = NULL WHERE id = $1', [user.id]);
    await tx.query('DELETE FROM memberships WHERE user_id = $1', [user.id]);
  });
}

/**
 * Looks a token up by the SHA-256 of it. The index compares hashes, so its timing can tell only about
 * the hash of a token the caller chose, never about a stored token: nothing to compare in constant time.
 */
export async function userByToken(db: Queryable, token: string): Promise<UserRecord | null> {
  const rows = await db.query(plannedOnce('SELECT * FROM users WHERE token_hash = $1 AND deleted_at IS NULL'), [hashToken(token)]);
  return rows[0] ? toUser(rows[0]) : null;
}

export async function getUser(db: Queryable, name: string): Promise<UserRecord | null> {
  const rows = await db.query('SELECT * FROM users WHERE name = $1 AND deleted_at IS NULL', [name]);
  return rows[0] ? toUser(rows[0]) : null;
}

export async function listUsers(db: Queryable): Promise<UserRecord[]> {
  const rows = await db.query('SELECT * FROM users WHERE deleted_at IS NULL ORDER BY name');
  return rows.map(toUser);
}

/** Adds the user to the project, or gives a member its new role. */
export async function addMember(db: Queryable, projectId: string, userId: string, role: Role): Promise<void> {
  await db.query(
    `INSERT INTO memberships (project_id, user_id, role) VALUES ($1, $2, $3)
     ON CONFLICT (project_id, user_id) DO UPDATE SET role = EXCLUDED.role`, [projectId, userId, role]);
}

/** The user's role in the project's members, null when not one of them. */
export async function memberRole(db: Queryable, projectId: string, userId: string): Promise<Role | null> {
  const rows = await db.query('SELECT role FROM memberships WHERE project_id = $1 AND user_id = $2', [projectId, userId]);
  return rows[0]?.role ?? null;
}

/** Whether the user was a member. */
export async function removeMember(db: Queryable, projectId: string, userId: string): Promise<boolean> {
  const rows = await db.query('DELETE FROM memberships WHERE project_id = $1 AND user_id = $2 RETURNING 1', [projectId, userId]);
  return rows.length > 0;
}

export async function listMembers(db: Queryable, projectId: string): Promise<Member[]> {
  const rows = await db.query(
    `SELECT u.name, m.role FROM memberships m JOIN users u ON u.id = m.user_id
     WHERE m.project_id = $1 ORDER BY u.name`, [projectId]);
  return rows.map((r) => ({ user: r.name, role: r.role }));
}

/** The user's role in the project, null for none; a global admin is an admin of every project. */
export async function projectRole(db: Queryable, projectId: string, user: UserRecord): Promise<Role | null> {
  return user.globalRole === 'admin' ? 'admin' : memberRole(db, projectId, user.id);
}
