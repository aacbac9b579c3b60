/**
 * The server under test in the gateway benchmark, in a process of its own so that its memory can be read from
 * /proc and its event loop carries nothing of the load generator's. Started with `fork` by bench/gateway.ts:
 * argv is the server's folder and its database URL (empty for PGlite). It answers the parent's SQL questions
 * (the agents' addresses and tokens, instance timestamps) over the IPC channel, since a PGlite database can be
 * opened by one process only.
 */
import { startServer } from '../server/server.js';

export interface ServerReady {
  url: string;
  driver: string;
}
export interface Question {
  id: number;
  sql: string;
  params: unknown[];
}
export interface Answer {
  id: number;
  rows?: Record<string, unknown>[];
  error?: string;
}

const [dir, databaseUrl] = process.argv.slice(2);
const server = await startServer({ port: 0, dir, databaseUrl: databaseUrl || undefined, adminToken: 'bench-token', logLevel: 'error' });
const send = (message: ServerReady | Answer) => process.send!(message);
process.on('message', (question: Question) => {
  server.db.query(question.sql, question.params).then(
    (rows) => send({ id: question.id, rows }),
    (error: Error) => send({ id: question.id, error: error.message }),
  );
});
process.once('disconnect', () => void server.close().finally(() => process.exit(0)));
send({ url: server.url, driver: server.db.driver });
