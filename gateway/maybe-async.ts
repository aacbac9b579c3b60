/**
 * A value now, or a promise of it: what the proxy's per-request steps return, so that a request whose answers are
 * all known already (a cached token, a ready replica) passes through them without a promise or a microtask each.
 */
export type MaybePromise<T> = T | Promise<T>;

/** `next(value)` at once when the value is there, after it otherwise. */
export function then<T, U>(value: MaybePromise<T>, next: (value: T) => MaybePromise<U>): MaybePromise<U> {
  return value instanceof Promise ? value.then(next) : next(value);
}
