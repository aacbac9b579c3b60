import { parse, protocol, type messages, type PGlite } from '@electric-sql/pglite';
import { PLANNED_ONCE, type Row } from './db.js';
import { readAnswer, type Notification } from './pglite-answer.js';

/** How many statements the embedded database keeps parsed at once; past it, the least recently run is closed. */
const KEPT_STATEMENTS = 256;

/** SQLSTATEs of a kept statement that no longer matches the schema (its result's columns changed) or is gone. */
const STALE_STATEMENT = new Set(['0A000', '26000']);

/**
 * Statements worth keeping: those that read or write rows. Any other (DDL, LISTEN, SET) runs unnamed, and may
 * change what a kept statement returns, so all are forgotten after it.
 */
const KEPT_KINDS = /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b/i;

/** The plan a statement runs with: made with its values at each run, or made once and kept (`plannedOnce`). */
type PlanMode = 'force_custom_plan' | 'force_generic_plan';

interface Kept {
  name: string;
  parameterTypes: number[];
  /** Its result's columns as the database described them when it parsed it; none for a statement without rows. */
  columns: messages.RowDescriptionMessage | undefined;
}

/**
 * Runs statements on PGlite as named prepared statements, kept by their text, as postgres.js does on PostgreSQL.
 * PGlite's own `query` sends each statement as six protocol messages, six calls into the database, and parses its
 * text every time; a kept statement is bound and executed in one call, with the result's columns as described when
 * it was parsed (bench/README.md, "Statements kept parsed"). How it is planned is `plan_cache_mode`'s choice
 * (store/pglite.ts).
 */
export class KeptStatements {
  private readonly kept = new Map<string, Kept>();
  /** Names of statements forgotten here and still to be closed in the database, with the next statement prepared. */
  private readonly toClose: string[] = [];
  private named = 0;
  /**
   * The session's `plan_cache_mode` as last set here, read when each statement is bound; unknown before the first
   * statement and after a transaction that set it was rolled back.
   */
  private planMode: PlanMode | undefined;
  private readonly planModeSetters = new Map<PlanMode, Kept>();

  /** `notified`: told of each notification that comes with a statement's answer, which PGlite's listeners never see. */
  constructor(private readonly pg: PGlite, private readonly notified: (notification: Notification) => void) {}

  /** Runs one statement; `inTransaction` says it belongs to an open transaction (nothing to sync to disk yet). */
  async query<T extends Row>(text: string, params: readonly unknown[], inTransaction: boolean): Promise<T[]> {
    const rows = await this.pg.runExclusive(async () => {
      try {
        return await this.run<T>(text, params);
      } catch (error) {
        if (!isStale(error)) throw error;
        this.close(text);
        if (inTransaction) throw error;
        return this.run<T>(text, params);
      }
    });
    if (!inTransaction) await this.pg.syncToFs();
    return rows;
  }

  /** Forgets every kept statement: for after statements that may change the schema. */
  forget(): void {
    for (const text of this.kept.keys()) this.close(text);
  }

  /** For after a transaction that was rolled back, with any `plan_cache_mode` it set. */
  forgetPlanMode(): void {
    this.planMode = undefined;
  }

  /** Forgets one kept statement; the database closes it with the next statement parsed. */
  private close(text: string): void {
    const statement = this.kept.get(text);
    if (!statement) return;
    this.kept.delete(text);
    this.toClose.push(statement.name);
  }

  private async run<T extends Row>(text: string, params: readonly unknown[]): Promise<T[]> {
    const keep = KEPT_KINDS.test(text);
    const statement = (keep && this.kept.get(text)) || await this.prepare(text, keep ? `kept_${this.named++}` : '');
    if (keep) {
      this.kept.delete(text);
      this.kept.set(text, statement);
    }
    const values = params.map((value, i) => {
      if (value === null || value === undefined) return null;
      const serialize = this.pg.serializers[statement.parameterTypes[i]];
      return serialize ? serialize(value) : String(value);
    });
    const { serialize } = protocol;
    const planMode: PlanMode = text.endsWith(PLANNED_ONCE) ? 'force_generic_plan' : 'force_custom_plan';
    const setPlanMode = planMode === this.planMode ? [] : [serialize.bind({ statement: (await this.planModeSetter(planMode)).name }), serialize.execute({})];
    const chunks: Buffer[] = [];
    try {
      this.planMode = planMode;
      await this.pg.execProtocolRawStream(Buffer.concat([
        ...setPlanMode,
        serialize.bind({ statement: statement.name, values }),
        serialize.execute({}),
        serialize.sync(),
      ]), { syncToFs: false, onRawData: (data) => chunks.push(Buffer.from(data)) });
      const { rows, error, notifications } = readAnswer(Buffer.concat(chunks), statement.columns, this.pg.parsers);
      for (const notification of notifications) this.notified(notification);
      if (error) throw error;
      return rows as T[];
    } catch (error) {
      // A setting made in the statement's transaction went with it.
      this.planMode = undefined;
      throw error;
    } finally {
      if (!keep) this.forget();
    }
  }

  /** The statement that sets the session's `plan_cache_mode`, parsed once; the database runs it just before a statement bound. */
  private async planModeSetter(mode: PlanMode): Promise<Kept> {
    const known = this.planModeSetters.get(mode);
    if (known) return known;
    const setter = await this.prepare(`SET plan_cache_mode = ${mode}`, `plan_mode_${mode}`);
    this.planModeSetters.set(mode, setter);
    return setter;
  }

  /** Parses a statement under `name` ('' for the unnamed statement) and learns its parameters' types. */
  private async prepare(text: string, name: string): Promise<Kept> {
    const { serialize } = protocol;
    if (name && this.kept.size >= KEPT_STATEMENTS) this.close(this.kept.keys().next().value!);
    const messages = this.toClose.splice(0).map((closing) => serialize.close({ type: 'S', name: closing }));
    messages.push(serialize.parse({ name, text }), serialize.describe({ type: 'S', name }), serialize.sync());
    const described = await this.pg.execProtocolStream(Buffer.concat(messages), { syncToFs: false });
    return {
      name,
      parameterTypes: parse.parseDescribeStatementResults(described),
      columns: described.find((message): message is messages.RowDescriptionMessage => message.name === 'rowDescription'),
    };
  }
}

function isStale(error: unknown): boolean {
  return STALE_STATEMENT.has((error as { code?: string }).code ?? '');
}
