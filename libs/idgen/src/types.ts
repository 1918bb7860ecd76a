/** A `pg.Pool`, a client or a fake: the one structural type of @labelflow/plumbing. */
export type { Queryable } from '@labelflow/plumbing';
