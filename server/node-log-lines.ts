import type { LogLine } from '../api/objects.js';

/** Past this many characters, gathered lines are handed on. */
const PIECE_CHARS = 64 * 1024;

/** The lines of chunks of JSON lines (store/logs.ts), parsed, each marked with the rank of the node that printed it. */
export async function* withNode(chunks: AsyncIterable<string>, node: number): AsyncGenerator<LogLine> {
  for await (const chunk of chunks) {
    if (chunk === '') continue;
    for (const text of chunk.split('\n')) yield { ...(JSON.parse(text) as LogLine), node };
  }
}

/** The lines of several sources, each in its own order, as one sequence in time order; at equal times the earlier source first. */
export async function* mergeByTime(sources: Array<AsyncIterator<LogLine> | Iterator<LogLine>>): AsyncGenerator<LogLine> {
  const heads = await Promise.all(sources.map((source) => source.next()));
  for (;;) {
    let first = -1;
    heads.forEach((head, index) => {
      if (head.done) return;
      const earliest = heads[first];
      if (!earliest || earliest.done || Date.parse(head.value.ts) < Date.parse(earliest.value.ts)) first = index;
    });
    if (first === -1) return;
    yield heads[first]!.value as LogLine;
    heads[first] = await sources[first]!.next();
  }
}

/** Lines as newline-terminated JSON, gathered into large pieces. */
export async function* asJsonLines(lines: AsyncIterable<LogLine>): AsyncGenerator<string> {
  let piece = '';
  for await (const line of lines) {
    piece += `${JSON.stringify(line)}\n`;
    if (piece.length >= PIECE_CHARS) {
      yield piece;
      piece = '';
    }
  }
  if (piece !== '') yield piece;
}
