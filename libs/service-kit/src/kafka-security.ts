import { z } from 'zod';
import { KafkaSaslMechanisms, type KafkaSasl } from '@labelflow/messaging';

/** How a service authenticates to the brokers; part of BaseConfig. */
export const KafkaSecurityShape = {
  /** SASL login to the brokers: all three or none. The compose broker takes scram-sha-512. */
  KAFKA_SASL_MECHANISM: z.enum(KafkaSaslMechanisms).optional(),
  KAFKA_SASL_USERNAME: z.string().optional(),
  KAFKA_SASL_PASSWORD: z.string().optional(),
  /** TLS to the brokers ('1'), with the system's trusted CAs. */
  KAFKA_SSL: z
    .enum(['0', '1'])
    .default('0')
    .transform((v) => v === '1'),
};
type KafkaSecurityConfig = z.output<z.ZodObject<typeof KafkaSecurityShape>>;

const saslVars = ['KAFKA_SASL_MECHANISM', 'KAFKA_SASL_USERNAME', 'KAFKA_SASL_PASSWORD'] as const;

/** Cross-field rule: all three SASL variables or none; an empty (or blank) username or password is refused. */
export function kafkaSecurityProblems(config: KafkaSecurityConfig): string[] {
  const given = saslVars.filter((name) => config[name] !== undefined);
  const problems: string[] = [];
  if (given.length > 0 && given.length < saslVars.length) {
    const missing = saslVars.filter((name) => !given.includes(name));
    problems.push(`${missing.join(', ')}: required when ${given.join(', ')} ${given.length === 1 ? 'is' : 'are'} set (Kafka SASL needs mechanism, username and password)`);
  }
  if (config.KAFKA_SASL_USERNAME !== undefined && config.KAFKA_SASL_USERNAME.trim() === '') problems.push('KAFKA_SASL_USERNAME: must not be empty');
  if (config.KAFKA_SASL_PASSWORD !== undefined && config.KAFKA_SASL_PASSWORD.trim() === '') problems.push('KAFKA_SASL_PASSWORD: an empty password is refused');
  return problems;
}

/** What createKafka takes from a checked config: the SASL login when one is configured, and TLS. */
export function kafkaSecurity(config: KafkaSecurityConfig): { sasl?: KafkaSasl; ssl: boolean } {
  const { KAFKA_SASL_MECHANISM: mechanism, KAFKA_SASL_USERNAME: username, KAFKA_SASL_PASSWORD: password, KAFKA_SSL: ssl } = config;
  return mechanism && username && password ? { sasl: { mechanism, username, password }, ssl } : { ssl };
}
