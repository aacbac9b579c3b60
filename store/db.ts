export type Row = Record<string, any>;

export interface Queryable {
  query<T extends Row = Row>(sql: string, params?: unknown[]): Promise<T[]>;
}

/** The one database interface the rest of the server uses; postgres.js and PGlite stand behind it. */
export interface Db extends Queryable {
  readonly driver: 'postgres' | 'pglite';
  /** Runs several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  notify(channel: string, payload?: string): Promise<void>;
  close(): Promise<void>;
  /**
   * The same database for work that nobody waits on (the controllers' loops): its statements queue behind those of
   * requests, so that a busy controller does not make `ps` wait for its whole queue (store/query-priority.ts).
   */
  readonly background: Db;
}

/**
 * Ends a statement whose best plan is the same for any values and any size of its tables: its rows are found by their
 * keys. The embedded database plans every other statement again at each run, with its values, since it is never
 * analysed and a plan kept from its tables' first sizes could turn slow as they grow; a statement so marked it plans
 * once and keeps (store/pglite-statements.ts; test/planned-once.test.ts holds each to using its keys). PostgreSQL
 * chooses for itself, as for any statement.
 */
export const PLANNED_ONCE = '\n/* planned once */';

export function plannedOnce(sql: string): string {
  return sql + PLANNED_ONCE;
}
