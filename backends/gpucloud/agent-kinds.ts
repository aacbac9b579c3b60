/**
 * How the emulator's instances run their agents: each a real `orchestrator agent` process, or all simulated in the
 * emulator's own process. Apart from the emulator, so that the command line can check `--agents` without loading it.
 */
export const AGENT_KINDS = ['process', 'simulated'] as const;
export type AgentKind = typeof AGENT_KINDS[number];
