import type { CAC } from 'cac';
import type { OfferListing } from '../../api/offer.js';
import { optionText } from '../args.js';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { formatAge, formatPrice, formatSize, formatSpot, printJson } from '../format.js';
import { renderTable } from '../table.js';

interface OfferFlags {
  json?: boolean;
}

export function registerOffer(cli: CAC): void {
  cli.command('offer', 'List the machines the backends offer, cheapest first')
    .option('-b, --backend <backend>', 'Only this backend: gpucloud, local or kubernetes')
    .option('--gpu <spec>', 'Only machines with these GPUs, e.g. H100, L4:24GB, 24GB..:2')
    .option('--json', 'Print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator offer -b gpucloud --gpu 24GB..')
    .action(action(async (flags: OfferFlags) => {
      const client = connect();
      const query = new URLSearchParams();
      const backend = optionText(['b', 'backend']);
      const gpu = optionText(['gpu']);
      if (backend !== undefined) query.set('backend', backend);
      if (gpu !== undefined) query.set('gpu', gpu);
      const suffix = query.size > 0 ? `?${query}` : '';
      const listing = await client.get<OfferListing>(client.projectPath(`/offers${suffix}`));
      const offers = [...listing.offers].sort((a, b) => a.pricePerHour - b.pricePerHour || a.gpu.name.localeCompare(b.gpu.name) || a.gpu.count - b.gpu.count);
      const exitCode = listing.errors.length > 0 ? 1 : 0;
      if (flags.json === true) {
        printJson({ ...listing, offers });
        return exitCode;
      }
      for (const error of listing.errors) process.stderr.write(`${error}\n`);
      if (offers.length === 0) {
        process.stdout.write(`no offers${gpu === undefined ? '' : ` with GPU ${gpu}`}${backend === undefined ? '' : ` from ${backend}`}\n`);
        return exitCode;
      }
      const staleAge = new Map(listing.backends.filter((b) => b.error !== null && b.fetchedAt !== null).map((b) => [b.backend, formatAge(b.fetchedAt!)]));
      const withSpot = offers.some((o) => o.spot === true);
      const headers = [...(backend === undefined ? ['backend'] : []), 'gpu', 'memory', 'count', 'vcpus', 'ram', 'disk', 'region', '$/h', ...(withSpot ? ['spot'] : []), 'availability'];
      const rows = offers.map((o) => [
        ...(backend === undefined ? [o.backend] : []),
        o.gpu.count === 0 ? '-' : o.gpu.name,
        o.gpu.count === 0 ? '-' : formatSize(o.gpu.memoryMib),
        String(o.gpu.count),
        String(o.cpus),
        formatSize(o.memoryMib),
        formatSize(o.diskMib),
        o.region,
        formatPrice(o.pricePerHour),
        ...(withSpot ? [formatSpot(o)] : []),
        staleAge.has(o.backend) ? `${o.availability} ${staleAge.get(o.backend)}` : o.availability,
      ]);
      process.stdout.write(renderTable(headers, rows));
      // Said again below the table, which may be long enough to scroll the first one away.
      for (const error of listing.errors) process.stderr.write(`${error}\n`);
      return exitCode;
    }));
}
