import type { CAC } from 'cac';

export function registerServer(cli: CAC): void {
  cli.command('server', 'Start the orchestrator server (embedded database unless ORCHESTRATOR_DATABASE_URL is set)')
    .option('--host <host>', 'Address to listen on', { default: '127.0.0.1' })
    .option('--port <port>', 'Port to listen on', { default: 3000 })
    .action(async (options: { host: string; port: number }) => {
      const { StartupError } = await import('../../server/config.js');
      const { startServer } = await import('../../server/server.js');
      let server;
      try {
        server = await startServer({ host: options.host, port: Number(options.port) });
      } catch (error) {
        if (error instanceof StartupError) {
          process.stderr.write(`error: ${error.message}\n`);
          process.exit(1);
        }
        throw error;
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
        void server.close().finally(() => process.exit(0));
      };
      process.once('SIGINT', shutdown);
      process.once('SIGTERM', shutdown);
    });
}
