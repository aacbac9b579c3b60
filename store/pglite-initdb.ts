/**
 * `node pglite-initdb.js <dir>`: makes a new PGlite data directory and exits. openPglite runs it as a process of its
 * own because PGlite's initdb runs in a second WebAssembly instance whose memory (several hundred MB) the server's
 * process would keep for its whole life. It ends when its parent does, so a killed server leaves no initdb behind.
 */
import { PGlite } from '@electric-sql/pglite';

process.on('disconnect', () => process.exit(1));
const pg = await PGlite.create(process.argv[2]);
await pg.close();
process.exit(0);
