import type { Offer, OfferListing } from '../../../api/offer.js';
import { projectPath } from '../api.js';
import { priceText } from '../format.js';
import { navigate } from '../navigation.js';
import { setQueryFilters } from '../query-filters.js';
import { useApi } from '../use-api.js';

type Column = 'gpu' | 'count' | 'memory' | 'spot' | 'region' | 'price';

const COLUMNS: { column: Column; label: string; key: (offer: Offer) => string | number }[] = [
  { column: 'gpu', label: 'GPU', key: (offer) => offer.gpu.name },
  { column: 'count', label: 'Count', key: (offer) => offer.gpu.count },
  { column: 'memory', label: 'GPU memory', key: (offer) => offer.gpu.memoryMib },
  { column: 'spot', label: 'Spot', key: (offer) => (offer.spot ? 1 : 0) },
  { column: 'region', label: 'Region', key: (offer) => offer.region },
  { column: 'price', label: 'Price', key: (offer) => offer.pricePerHour },
];
const NO_GPU = 'none';

function sizeText(mib: number): string {
  return mib === 0 ? '—' : `${Math.round(mib / 1024)}GB`;
}

/** `orchestrator offer` as a table: what the project's backends can rent, filtered and sorted in the URL. */
export function OffersPage({ project, query }: { project: string; query: URLSearchParams }) {
  const { data: listing, error } = useApi<OfferListing>(`${projectPath(project)}/offers`);
  const filter = (name: string) => query.get(name) ?? '';
  const gpu = filter('gpu');
  const minCount = Number(filter('count') || 0);
  const minMemoryGb = Number(filter('memory') || 0);
  const spot = filter('spot');
  const region = filter('region');
  const maxPrice = filter('price') === '' ? Infinity : Number(filter('price'));
  const sort = (filter('sort') || 'price') as Column;
  const descending = filter('order') === 'desc';
  const offers = listing?.offers ?? [];
  const gpuNames = [...new Set(offers.map((offer) => offer.gpu.count === 0 ? NO_GPU : offer.gpu.name))].sort();
  const regions = [...new Set(offers.map((offer) => offer.region))].sort();
  const sortKey = (COLUMNS.find((c) => c.column === sort) ?? COLUMNS[5]).key;
  const shown = offers
    .filter((offer) => (!gpu || (offer.gpu.count === 0 ? NO_GPU : offer.gpu.name) === gpu) && offer.gpu.count >= minCount
      && offer.gpu.memoryMib >= minMemoryGb * 1024 && (!spot || (spot === 'spot') === (offer.spot === true))
      && (!region || offer.region === region) && offer.pricePerHour <= maxPrice)
    .sort((a, b) => {
      const [x, y] = [sortKey(a), sortKey(b)];
      const order = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return (descending ? -order : order) || a.pricePerHour - b.pricePerHour;
    });
  const sortBy = (column: Column) => {
    const next = new URLSearchParams(query);
    next.set('sort', column);
    if (sort === column && !descending) next.set('order', 'desc');
    else next.delete('order');
    navigate(`${location.pathname}?${next}`, true);
  };
  const select = (name: string, label: string, options: string[], any = 'any') => (
    <label>{label} <select aria-label={label} value={filter(name)} onChange={(event) => setQueryFilters({ [name]: (event.target as HTMLSelectElement).value })}>
      <option value="">{any}</option>
      {(filter(name) && !options.includes(filter(name)) ? [...options, filter(name)] : options).map((value) => <option value={value}>{value}</option>)}
    </select></label>
  );
  const number = (name: string, label: string, step: string) => (
    <label>{label} <input class="narrow" type="number" min="0" step={step} value={filter(name)}
      onChange={(event) => setQueryFilters({ [name]: (event.target as HTMLInputElement).value })} /></label>
  );
  return (
    <section>
      <div class="toolbar">
        <h2>Offers</h2>
        {select('gpu', 'GPU', gpuNames)}
        {number('count', 'Count ≥', '1')}
        {number('memory', 'GPU memory ≥ GB', '1')}
        {select('spot', 'Spot', ['spot', 'on-demand'])}
        {select('region', 'Region', regions)}
        {number('price', 'Price ≤ $/h', '0.01')}
      </div>
      {error && <p class="error" role="alert">{error}</p>}
      {listing?.errors.map((line) => <p class="error" key={line}>{line}</p>)}
      {listing === null ? <p class="muted">Asking the backends for offers…</p>
        : offers.length === 0 ? (
          <div class="empty">
            <p>The project's backends offer nothing right now.</p>
            <p>Backends are set in the server's <code>config.yml</code> (see Settings for this project's); a gpucloud backend lists what it can rent.</p>
          </div>
        ) : shown.length === 0 ? (
          <p class="empty">No offer matches these filters. <a href={location.pathname} onClick={(event) => { event.preventDefault(); navigate(location.pathname, true); }}>Show all offers</a>.</p>
        ) : (
          <table class="offers">
            <thead><tr>
              <th>Backend</th>
              {COLUMNS.map(({ column, label }) => (
                <th aria-sort={sort === column ? (descending ? 'descending' : 'ascending') : undefined}>
                  <button class="sort" onClick={() => sortBy(column)}>{label}{sort === column ? (descending ? ' ▼' : ' ▲') : ''}</button>
                </th>
              ))}
              <th>CPUs</th><th>Memory</th><th>Disk</th><th>Availability</th>
            </tr></thead>
            <tbody>{shown.map((offer) => (
              <tr key={`${offer.backend}/${offer.offerId}`} data-offer={offer.offerId}>
                <td>{offer.backend}</td>
                <td>{offer.gpu.count === 0 ? <span class="muted">none</span> : offer.gpu.name}</td>
                <td class="number">{offer.gpu.count}</td>
                <td class="number">{sizeText(offer.gpu.memoryMib)}</td>
                <td>{offer.spot ? 'spot' : 'on-demand'}</td>
                <td>{offer.region}</td>
                <td class="number">{priceText(offer.pricePerHour)}</td>
                <td class="number">{offer.cpus}</td>
                <td class="number">{sizeText(offer.memoryMib)}</td>
                <td class="number">{sizeText(offer.diskMib)}</td>
                <td class={offer.availability === 'available' ? 'status-running' : 'muted'}>{offer.availability}</td>
              </tr>
            ))}</tbody>
          </table>
        )}
      {listing && shown.length > 0 && <p class="muted">{shown.length} of {offers.length} offers{listing.backends.length > 0 ? `, from ${listing.backends.map((b) => b.backend).join(', ')}` : ''}.</p>}
    </section>
  );
}
