import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { openPglite } from '../store/pglite.js';
import { DATABASE_KINDS, openScratchDb } from './helpers/databases.js';

/** The embedded database keeps statements parsed by their text (store/pglite-statements.ts); these hold on both. */
for (const kind of DATABASE_KINDS) {
  describe(`statements run again and again on ${kind}`, function () {
    let db: Db;
    let close: () => Promise<void>;

    before(async () => {
      ({ db, close } = await openScratchDb(kind));
      await db.exec(`CREATE TABLE items (id text PRIMARY KEY, spec jsonb NOT NULL, tags text[] NOT NULL, ready boolean,
        size integer, at timestamptz)`);
    });
    after(() => close());

    it('carries each parameter by its type and reads each row back by its own values, every time', async () => {
      const insert = 'INSERT INTO items (id, spec, tags, ready, size, at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id';
      for (let i = 0; i < 20; i++) {
        const at = new Date(Date.UTC(2026, 0, 1, 0, 0, i));
        const [row] = await db.query(insert, [`item-${i}`, { n: i, name: `it's "${i}"` }, [`t${i}`, 'a,b', ''], i % 2 === 0 ? true : null, i, at]);
        expect(row).to.deep.equal({ id: `item-${i}` });
      }
      for (let i = 19; i >= 0; i--) {
        const [row] = await db.query('SELECT * FROM items WHERE id = $1', [`item-${i}`]);
        expect(row).to.deep.equal({
          id: `item-${i}`, spec: { n: i, name: `it's "${i}"` }, tags: [`t${i}`, 'a,b', ''], ready: i % 2 === 0 ? true : null,
          size: i, at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)),
        });
      }
      const evens = await db.query<{ id: string }>('SELECT id FROM items WHERE ready AND size = ANY($1::int[]) ORDER BY size', [[2, 3, 4]]);
      expect(evens.map((row) => row.id)).to.deep.equal(['item-2', 'item-4']);
    });

    it('carries text parameters of every width as they are: accents, CJK, characters outside the BMP, quotes, tabs and newlines, empty strings, NULL and a megabyte', async () => {
      const texts = ['plain', 'café ñ', '日本語のログ', 'emoji 🚀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢', `quote's "double" \\ back`, 'tab\tnew\nline\r', '', 'x'.repeat(1 << 20) + 'é'];
      for (const text of texts) {
        const [row] = await db.query<{ echoed: string; bytes: number; other: string | null }>('SELECT $1::text AS echoed, octet_length($1::text) AS bytes, $2::text AS other', [text, null]);
        expect(row!.echoed === text, `${text.slice(0, 40)} (${text.length} characters) came back as it was`).to.equal(true);
        expect(row).to.include({ bytes: Buffer.byteLength(text), other: null });
      }
    });

    it('fails a statement with the database\'s error and goes on: alone, and in a transaction that is then rolled back', async () => {
      const insert = 'INSERT INTO items (id, spec, tags) VALUES ($1, $2, $3)';
      const failure = await db.query(insert, ['item-1', {}, []]).catch((error: unknown) => error);
      expect(failure).to.include({ code: '23505' });
      const rolledBack = await db.transaction(async (tx) => {
        await tx.query(insert, ['item-new', {}, []]);
        await tx.query(insert, ['item-2', {}, []]);
      }).catch((error: unknown) => error);
      expect(rolledBack).to.include({ code: '23505' });
      expect(await db.query('SELECT id FROM items WHERE id = $1', ['item-new'])).to.deep.equal([]);
      await db.query(insert, ['item-new', {}, []]);
      expect(await db.query('SELECT id FROM items WHERE id = $1', ['item-new'])).to.deep.equal([{ id: 'item-new' }]);
    });

    it('reads text back as it was written: many-byte characters, a leading byte-order mark, empty and null, and rows of 300 kB', async () => {
      const texts = ['grüße 日本語 🚀', '\uFEFFstarts with a byte-order mark', '', 'x'.repeat(300_000) + 'é'];
      for (const [i, text] of texts.entries()) {
        await db.query('INSERT INTO items (id, spec, tags) VALUES ($1, $2, $3)', [`text-${i}`, { text }, [text, '']]);
      }
      await db.query('INSERT INTO items (id, spec, tags) VALUES ($1, $2, $3)', ['text-null', {}, []]);
      const rows = await db.query<{ id: string; spec: { text?: string }; tags: string[]; ready: null }>(
        `SELECT id, spec, tags, ready FROM items WHERE id LIKE 'text-%' ORDER BY id`);
      expect(rows.map((row) => row.spec.text)).to.deep.equal([...texts, undefined]);
      expect(rows.map((row) => row.tags)).to.deep.equal([...texts.map((text) => [text, '']), []]);
      expect(rows.every((row) => row.ready === null)).to.equal(true);
    });

    it('reads a thousand rows of one answer, each its own', async () => {
      const rows = await db.query<{ n: number; label: string }>(`SELECT n, 'row ' || n AS label FROM generate_series(1, $1::int) AS n`, [1000]);
      expect(rows).to.have.length(1000);
      expect(rows.every((row, i) => row.n === i + 1 && row.label === `row ${i + 1}`)).to.equal(true);
    });

    it('tells a listener of each notification once, sent by a statement alone or by a transaction, and no more once it stops listening', async () => {
      const heard: string[] = [];
      const unlisten = await db.listen('orchestrator_statements_test', (payload) => heard.push(payload));
      await db.notify('orchestrator_statements_test', 'alone');
      await db.query(`SELECT pg_notify('orchestrator_statements_test', $1)`, ['by a query']);
      await db.transaction(async (tx) => {
        await tx.query(`SELECT pg_notify('orchestrator_statements_test', $1)`, ['in a transaction']);
      });
      for (let waited = 0; heard.length < 3 && waited < 2000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
      await unlisten();
      await db.notify('orchestrator_statements_test', 'after');
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(heard).to.deep.equal(['alone', 'by a query', 'in a transaction']);
    });

    it('runs more distinct statements than it keeps, and each still answers for itself', async () => {
      for (let round = 0; round < 2; round++) {
        for (let i = 0; i < 400; i++) {
          const [row] = await db.query(`SELECT $1::int + ${i} AS sum`, [round]);
          expect(row).to.deep.equal({ sum: round + i });
        }
      }
    });
  });
}

