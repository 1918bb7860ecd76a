import { z } from 'zod';
import { isStorableText } from '@labelflow/contracts';
import { HttpError } from './errors';

/** Longer cursors are refused before decoding: the query string is attacker-controlled input. */
export const MAX_CURSOR_LENGTH = 512;

/** The largest page any list returns; repositories fetch one row more to learn whether a next page exists. */
export const MAX_PAGE_LIMIT = 1000;

/**
 * A whole number in a query string, written in decimal: `z.coerce.number()` would also take
 * `0x10`, `1e3`, ` 7 ` and an empty value (0), and a repeated parameter would reach it as an array.
 */
export const queryInt = (min: number, max: number) =>
  z
    .string()
    .regex(/^[0-9]{1,15}$/, 'must be a whole number in decimal')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

/**
 * Query-string fields every paged list accepts; spread into a route's schema, made strict so a
 * misspelt parameter is a 400 rather than silently ignored: `z.strictObject({ ...PageQuery, status: ... })`.
 */
export const PageQuery = {
  limit: queryInt(1, MAX_PAGE_LIMIT).default(100),
  cursor: z.string().max(MAX_CURSOR_LENGTH).optional(),
};

/**
 * An opaque cursor: base64url of the JSON of the position after which the next page starts. Opaque
 * so clients hand it back unchanged instead of building positions themselves; it is not signed,
 * so what it holds must be nothing a client may not know, and every field must be re-validated.
 */
export function encodeCursor(value: object): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64url');
}

const invalidCursor = (why: string): HttpError =>
  new HttpError(400, 'CURSOR_INVALID', `the cursor is not one this list issued (${why}): pass back nextCursor unchanged, or start again without a cursor`);

const BASE64URL = /^[A-Za-z0-9_-]+$/;

/** Every string in a parsed JSON value is text PostgreSQL can store. */
const storableThroughout = (value: unknown): boolean => {
  if (typeof value === 'string') return isStorableText(value);
  if (Array.isArray(value)) return value.every(storableThroughout);
  if (value !== null && typeof value === 'object') return Object.entries(value).every(([k, v]) => isStorableText(k) && storableThroughout(v));
  return true;
};

/**
 * Decodes a cursor `encodeCursor` made and checks it against `schema`. Anything else is a 400
 * CURSOR_INVALID, never a 500: the database would otherwise be the first to see a forged position.
 */
export function decodeCursor<S extends z.ZodType>(schema: S, cursor: string): z.infer<S> {
  if (cursor.length > MAX_CURSOR_LENGTH) throw invalidCursor('too long');
  // Node's decoder skips characters outside the alphabet and ignores stray trailing bits; only
  // the exact encoding of some bytes is accepted, so one position has exactly one cursor.
  if (!BASE64URL.test(cursor)) throw invalidCursor('not base64url');
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.toString('base64url') !== cursor) throw invalidCursor('not base64url');
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    throw invalidCursor('not JSON');
  }
  // Text PostgreSQL cannot store (NUL, a lone surrogate) cannot be a position it handed out,
  // whatever the schema says.
  if (!storableThroughout(value)) throw invalidCursor('not storable text');
  // A schema's refinement may throw on a value its other checks refused (zod 4 runs it anyway).
  let parsed: ReturnType<S['safeParse']>;
  try {
    parsed = schema.safeParse(value) as ReturnType<S['safeParse']>;
  } catch {
    throw invalidCursor('wrong shape');
  }
  if (!parsed.success) throw invalidCursor('wrong shape');
  return parsed.data as z.infer<S>;
}

/**
 * Splits the `limit + 1` rows a keyset query fetched into the page and the position of its last
 * row. `next` is null exactly when no row follows the page, so a client never fetches an empty
 * last page (unless rows after the page were deleted in between).
 */
export function keysetPage<T, K>(rows: readonly T[], limit: number, keyOf: (last: T) => K): { items: T[]; next: K | null } {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, next: rows.length > limit && last !== undefined ? keyOf(last) : null };
}

