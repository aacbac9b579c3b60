import { navigate } from './navigation.js';

/** Sets one filter of the page in its URL (an empty value removes it), so that a filtered page can be shared. */
export function setQueryFilter(query: URLSearchParams, name: string, value: string): void {
  const next = new URLSearchParams(query);
  if (value) next.set(name, value);
  else next.delete(name);
  const search = next.toString();
  navigate(`${location.pathname}${search ? `?${search}` : ''}`, true);
}
