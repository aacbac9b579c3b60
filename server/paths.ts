import { homedir } from 'node:os';
import { join } from 'node:path';

export function serverDir(): string {
  return process.env.ORCHESTRATOR_SERVER_DIR ?? join(homedir(), '.orchestrator', 'server');
}
