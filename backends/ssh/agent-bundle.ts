import { existsSync } from 'node:fs';
import { mkdir, rename } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { arch } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { agentVersion } from '../../agent/version.js';
import { BackendError } from '../backend.js';

/** What is copied to a host: the agent as one file, and the Node that runs it. */
export interface AgentFiles {
  bundle: string;
  version: string;
  node: string;
  /** The terminal module (native) for the agent's SSH sessions with a terminal, where one of the host's architecture is at hand. */
  pty: { module: string; native: string } | null;
}

/** A built installation (npm run build) carries the bundle; from source it is built once per server. */
const BUILT_BUNDLE = fileURLToPath(new URL('../../agent-bundle/agent.mjs', import.meta.url));
/** The entry from source (through tsx), or as tsc compiled it into dist/. */
const ENTRY = [new URL('../../cli/agent-main.ts', import.meta.url), new URL('../../cli/agent-main.js', import.meta.url)].map((url) => fileURLToPath(url)).find(existsSync)!;

/** Imported modules made available to CommonJS code inside an ES module bundle. */
const BANNER = "import { createRequire as __r } from 'node:module'; import { fileURLToPath as __f } from 'node:url'; "
  + "import { dirname as __d } from 'node:path'; const require = __r(import.meta.url); const __filename = __f(import.meta.url); const __dirname = __d(__filename);";

let building: Promise<string> | null = null;

/** Bundles `orchestrator agent` into one file with esbuild; the terminal module stays outside, being native. */
export async function buildAgentBundle(outfile: string, entry = ENTRY): Promise<string> {
  const esbuild = await import('esbuild').catch(() => {
    throw new BackendError('the agent bundle is missing (run npm run build) and esbuild is not installed to make it', false);
  });
  await mkdir(dirname(outfile), { recursive: true });
  const partial = `${outfile}.${process.pid}.tmp`;
  await esbuild.build({
    entryPoints: [entry], bundle: true, platform: 'node', format: 'esm', target: 'node20', outfile: partial,
    external: ['@lydell/node-pty', 'cpu-features', '*.node'], banner: { js: BANNER }, logLevel: 'error',
  });
  await rename(partial, outfile);
  return outfile;
}

/** The files to copy to a host of architecture `hostArch`; null when this server has no Node for it. */
export async function agentFiles(stateDir: string, hostArch: NodeJS.Architecture): Promise<AgentFiles | null> {
  if (hostArch !== arch()) return null;
  building ??= existsSync(BUILT_BUNDLE) ? Promise.resolve(BUILT_BUNDLE) : buildAgentBundle(join(stateDir, 'agent-bundle', `agent-${agentVersion()}.mjs`));
  const bundle = await building.catch((error: unknown) => {
    building = null;
    throw error;
  });
  return { bundle, version: agentVersion(), node: process.execPath, pty: ptyModule(hostArch) };
}

function ptyModule(hostArch: NodeJS.Architecture): AgentFiles['pty'] {
  try {
    // createRequire rather than import.meta.resolve, which a server run from source through tsx's require hook lacks.
    const module = dirname(createRequire(import.meta.url).resolve('@lydell/node-pty/package.json'));
    const native = join(dirname(module), `node-pty-linux-${hostArch}`);
    return existsSync(native) ? { module, native } : null;
  } catch {
    return null;
  }
}
