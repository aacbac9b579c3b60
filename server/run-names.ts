import { randomInt } from 'node:crypto';

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