/** `keysetPage` with the position already encoded as an opaque cursor, for responses. */
export function page<T, C extends object>(rows: readonly T[], limit: number, cursorOf: (last: T) => C): { items: T[]; nextCursor: string | null } {
  const { items, next } = keysetPage(rows, limit, cursorOf);
  return { items, nextCursor: next === null ? null : encodeCursor(next) };
}

/**
 * A timestamptz column as a keyset cursor carries it: UTC ISO 8601 to the microsecond. A JS Date
 * keeps only milliseconds, and rows sharing a millisecond (or a transaction's now()) would be
 * skipped or repeated across pages if the cursor were rounded.
 */
export const timestampKeySql = (column: string): string => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Checks a cursor's timestamp fully, so a forged one is a 400 here rather than a database error. */
export const TimestampKey = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/)
  .refine((s) => {
    const seconds = `${s.slice(0, 19)}Z`;
    const date = new Date(seconds);
    // Date rolls 02-30 or 24:00 over to another instant instead of refusing it; PostgreSQL refuses year 0.
    return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 19) === s.slice(0, 19) && !s.startsWith('0000');
  });

/** One filter column read as separate index ranges: `values` undefined = no filter on it. */
export interface KeysetPartition {
  readonly column: string;
  /** SQL type of the column, for the array parameter (`uuid`, `text`). */
  readonly type: string;
  readonly values: readonly string[] | undefined;
}

export interface KeysetQuery {
  readonly table: string;
  /** Extra select expressions, e.g. the timestamp key of the order column. */
  readonly select?: string;
  /** The order (and keyset) columns with their SQL types, unique together. */
  readonly order: readonly { readonly column: string; readonly type: string }[];
  readonly partitions: readonly KeysetPartition[];
  /** Equality filters that are not partitions (a task id). */
  readonly equals?: readonly { readonly column: string; readonly value: unknown }[];
  /** The previous page's last position, one value per order column. */
  readonly after?: readonly unknown[];
  readonly limit: number;
}

/**
 * A keyset page query that reads each combination of the partition values as its own ordered
 * index range of at most limit + 1 rows and merges them: `col = ANY(...)` would instead read every
 * remaining row of those values and sort them, on every page. `null` when a partition's list is
 * empty (nothing can match). Fetches limit + 1 rows, for `keysetPage`.
 */
export function keysetQuery(q: KeysetQuery): { readonly text: string; readonly values: unknown[] } | null {
  if (q.partitions.some((p) => p.values !== undefined && p.values.length === 0)) return null;
  const values: unknown[] = [];
  const param = (value: unknown): string => `$${values.push(value)}`;
  const from: string[] = [];
  const where: string[] = [];
  q.partitions.forEach((p, i) => {
    if (p.values === undefined) return;
    // DISTINCT: a value named twice would otherwise return its rows twice.
    from.push(`(SELECT DISTINCT v FROM unnest(${param(p.values)}::${p.type}[]) AS v) AS p${i}`);
    where.push(`${q.table}.${p.column} = p${i}.v`);
  });
  for (const { column, value } of q.equals ?? []) where.push(`${q.table}.${column} = ${param(value)}`);
  const columns = (prefix: string) => q.order.map((o) => `${prefix}.${o.column}`).join(', ');
  if (q.after) where.push(`(${columns(q.table)}) > (${q.order.map((o, i) => `${param(q.after?.[i])}::${o.type}`).join(', ')})`);
  const limit = param(q.limit + 1);
  const range = `SELECT ${q.table}.*${q.select ? `, ${q.select}` : ''} FROM ${q.table} ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
    ORDER BY ${columns(q.table)} LIMIT ${limit}`;
  const text = from.length === 0 ? range : `SELECT r.* FROM ${from.join(' CROSS JOIN ')} CROSS JOIN LATERAL (${range}) AS r ORDER BY ${columns('r')} LIMIT ${limit}`;
  return { text, values };
}
