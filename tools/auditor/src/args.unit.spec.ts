import { describe, expect, it } from 'vitest';
import { AuditUsageError, parseAuditArgs, type AuditArgs } from './args';

const parse = (argv: string[], env: Record<string, string> = {}): AuditArgs => {
  const parsed = parseAuditArgs(argv, env);
  if (parsed.help) throw new Error('unexpected --help');
  return parsed.args;
};
const refusal = (argv: string[], env: Record<string, string> = {}): string => {
  try {
    parseAuditArgs(argv, env);
  } catch (error) {
    expect(error).toBeInstanceOf(AuditUsageError);
    return (error as Error).message;
  }
  throw new Error(`${argv.join(' ')} was accepted`);
};

describe('the audit command line', () => {
  it('audits the local stack with a 30 s settle window and 60 s bounds when given nothing', () => {
    expect(parse([])).toEqual({
      json: false,
      prefix: 'labelflow',
      dbSuffix: '',
      pgUrl: 'postgres://postgres@127.0.0.1:5432',
      settleMs: 30_000,
      stuckMs: 60_000,
      outboxMs: 60_000,
      kafka: { brokers: ['127.0.0.1:9092'], security: { ssl: false } },
    });
    const idle = parse(['--settle-ms', '0', '--no-kafka'], { KAFKA_TOPIC_PREFIX: 'lf-b' });
    expect([idle.settleMs, idle.prefix, idle.kafka]).toEqual([0, 'lf-b', undefined]);
  });

  it('refuses an empty, non-numeric, fractional or negative bound instead of reading it as 0', () => {
    expect(refusal(['--settle-ms', ''])).toBe('--settle-ms must be a non-negative integer of milliseconds, got ""');
    expect(refusal(['--stuck-ms', ' '])).toBe('--stuck-ms must be a non-negative integer of milliseconds, got " "');
    expect(refusal(['--outbox-ms', 'soon'])).toBe('--outbox-ms must be a non-negative integer of milliseconds, got "soon"');
    expect(refusal(['--outbox-ms', '1.5'])).toBe('--outbox-ms must be a non-negative integer of milliseconds, got "1.5"');
    expect(refusal(['--settle-ms=-1'])).toBe('--settle-ms must be a non-negative integer of milliseconds, got "-1"');
  });

  it('refuses an unknown option and a partial broker login, and answers --help without reading anything else', () => {
    expect(refusal(['--settle', '5'])).toMatch(/^Unknown option '--settle'/);
    expect(refusal([], { KAFKA_SASL_USERNAME: 'labelflow' })).toMatch(/^KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD go together/);
    expect(parse(['--no-kafka'], { KAFKA_SASL_USERNAME: 'labelflow' }).kafka).toBeUndefined();
    expect(parseAuditArgs(['--help', '--settle-ms', ''], {})).toEqual({ help: true });
  });
});
