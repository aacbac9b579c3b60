import type { CAC } from 'cac';
import { optionText, portFlag } from '../args.js';
import { CliError, unexpectedErrorLine } from '../errors.js';

export function registerServer(cli: CAC): void {
  cli.command('server', 'Start the orchestrator server (embedded database unless ORCHESTRATOR_DATABASE_URL is set)')
    .option('--host <host>', 'Address to listen on', { default: '127.0.0.1' })
    .option('--port <port>', 'Port to listen on', { default: 3000 })
    .option('--server-dir <dir>', 'The server\'s folder: config.yml, the embedded database, its keys (default: $ORCHESTRATOR_SERVER_DIR, else ~/.orchestrator/server)')
    .action(async (options: { host: string; port: number }) => {
      const { StartupError } = await import('../../server/config.js');
      const { startServer } = await import('../../server/server.js');
      const { shutdownNote } = await import('../../server/shutdown-note.js');
      let server;
      try {
        server = await startServer({ host: options.host, port: portFlag(options.port), dir: optionText(['server-dir']) });
      } catch (error) {
        const known = error instanceof StartupError || error instanceof CliError;
        process.stderr.write(`${known ? `error: ${error.message}` : unexpectedErrorLine(error, 'the server could not start')}\n`);
        process.exit(1);
      }
      const shown = server.adminTokenSource === 'generated';
      const token = shown ? server.adminToken : '<ORCHESTRATOR_SERVER_ADMIN_TOKEN>';
      process.stdout.write([
        `Applied config: ${server.configPath}`,
        `Admin token:    ${shown ? server.adminToken : '(from ORCHESTRATOR_SERVER_ADMIN_TOKEN, not shown)'}`,
        `Server URL:     ${server.url}`,
        `Web console:    ${server.url}/ (sign in with a user token)`,
        '',
        `In another terminal: orchestrator project add --name main --url ${server.url} --token ${token}`,
        '',
      ].join('\n'));
      const shutdown = () => {
        void shutdownNote(server.db)
          .then((note) => process.stderr.write(`${note}\n`), () => undefined)
          .then(() => server.close())
          .finally(() => process.exit(0));
      };
      process.once('SIGINT', shutdown);
      process.once('SIGTERM', shutdown);
    });
}
