import { parse, protocol, type messages, type ParserOptions, type SerializerOptions } from '@electric-sql/pglite';
import { PLANNED_ONCE, type Queryable, type Row } from './db.js';
import { readAnswer, type Answer, type Notification } from './pglite-answer.js';
import { bindMessage, EXECUTE, SYNC } from './pglite-bind.js';
import type { PgliteThread } from './pglite-thread.js';

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
  /** Statements are sent to the database's thread in turn, a transaction's all in one turn (see `Turns`). */
  private readonly turns = new Turns();

  /**
   * `notified`: told of each notification that comes with an answer. `types` convert values to and from text by
   * their type's oid, as PGlite's own do.
   */
  constructor(
    private readonly thread: PgliteThread,
    private readonly types: { serializers: SerializerOptions; parsers: ParserOptions },
    private readonly notified: (notification: Notification) => void,
  ) {}

  /** Runs one statement, sent when no other is being sent: answers come while later statements wait in the thread. */
  query<T extends Row>(text: string, params: readonly unknown[]): Promise<T[]> {
    return this.sentInTurn(this.turns, text, params, true);
  }

  /**
   * Runs `fn` between `BEGIN` and `COMMIT`, or `ROLLBACK` when it throws; a statement of it after the end is refused.
   * No other statement is sent meanwhile: on the one session, it would run inside the transaction. A COMMIT that the
   * database answers with ROLLBACK (a statement of it failed and `fn` went on) throws.
   */
  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    const done = await this.turns.take();
    const own = new Turns();
    let closed = false;
    try {
      await this.simple('BEGIN', false, own);
      const result = await fn({
        query: async <R extends Row>(text: string, params: unknown[] = []) => {
          if (closed) throw new Error('Transaction is closed');
          return this.sentInTurn<R>(own, text, params, false);
        },
      });
      closed = true;
      const { commands } = await this.simple('COMMIT', true, own);
      if (commands.includes('ROLLBACK')) throw new Error('the transaction was rolled back: one of its statements failed');
      return result;
    } catch (error) {
      if (!closed) {
        closed = true;
        await this.simple('ROLLBACK', true, own);
      }
      // A setting made in the transaction went with it.
      this.forgetPlanMode();
      throw error;
    } finally {
      done();
    }
  }

  /**
   * Runs statements without parameters through the simple query protocol (several at once, DDL, `BEGIN`), none of
   * them kept; the answer's error is thrown, its notifications told.
   */
  async simple(text: string, syncToFs: boolean, turns = this.turns): Promise<Answer> {
    const sent = await turns.take();
    const answering = this.thread.run(protocol.serialize.query(text), syncToFs);
    sent();
    const answer = readAnswer(await answering, undefined, this.types.parsers);
    for (const notification of answer.notifications) this.notified(notification);
    if (answer.error) throw answer.error;
    return answer;
  }

  /** A statement of a transaction has nothing to sync to disk yet; a stale one there fails the transaction. */
  private async sentInTurn<T extends Row>(turns: Turns, text: string, params: readonly unknown[], alone: boolean): Promise<T[]> {
    try {
      return await this.run<T>(turns, text, params, alone);
    } catch (error) {
      if (!isStale(error)) throw error;
      this.close(text);
      if (!alone) throw error;
      return this.run<T>(turns, text, params, alone);
    }
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

  private async run<T extends Row>(turns: Turns, text: string, params: readonly unknown[], syncToFs: boolean): Promise<T[]> {
    const keep = KEPT_KINDS.test(text);
    const sent = await turns.take();
    let statement: Kept;
    let answering: Promise<Buffer>;
    try {
      statement = (keep && this.kept.get(text)) || await this.prepare(text, keep ? `kept_${this.named++}` : '');
      ({ answering } = await this.send(text, statement, params, syncToFs));
    } finally {
      sent();
    }
    try {
      const { rows, error, notifications } = readAnswer(await answering, statement.columns, this.types.parsers);
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

  /** Binds and executes a parsed statement, with the plan mode it is run in set first where that changes. */
  private async send(text: string, statement: Kept, params: readonly unknown[], syncToFs: boolean): Promise<{ answering: Promise<Buffer> }> {
    if (statement.name) {
      this.kept.delete(text);
      this.kept.set(text, statement);
    }
    const values = params.map((value, i) => {
      if (value === null || value === undefined) return null;
      const serialize = this.types.serializers[statement.parameterTypes[i]!];
      return serialize ? serialize(value) : String(value);
    });
    const planMode: PlanMode = text.endsWith(PLANNED_ONCE) ? 'force_generic_plan' : 'force_custom_plan';
    const setPlanMode = planMode === this.planMode ? [] : [bindMessage((await this.planModeSetter(planMode)).name, []), EXECUTE];
    this.planMode = planMode;
    const answering = this.thread.run(Buffer.concat([...setPlanMode, bindMessage(statement.name, values), EXECUTE, SYNC]), syncToFs);
    return { answering };
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
    const described: messages.BackendMessage[] = [];
    new protocol.Parser().parse(await this.thread.run(Buffer.concat(messages), false), (message) => described.push(message));
    const error = described.find((message): message is messages.DatabaseError => message.name === 'error');
    if (error) throw error;
    return {
      name,
      parameterTypes: parse.parseDescribeStatementResults(described),
      columns: described.find((message): message is messages.RowDescriptionMessage => message.name === 'rowDescription'),
    };
  }
}

/**
 * Who sends next. The thread runs what it is sent in order, so a statement sent while another's answer is awaited
 * waits there rather than here; but a statement's own messages (parse, then bind) must follow one another, and
 * nothing may come between a transaction's.
 */
class Turns {
  private last: Promise<void> = Promise.resolve();

  /** Waits for the turn; the function returned ends it. */
  async take(): Promise<() => void> {
    const previous = this.last;
    let end!: () => void;
    this.last = new Promise((resolve) => {
      end = resolve;
    });
    await previous;
    return end;
  }
}

function isStale(error: unknown): boolean {
  return STALE_STATEMENT.has((error as { code?: string }).code ?? '');
}
