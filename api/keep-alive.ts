/**
 * How long the project's HTTP servers (the server, edge gateways, agents) hold an idle keep-alive connection: as long as
 * load balancers expect of what stands behind them (they hold theirs 60 s), and long enough that the server's calls to
 * an agent, seconds apart, reuse one instead of reconnecting (Node's own 5 s made it reconnect at each: bench/README.md,
 * "The agents' connections held a minute").
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/** `createServer` options for it: a request's headers may take longer than the idle wait before them. */
export const KEEP_ALIVE_SERVER_OPTIONS = { keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS, headersTimeout: KEEP_ALIVE_TIMEOUT_MS + 1000 } as const;
