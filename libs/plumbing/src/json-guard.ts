/**
 * V8 hashes a string longer than this many characters by its length alone. JSON.parse puts every
 * object key in the string table, so a text (or a stream of them, until the next full collection)
 * full of long keys of one length makes every lookup compare whole strings: quadratic CPU, seconds
 * per message, on the thread a whole service shares. No field of labelflow's holds a string near
 * this long, so a JSON text with one is refused before it is parsed.
 */
export const V8_LENGTH_HASHED_STRING = 16_383;

/**
 * Whether a JSON text holds a string token (a key or a value) longer than `maxBytes`, counted in
 * raw bytes between its quotes (escapes included). One pass over the bytes, no allocation. A text
 * shorter than `maxBytes` cannot hold one: callers skip the scan for it.
 */
export function hasJsonStringLongerThan(bytes: Uint8Array, maxBytes: number): boolean {
  if (bytes.length <= maxBytes) return false;
  // From quote to quote with the native search: a byte loop over the text cost a third as much
  // again as parsing it. A quote preceded by an odd run of backslashes is escaped, not an end.
  let open = bytes.indexOf(QUOTE);
  while (open !== -1) {
    let close = bytes.indexOf(QUOTE, open + 1);
    while (close !== -1 && escaped(bytes, close, open)) close = bytes.indexOf(QUOTE, close + 1);
    if (close === -1) return bytes.length - 1 - open > maxBytes;
    if (close - open - 1 > maxBytes) return true;
    open = bytes.indexOf(QUOTE, close + 1);
  }
  return false;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Whether the quote at `at` is escaped: an odd run of backslashes right before it, inside the string opened at `open`. */
function escaped(bytes: Uint8Array, at: number, open: number): boolean {
  let run = 0;
  for (let i = at - 1; i > open && bytes[i] === BACKSLASH; i--) run++;
  return run % 2 === 1;
}
