import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();

/** Goes to a page of the console without reloading it; the address bar and history follow. */
export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  for (const listener of listeners) listener();
}

/** The current path and query, kept up to date on navigate() and on the browser's back and forward. */
export function useLocation(): { path: string; query: URLSearchParams } {
  const [, setTick] = useState(0);
  useEffect(() => {
    const changed = () => setTick((tick) => tick + 1);
    listeners.add(changed);
    window.addEventListener('popstate', changed);
    return () => {
      listeners.delete(changed);
      window.removeEventListener('popstate', changed);
    };
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** A link that opens its page in place, and as any link in a new tab with a modifier key. */
export function Link({ to, children, class: className }: { to: string; children: ComponentChildren; class?: string }) {
  return (
    <a href={to} class={className} onClick={(event) => {
      if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      navigate(to);
    }}>{children}</a>
  );
}
