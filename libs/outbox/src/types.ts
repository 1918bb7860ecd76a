/** The slice of a pg client the outbox needs; a pool or a transaction client both fit. */
export interface Queryable {
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<{ rows: R[]; rowCount: number | null }>;
}

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
