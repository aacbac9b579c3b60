import { navigate } from './navigation.js';

/**
 * Sets filters of the page in its URL (an empty value removes one), so that a filtered page can be shared. It starts
 * from the URL as it is now, not as the page last drew it: two filters set before the page draws again both stay.
 */
export function setQueryFilters(changes: Record<string, string>): void {
  const next = new URLSearchParams(location.search);
  for (const [name, value] of Object.entries(changes)) {
    if (value) next.set(name, value);
    else next.delete(name);
  }
  const search = next.toString();
  navigate(`${location.pathname}${search ? `?${search}` : ''}`, true);
}
