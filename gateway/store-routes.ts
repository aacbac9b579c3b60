import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { loadRoutingTable } from '../store/services.js';
import type { RouteSource } from './routing-table.js';

/** The routes as the database has them, read again on every routing or run change. */
export function storeRoutes(db: Db): RouteSource {
  return {
    read: () => loadRoutingTable(db),
    watch: async (changed) => {
      const unlisteners: Array<() => Promise<void>> = [];
      for (const channel of [CHANNELS.serviceRoutes, CHANNELS.runs]) unlisteners.push(await db.listen(channel, changed));
      return async () => {
        for (const unlisten of unlisteners) await unlisten();
      };
    },
  };
}
