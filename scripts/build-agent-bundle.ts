import { fileURLToPath } from 'node:url';
import { buildAgentBundle } from '../backends/ssh/agent-bundle.js';

/** `npm run build`'s last step: the single-file agent that the SSH backend copies to hosts, at dist/agent-bundle/agent.mjs. */
await buildAgentBundle(fileURLToPath(new URL('../dist/agent-bundle/agent.mjs', import.meta.url)));
