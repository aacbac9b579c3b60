import { normalizeResources } from '../api/resources.js';
import type { Db } from '../store/db.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { insertRun } from '../store/runs.js';

/** Makes `count` runs in one statement, each a copy of a task with `fields` over it, named and keyed `<prefix><n>`. */
export type RunCopier = (count: number, prefix: string, fields: Record<string, unknown>) => Promise<unknown>;

/** A project `main` with a task of its own, and what copies that task many times over (thousands of rows at once). */
export async function runCopier(db: Db): Promise<RunCopier> {
  const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
  const user = await upsertUser(db, 'bench', 'bench-token', 'admin');
  const template = await insertRun(db, { projectId: project.id, userId: user.id, name: 'template', kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement: normalizeResources(undefined, 'run'), priority: 0 });
  return (count, prefix, fields) => db.query(
    `INSERT INTO runs SELECT (jsonb_populate_record(r, $2::jsonb || jsonb_build_object('id', $3 || i, 'name', $3 || i))).*
     FROM runs r, generate_series(1, $4) i WHERE r.id = $1`, [template!.id, fields, prefix, count]);
}
