/** What `pgArray` writes into an array literal: scalars, as `unnest($n::t[])` columns take them. */
export type PgArrayElement = string | number | bigint | boolean | Date | object | null | undefined;

const BACKSLASH = /\\/g;
const QUOTE = /"/g;

/**
 * A one-dimensional PostgreSQL array literal (`{"a","b",NULL}`) for a `$n::t[]` parameter, built
 * in one pass. node-postgres serializes a JS array itself, but runs two regular-expression
 * replacements over every element whether or not it holds a quote or a backslash; on a consumed
 * batch's multi-row statements that was a measurable share of a consumer's CPU. The literal is
 * the same text pg would send (dates as ISO instants, which every `timestamptz` column reads the
 * same; other objects as JSON, as pg writes them), so the SQL does not change.
 */
export function pgArray(values: readonly PgArrayElement[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const v = values[i];
    if (v === null || v === undefined) {
      out += 'NULL';
      continue;
    }
    const text = typeof v === 'string' ? v : v instanceof Date ? v.toISOString() : typeof v === 'object' ? JSON.stringify(v) : String(v);
    // indexOf is a vectorised scan; most elements (ids, types, numbers) need no escaping at all.
    out += text.indexOf('"') === -1 && text.indexOf('\\') === -1 ? `"${text}"` : `"${text.replace(BACKSLASH, '\\\\').replace(QUOTE, '\\"')}"`;
  }
  return `${out}}`;
}
