import { LabelflowError } from '@labelflow/contracts';

export const MessagingErrors = {
  DECODE_FAILED: 'MESSAGING_DECODE_FAILED',
  SCHEMA_INVALID: 'MESSAGING_SCHEMA_INVALID',
  /** An event newer than this consumer's contracts know: dead-lettered, to be replayed once it is upgraded. */
  VERSION_UNSUPPORTED: 'MESSAGING_VERSION_UNSUPPORTED',
  /**
   * A well-formed event of a type its topic's contracts do not list here: a producer writes a new
   * type before this reader was upgraded. Dead-lettered apart from garbage, for a replay (or a
   * purge, if this service never needs it) once the reader knows it.
   */
  TYPE_UNSUPPORTED: 'MESSAGING_TYPE_UNSUPPORTED',
  HANDLER_FAILED: 'MESSAGING_HANDLER_FAILED',
  UNBOUND_TOPIC: 'MESSAGING_UNBOUND_TOPIC',
  /** The broker or the network refused a send (PublishError, whose `type` names the broker's answer). */
  PUBLISH_FAILED: 'MESSAGING_PUBLISH_FAILED',
  /** Topics were created but the broker did not serve them with leaders in time (`ensureTopics`). */
  TOPICS_NOT_SERVED: 'MESSAGING_TOPICS_NOT_SERVED',
  /** Client settings read from the environment are incomplete or unknown (`kafkaSecurityFromEnv`). */
  CONFIG_INVALID: 'MESSAGING_CONFIG_INVALID',
} as const;
export type MessagingErrorCode = (typeof MessagingErrors)[keyof typeof MessagingErrors];

export class MessagingError extends LabelflowError<MessagingErrorCode> {}
