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
  let inString = false;
  let start = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (!inString) {
      if (b === 0x22) {
        inString = true;
        start = i;
      }
      continue;
    }
    if (b === 0x22) {
      inString = false;
      continue;
    }
    if (b === 0x5c) i++;
    // The content so far: the bytes after the opening quote, up to and including this one.
    if (i - start > maxBytes) return true;
  }
  return inString && bytes.length - 1 - start > maxBytes;
}
