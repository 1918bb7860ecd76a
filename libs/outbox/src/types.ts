/** A pool or a transaction client: the one structural type of @labelflow/plumbing. */
export type { Queryable } from '@labelflow/plumbing';

export interface PublishedMessage {
  readonly topic: string;
  readonly key: string;
  readonly value: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** Where the relay sends rows: a Kafka producer in production (see @labelflow/messaging). */
export interface Publisher {
  /** Must resolve only once every message is acknowledged, in the order given per key. */
  send(messages: readonly PublishedMessage[]): Promise<void>;
}
