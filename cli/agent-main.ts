import { cac } from 'cac';
import { registerAgent } from './commands/agent.js';

/**
 * `orchestrator agent` alone: the entry of the single-file agent that the SSH backend uploads to a host
 * (backends/ssh/agent-bundle.ts), which needs none of the server's or the CLI's other commands.
 */
const cli = cac('orchestrator');
registerAgent(cli);
cli.help();
cli.parse();
