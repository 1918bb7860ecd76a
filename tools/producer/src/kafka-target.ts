import type { KafkaSecurity } from '@labelflow/messaging';

/** The stack's Kafka as the load driver reaches it: the brokers, the topics' prefix and the login. */
export interface KafkaTarget {
  readonly brokers: readonly string[];
  readonly topicPrefix: string;
  /** The services' KAFKA_SASL_* / KAFKA_SSL login (the compose broker takes only SCRAM); none: an open listener. */
  readonly security?: KafkaSecurity;
}
