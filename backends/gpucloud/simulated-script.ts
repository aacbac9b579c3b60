/**
 * The few shell forms a simulated agent plays instead of running them: `echo`, `sleep`, `exit`, `true`, `false`, `:`,
 * `for V in $(seq A B)` / `for V in a b c`, and `while true`, joined by `&&`, `;` or new lines, with `$VAR` expanded.
 * Any other command plays a program that prints nothing and runs until it is stopped, as a server does.
 */
export type Step =
  | { kind: 'echo'; words: Word[] }
  | { kind: 'sleep'; seconds: number }
  | { kind: 'exit'; code: number }
  | { kind: 'status'; code: number }
  | { kind: 'serve' }
  | { kind: 'for'; variable: string; values: Word[]; body: Sequence }
  | { kind: 'while'; body: Sequence };

/** Steps in order; `and`: the next one runs only when this one succeeded (`&&`). */
export type Sequence = Array<{ step: Step; and: boolean }>;

interface Word { text: string; expand: boolean }
type Token = { kind: 'word'; word: Word } | { kind: 'and' } | { kind: 'end' };

export class ScriptError extends Error {}

export function parseScript(text: string): Sequence {
  const tokens = tokenize(text);
  let at = 0;
  const peekWord = (): string | null => {
    const token = tokens[at];
    return token?.kind === 'word' && !token.word.expand ? null : token?.kind === 'word' ? token.word.text : null;
  };
  const skipEnds = () => { while (tokens[at]?.kind === 'end') at += 1; };
  const expectWord = (what: string): Word => {
    const token = tokens[at++];
    if (token?.kind !== 'word') throw new ScriptError(`expected ${what}`);
    return token.word;
  };
  const expectKeyword = (keyword: string) => {
    skipEnds();
    if (expectWord(keyword).text !== keyword) throw new ScriptError(`expected ${keyword}`);
  };

  const sequence = (until: string | null): Sequence => {
    const steps: Sequence = [];
    for (;;) {
      skipEnds();
      if (at >= tokens.length) {
        if (until !== null) throw new ScriptError(`missing ${until}`);
        return steps;
      }
      if (until !== null && peekWord() === until) {
        at += 1;
        return steps;
      }
      const step = command();
      const and = tokens[at]?.kind === 'and';
      if (and) at += 1;
      steps.push({ step, and });
    }
  };

  const command = (): Step => {
    const head = expectWord('a command');
    if (head.expand && head.text === 'for') {
      const variable = expectWord('a variable name').text;
      expectKeyword('in');
      const values: Word[] = [];
      while (tokens[at]?.kind === 'word') values.push(expectWord('a value'));
      expectKeyword('do');
      return { kind: 'for', variable, values: values.flatMap(expandSeq), body: sequence('done') };
    }
    if (head.expand && head.text === 'while') {
      const condition = expectWord('a condition').text;
      if (condition !== 'true' && condition !== ':') throw new ScriptError(`only "while true" is simulated, not "while ${condition}"`);
      expectKeyword('do');
      return { kind: 'while', body: sequence('done') };
    }
    const args: Word[] = [];
    while (tokens[at]?.kind === 'word') args.push(expectWord('an argument'));
    switch (head.text) {
      case 'echo': return { kind: 'echo', words: args };
      case 'sleep': return { kind: 'sleep', seconds: number(args[0]?.text, 'sleep') };
      case 'exit': return { kind: 'exit', code: args.length === 0 ? 0 : number(args[0]!.text, 'exit') };
      case 'true': case ':': return { kind: 'status', code: 0 };
      case 'false': return { kind: 'status', code: 1 };
      default: return { kind: 'serve' };
    }
  };

  return sequence(null);
}

/** A word with `$NAME` and `${NAME}` replaced from `env` (single-quoted words are kept as written). */
export function expandWord(word: Word, env: Record<string, string>): string {
  if (!word.expand) return word.text;
  return word.text.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, braced: string | undefined, bare: string | undefined) => env[(braced ?? bare)!] ?? '');
}

function expandSeq(word: Word): Word[] {
  const seq = /^\$\(seq\s+(\d+)(?:\s+(\d+))?\)$/.exec(word.text);
  if (!seq || !word.expand) return [word];
  const [from, to] = seq[2] === undefined ? [1, Number(seq[1])] : [Number(seq[1]), Number(seq[2])];
  return Array.from({ length: Math.max(0, to - from + 1) }, (_, index) => ({ text: String(from + index), expand: false }));
}

function number(text: string | undefined, what: string): number {
  const value = Number(text);
  if (text === undefined || !Number.isFinite(value) || value < 0) throw new ScriptError(`${what} needs a number, got ${text ?? 'nothing'}`);
  return value;
}

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === ' ' || c === '\t') { i += 1; continue; }
    if (c === ';' || c === '\n') { tokens.push({ kind: 'end' }); i += 1; continue; }
    if (text.startsWith('&&', i)) { tokens.push({ kind: 'and' }); i += 2; continue; }
    if (c === '#') { while (i < text.length && text[i] !== '\n') i += 1; continue; }
    let word = '';
    let expand = true;
    while (i < text.length && !' \t;\n'.includes(text[i]!) && !text.startsWith('&&', i)) {
      const ch = text[i]!;
      if (ch === '\'' || ch === '"') {
        const close = text.indexOf(ch, i + 1);
        if (close === -1) throw new ScriptError(`unclosed ${ch}`);
        word += text.slice(i + 1, close);
        if (ch === '\'') expand = false;
        i = close + 1;
      } else if (text.startsWith('$(', i)) {
        const close = text.indexOf(')', i);
        if (close === -1) throw new ScriptError('unclosed $(');
        word += text.slice(i, close + 1);
        i = close + 1;
      } else {
        word += ch;
        i += 1;
      }
    }
    tokens.push({ kind: 'word', word: { text: word, expand } });
  }
  return tokens;
}