describe('statements kept parsed by the embedded database', function () {
  let db: Db;

  before(async () => {
    db = await openPglite();
    await db.exec('CREATE TABLE items (id text PRIMARY KEY)');
    await db.query('INSERT INTO items (id) VALUES ($1)', ['item-1']);
  });
  after(() => db.close());

  // postgres.js keeps statements per connection too, and reports such a change as an error ("cached plan must not
  // change result type"); the server changes its tables only while it migrates, before its other statements.
  it('answers a statement after a change of its table with the table as it now is, in a transaction or not', async () => {
    const read = 'SELECT * FROM items WHERE id = $1';
    expect((await db.query(read, ['item-1']))[0]).to.deep.equal({ id: 'item-1' });
    await db.query('ALTER TABLE items ADD COLUMN owner text');
    expect((await db.query(read, ['item-1']))[0]).to.deep.equal({ id: 'item-1', owner: null });
    await db.exec('ALTER TABLE items ADD COLUMN note text');
    const inTransaction = await db.transaction(async (tx) => (await tx.query(read, ['item-1']))[0]);
    expect(inTransaction).to.deep.equal({ id: 'item-1', owner: null, note: null });
  });

  it('answers a kept statement anew when its table changed where nothing said so (DDL inside a function)', async () => {
    await db.exec(`CREATE FUNCTION add_label() RETURNS void LANGUAGE plpgsql AS $$ BEGIN ALTER TABLE items ADD COLUMN label text; END $$`);
    const read = 'SELECT * FROM items WHERE id = $1';
    expect(Object.keys((await db.query(read, ['item-1']))[0]!)).to.not.include('label');
    await db.query('SELECT add_label()');
    expect((await db.query(read, ['item-1']))[0]).to.include({ id: 'item-1', label: null });
  });

  it('holds a bounded number of parsed statements however many distinct ones it runs', async () => {
    for (let i = 0; i < 400; i++) await db.query(`SELECT $1::int + ${i} AS sum`, [1]);
    const [{ kept }] = await db.query<{ kept: number }>('SELECT count(*)::int AS kept FROM pg_prepared_statements');
    // 256 kept at most, and the two statements that set the plan mode (store/pglite-statements.ts), parsed once each.
    expect(kept).to.be.within(200, 256 + 2);
  });
});
