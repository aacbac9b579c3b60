import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * Ports below the kernel's ephemeral range: a port the kernel hands out (listen on 0) is also the range every outbound
 * connection takes its local port from, so one picked there can be taken by a connection before its owner binds it.
 */
const [EPHEMERAL_LOW] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
const PICK_LOW = 10_000;
const PICK_HIGH = Math.max(PICK_LOW + 1_000, (EPHEMERAL_LOW ?? 32_768) - 1);

const bindable = (port: number) => new Promise<boolean>((resolve) => {
  const server = createServer();
  server.once('error', () => resolve(false));
  server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
});

/** A loopback port that was free a moment ago, from outside the range outbound connections draw from. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = PICK_LOW + Math.floor(Math.random() * (PICK_HIGH - PICK_LOW));
    if (await bindable(port)) return port;
  }
}
