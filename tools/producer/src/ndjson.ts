// A synthetic import file: N NDJSON lines generated on the fly, with an exact share of repeated lines
// and of bad lines, in an order fixed by the seed. Nothing of the file is kept in memory: a line is
// a pure function of its item number, so a repeat regenerates an earlier item instead of storing it.
import { seededRandom } from './random';

/** What one line of an import file is: a task with its business key. */
export interface ImportLine {
  readonly externalId: string;
  readonly title: string;
  readonly dataUri: string;
}

export interface ImportFileOptions {
  /** Lines in the file, repeats and bad lines included. */
  readonly lines: number;
  /** Share of lines that repeat an earlier valid line byte for byte (0 ≤ repeat < 1). */
  readonly repeat: number;
  /** Share of lines the server must reject (0 ≤ bad < 1, repeat + bad < 1). */
  readonly bad: number;
  readonly seed: number;
  /** Makes the external ids of one run unique within the project (a re-upload uses the same tag). */
  readonly tag: string;
  /** Lines per chunk handed to the stream. Default 512. */
  readonly linesPerChunk?: number;
}

/** What the file holds, known before a line is written: the server's summary must match it. */
export interface ImportFilePlan {
  readonly lines: number;
  /** Distinct valid lines: the tasks a first upload creates. */
  readonly distinct: number;
  /** Lines repeating an earlier valid line: already present. */
  readonly repeats: number;
  /** Lines the server must reject. */
  readonly bad: number;
}

export function planImportFile({ lines, repeat, bad }: Pick<ImportFileOptions, 'lines' | 'repeat' | 'bad'>): ImportFilePlan {
  if (!Number.isSafeInteger(lines) || lines < 1) throw new RangeError(`lines must be a positive integer, got ${lines}`);
  if (!(repeat >= 0 && repeat < 1)) throw new RangeError(`repeat must be in [0, 1), got ${repeat}`);
  if (!(bad >= 0 && bad < 1)) throw new RangeError(`bad must be in [0, 1), got ${bad}`);
  const repeats = Math.round(lines * repeat);
  const badLines = Math.round(lines * bad);
  const distinct = lines - repeats - badLines;
  // A repeat needs an earlier valid line to repeat.
  if (distinct < 1 && repeats > 0) throw new RangeError(`repeat ${repeat} and bad ${bad} leave no valid line to repeat in ${lines} lines`);
  if (distinct < 0) throw new RangeError(`repeat ${repeat} + bad ${bad} exceed the ${lines} lines`);
  return { lines, distinct, repeats, bad: badLines };
}

/** Item `i` of a run: the same object whenever it is asked for, so a repeat is byte-identical. */
export const importItem = (tag: string, i: number): ImportLine => ({
  externalId: `${tag}-${i}`,
  title: `imported item ${i}`,
  dataUri: `s3://labelflow-produce/${tag}/${i}.jpg`,
});

/**
 * Bad lines of every kind the endpoint must report and skip: not JSON, not an object, a field
 * missing, a field of the wrong type, an empty external id. None shares an external id with a
 * valid line, so a bad line never hides a good one.
 */
function badLine(tag: string, n: number): string {
  switch (n % 5) {
    case 0:
      return `{"externalId":"${tag}-bad-${n}","title":`;
    case 1:
      return `["${tag}-bad-${n}"]`;
    case 2:
      return JSON.stringify({ externalId: `${tag}-bad-${n}`, title: `bad item ${n}` });
    case 3:
      return JSON.stringify({ externalId: `${tag}-bad-${n}`, title: n, dataUri: `s3://labelflow-produce/${tag}/bad-${n}.jpg` });
    default:
      return JSON.stringify({ externalId: '', title: `bad item ${n}`, dataUri: `s3://labelflow-produce/${tag}/bad-${n}.jpg` });
  }
}

export const LineKind = { item: 'item', repeat: 'repeat', bad: 'bad' } as const;
export type LineKind = (typeof LineKind)[keyof typeof LineKind];

/** One line of the file, in order, with what it is (line numbers start at 1). */
export interface GeneratedLine {
  readonly line: number;
  readonly kind: LineKind;
  readonly text: string;
  /** The item number for `item` and `repeat` lines. */
  readonly item?: number;
}

/**
 * The file's lines in order. Each position draws its kind with the odds of the counts still to
 * place (a uniformly shuffled order with exact counts, in O(1) memory); the first lines cannot be
 * repeats until a valid line exists. A repeat picks any earlier item.
 */
export function* importLines(options: ImportFileOptions): Generator<GeneratedLine> {
  const plan = planImportFile(options);
  const random = seededRandom(options.seed);
  let left = { item: plan.distinct, repeat: plan.repeats, bad: plan.bad };
  let items = 0;
  for (let line = 1; line <= plan.lines; line++) {
    const repeatable = items > 0 ? left.repeat : 0;
    let x = random() * (left.item + repeatable + left.bad);
    let kind: LineKind;
    if ((x -= left.item) < 0) kind = LineKind.item;
    else if ((x -= repeatable) < 0) kind = LineKind.repeat;
    else kind = LineKind.bad;
    left = { ...left, [kind]: left[kind] - 1 };
    if (kind === LineKind.item) {
      const item = items++;
      yield { line, kind, item, text: JSON.stringify(importItem(options.tag, item)) };
    } else if (kind === LineKind.repeat) {
      const item = Math.floor(random() * items);
      yield { line, kind, item, text: JSON.stringify(importItem(options.tag, item)) };
    } else {
      yield { line, kind, text: badLine(options.tag, line) };
    }
  }
}

/** The file as a stream of byte chunks, each a whole number of lines ending in `\n`. */
export async function* importFileChunks(options: ImportFileOptions): AsyncGenerator<Buffer> {
  const per = options.linesPerChunk ?? 512;
  let batch: string[] = [];
  for (const { text } of importLines(options)) {
    batch.push(text);
    if (batch.length >= per) {
      yield Buffer.from(`${batch.join('\n')}\n`);
      batch = [];
    }
  }
  if (batch.length > 0) yield Buffer.from(`${batch.join('\n')}\n`);
}
