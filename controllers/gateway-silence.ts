import type { Db } from '../store/db.js';
import { setGatewayUnreachable, type GatewayRecord } from '../store/gateways.js';

/** How often a running gateway is looked at. */
export const SUPERVISE_MS = 2000;
/** A gateway process polls its server every second; silent for this long, it is shown unreachable. */
const UNREACHABLE_AFTER_MS = 10_000;

/**
 * Shows a running gateway unreachable once it has not called its server for a while, `silent` saying what has been
 * silent (a local process, an instance's job); when to look at it again.
 */
export async function watchSilence(db: Db, owner: string, gateway: GatewayRecord, silent: string): Promise<number> {
  const silentMs = Date.now() - (gateway.lastSeenAt?.getTime() ?? 0);
  if (gateway.status === 'running' && silentMs > UNREACHABLE_AFTER_MS) {
    await setGatewayUnreachable(db, gateway.id, owner, `${silent} for ${Math.round(silentMs / 1000)} s`);
  }
  return SUPERVISE_MS;
}
