import { CHANNELS, concerns } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { loadRoutingTable } from '../store/services.js';
import type { RouteSource } from './routing-table.js';

/** The routes as the database has them, read again on every routing change and every change of a service's runs. */
export function storeRoutes(db: Db): RouteSource {
  return {
    read: () => loadRoutingTable(db),
    watch: async (changed) => {
      const unlisteners: Array<() => Promise<void>> = [];
      unlisteners.push(await db.listen(CHANNELS.serviceRoutes, changed));
      unlisteners.push(await db.listen(CHANNELS.runs, (payload) => {
        if (concerns(payload, { statuses: [], family: true })) changed();
      }));
      return async () => {
        for (const unlisten of unlisteners) await unlisten();
      };
    },
  };
}
