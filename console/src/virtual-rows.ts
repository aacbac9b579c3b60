import {
  elementScroll, observeElementOffset, observeElementRect, observeWindowOffset, observeWindowRect, Virtualizer, windowScroll,
  type VirtualizerOptions,
} from '@tanstack/virtual-core';
import { useLayoutEffect, useReducer, useState } from 'preact/hooks';

type Options = Pick<VirtualizerOptions<HTMLElement, HTMLElement>, 'count' | 'getScrollElement' | 'estimateSize' | 'overscan'>;
type WindowOptions = Pick<VirtualizerOptions<Window, HTMLElement>, 'count' | 'estimateSize' | 'overscan' | 'scrollMargin'>;

/** Rows of a box that scrolls on its own (`getScrollElement`). */
export function useVirtualRows(options: Options): Virtualizer<HTMLElement, HTMLElement> {
  return useBoundVirtualizer<HTMLElement>({ observeElementRect, observeElementOffset, scrollToFn: elementScroll, ...options });
}

/** Rows of a list that the page itself scrolls; `scrollMargin` is the list's distance from the top of the page. */
export function useWindowRows(options: WindowOptions): Virtualizer<Window, HTMLElement> {
  return useBoundVirtualizer<Window>({
    observeElementRect: observeWindowRect, observeElementOffset: observeWindowOffset, scrollToFn: windowScroll, getScrollElement: () => window, ...options,
  });
}

/**
 * TanStack Virtual's virtualizer bound to a Preact component, as its React adapter binds it: the component renders
 * again whenever the rows in view change, and only those rows are in the DOM.
 */
function useBoundVirtualizer<Scroller extends Element | Window>(options: Omit<VirtualizerOptions<Scroller, HTMLElement>, 'onChange'>): Virtualizer<Scroller, HTMLElement> {
  const [, rerender] = useReducer((tick: number) => tick + 1, 0);
  const resolved: VirtualizerOptions<Scroller, HTMLElement> = { ...options, onChange: () => rerender(undefined) };
  const [virtualizer] = useState(() => new Virtualizer(resolved));
  virtualizer.setOptions(resolved);
  useLayoutEffect(() => virtualizer._didMount(), []);
  useLayoutEffect(() => virtualizer._willUpdate());
  return virtualizer;
}
