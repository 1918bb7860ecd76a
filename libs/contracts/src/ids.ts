import { z } from 'zod';

// Branded ids: a TaskId can never be passed where a ProjectId is expected, and every id that
// crosses a boundary (URL, body, Kafka message) is parsed once, here.
/**
 * Task and event ids are 64-bit, time-ordered Snowflake ids (see @labelflow/idgen), carried as
 * decimal strings: JSON numbers cannot hold 64 bits, and strings sort and compare as ids should.
 */
const snowflake = z
  .string()
  .regex(/^[1-9][0-9]{0,18}$/, 'must be a 64-bit id in decimal')
  // zod runs refinements even after the regex failed, so this must not throw on any string:
  // equal-length decimal strings compare like the numbers they spell.
  .refine((v) => v.length < 19 || (v.length === 19 && v <= '9223372036854775807'), 'must be a 64-bit id in decimal');
// One spelling per id: `C6C7…` and `c6c7…` are the same project, and every key, counter and
// Idempotency-Key scope built from it must agree.
const uuid = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID')
  .transform((v) => v.toLowerCase());
/** A person or system acting in the saga: annotators, reviewers, and any authenticated caller (a token's `sub`). */
export const ActorName = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._@-]*$/, 'must be 1-128 characters of letters, digits, . _ @ -');

/**
 * Where a task's item is, as a command names it: a URL of a scheme annotation tools fetch from.
 * Annotation front ends put it in links and image sources, so `javascript:` and `data:` never get
 * in. Events keep their looser field: one already published stays readable.
 */
export const DATA_URI_SCHEMES = ['http', 'https', 's3', 'gs', 'az', 'abfs', 'abfss'] as const;
const dataUriPattern = new RegExp(`^(${DATA_URI_SCHEMES.join('|')})://[^\\s]`, 'i');

export const TaskId = snowflake.brand<'TaskId'>();
export type TaskId = z.infer<typeof TaskId>;
export const ProjectId = uuid.brand<'ProjectId'>();
export type ProjectId = z.infer<typeof ProjectId>;
export const EventId = snowflake.brand<'EventId'>();
export type EventId = z.infer<typeof EventId>;
export const AnnotatorId = ActorName.brand<'AnnotatorId'>();
export type AnnotatorId = z.infer<typeof AnnotatorId>;
export const ReviewerId = ActorName.brand<'ReviewerId'>();
export type ReviewerId = z.infer<typeof ReviewerId>;

/** The task's attempt (revision): 1 for the first assignment, +1 on every reassignment. */
export const Attempt = z.number().int().min(1).max(1_000_000);
export type Attempt = z.infer<typeof Attempt>;

/**
 * The largest amount any balance may hold: the CHECK on every money column, and the last integer a
 * JS number holds exactly.
 */
export const MAX_AMOUNT = Number.MAX_SAFE_INTEGER;

/** Money is always integer minor units (cents): floats drift and break hashing and sums. */
export const Money = z.number().int().min(0).max(MAX_AMOUNT);
export type Money = z.infer<typeof Money>;

// NUL, and a UTF-16 surrogate without its pair, cannot be stored: PostgreSQL rejects them in text
// (22021) and jsonb (22P05, 22P02), which every event, outbox row and stored response is.
// eslint-disable-next-line no-control-regex -- matching NUL is the point
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** True when PostgreSQL can store the string as text and inside jsonb. */
export const isStorableText = (value: string): boolean => !UNSTORABLE.test(value);

const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, 'g');

/**
 * The string with each NUL and unpaired surrogate replaced by U+FFFD: for text built from someone
 * else's input (an error message quoting a bad line) that must be stored whatever it quotes. Cut
 * a string before this, not after: a cut through a pair leaves a half, which this then replaces.
 */
export const toStorableText = (value: string): string => value.replace(UNSTORABLE_ALL, '\uFFFD');

/** Adds the storable-text check to a string schema: free text from outside must pass it at the edge. */
export const storable = <S extends z.ZodType<string, string>>(schema: S) =>
  schema.refine(isStorableText, 'must not contain NUL characters or unpaired UTF-16 surrogates');

/** A task's `dataUri` in a command (POST /tasks, an import line): at most 2,048 characters, of an allowed scheme. */
export const DataUri = storable(z.string().min(1).max(2048).regex(dataUriPattern, `must be a URI of one of the schemes ${DATA_URI_SCHEMES.join(', ')} (scheme://…)`));

/**
 * An instant as ISO 8601 with its offset. The format lets through what PostgreSQL refuses where
 * the instant is stored: a year 0000 (22008), and any number of fractional digits (input over
 * about 128 characters, 22007). A proposal so dated would fail its whole batch at the write, again
 * at every retry, instead of being refused here as the malformed input it is. Nine fractional
 * digits (nanoseconds) are more than any clock gives.
 */
export const Instant = z.iso
  .datetime({ offset: true })
  .refine((value) => !value.startsWith('0000'), 'year 0000 does not exist (the first year is 0001)')
  .refine((value) => !/\.\d{10,}/.test(value), 'at most 9 fractional digits of a second');
export type Instant = z.infer<typeof Instant>;
