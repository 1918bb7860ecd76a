// Rows travel framed by ASCII separators: RS between rows (or a bundle's messages), US between a
// row's fields. JSON text never holds either raw (JSON.stringify escapes every control character),
// so only the four plain fields need checking. PostgreSQL cuts such a text apart at about twice the
// speed of json_to_recordset over the same rows as a JSON array, which built a hash table per row.
export const RS = '\x1e';
export const US = '\x1f';
export const RS_BYTE = 0x1e;
export const US_BYTE = 0x1f;
