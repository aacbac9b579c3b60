export const MAX_NAME_LENGTH = 40;
export const NAME_PATTERN = '^[a-z]([-a-z0-9]*[a-z0-9])?$';
const NAME_REGEX = new RegExp(NAME_PATTERN);

export const NAME_RULE = `1-${MAX_NAME_LENGTH} lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit`;

/** Whether `s` can name a fleet or run: a lowercase DNS label (RFC 1123) of at most 40 characters that starts with a letter. */
export function isDnsLabel(s: string): boolean {
  return s.length >= 1 && s.length <= MAX_NAME_LENGTH && NAME_REGEX.test(s);
}
