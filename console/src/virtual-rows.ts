import { elementScroll, observeElementOffset, observeElementRect, Virtualizer, type VirtualizerOptions } from '@tanstack/virtual-core';
import { useLayoutEffect, useReducer, useState } from 'preact/hooks';

type Options = Pick<VirtualizerOptions<HTMLElement, HTMLElement>, 'count' | 'getScrollElement' | 'estimateSize' | 'overscan'>;

/**
 * TanStack Virtual's virtualizer bound to a Preact component, as its React adapter binds it: the component renders
 * again whenever the rows in view change, and only those rows are in the DOM.
 */
export function useVirtualRows(options: Options): Virtualizer<HTMLElement, HTMLElement> {
  const [, rerender] = useReducer((tick: number) => tick + 1, 0);
  const resolved: VirtualizerOptions<HTMLElement, HTMLElement> = {
    observeElementRect, observeElementOffset, scrollToFn: elementScroll, ...options, onChange: () => rerender(undefined),
  };
  const [virtualizer] = useState(() => new Virtualizer(resolved));
  virtualizer.setOptions(resolved);
  useLayoutEffect(() => virtualizer._didMount(), []);
  useLayoutEffect(() => virtualizer._willUpdate());
  return virtualizer;
}
