import { randomInt } from 'node:crypto';

export const MAX_NAME_LENGTH = 40;
export const NAME_PATTERN = '^[a-z]([-a-z0-9]*[a-z0-9])?$';
const NAME_REGEX = new RegExp(NAME_PATTERN);

export const NAME_RULE = `1-${MAX_NAME_LENGTH} lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit`;

/** Whether `s` can name a fleet or run: a lowercase DNS label (RFC 1123) of at most 40 characters that starts with a letter. */
export function isDnsLabel(s: string): boolean {
  return s.length >= 1 && s.length <= MAX_NAME_LENGTH && NAME_REGEX.test(s);
}

const ADJECTIVES = [
  'able', 'amber', 'bold', 'brave', 'bright', 'brisk', 'calm', 'clever', 'cool', 'crisp',
  'daring', 'eager', 'fair', 'fast', 'fierce', 'fine', 'gentle', 'glad', 'golden', 'grand',
  'green', 'happy', 'hardy', 'keen', 'kind', 'lively', 'lucky', 'merry', 'mighty', 'neat',
  'nimble', 'noble', 'patient', 'plucky', 'polite', 'proud', 'quick', 'quiet', 'rapid', 'ready',
  'rosy', 'shiny', 'silent', 'silver', 'smart', 'snowy', 'solid', 'steady', 'sturdy', 'sunny',
  'swift', 'tidy', 'tough', 'vivid', 'warm', 'wise', 'witty', 'young', 'zesty', 'jolly',
];

const NOUNS = [
  'badger', 'bat', 'bear', 'beaver', 'bison', 'cat', 'cobra', 'crane', 'crow', 'deer',
  'dolphin', 'eagle', 'falcon', 'ferret', 'finch', 'fox', 'frog', 'gecko', 'goose', 'hare',
  'hawk', 'heron', 'horse', 'ibis', 'jaguar', 'koala', 'lark', 'lemur', 'lion', 'llama',
  'lynx', 'marten', 'mole', 'moose', 'moth', 'newt', 'otter', 'owl', 'panda', 'parrot',
  'puma', 'quail', 'rabbit', 'raven', 'robin', 'salmon', 'seal', 'shark', 'sloth', 'snail',
  'sparrow', 'swan', 'tiger', 'toad', 'trout', 'turtle', 'walrus', 'whale', 'wolf', 'zebra',
];

/** A readable random name such as `brave-otter-1`; callers that need uniqueness retry on a clash. */
export function randomRunName(): string {
  const adjective = ADJECTIVES[randomInt(ADJECTIVES.length)];
  const noun = NOUNS[randomInt(NOUNS.length)];
  return `${adjective}-${noun}-${randomInt(10)}`;
}
