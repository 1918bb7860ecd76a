// `npm run audit` options, parsed apart from the CLI so that every refusal is a sentence a unit test
// can pin down. A refusal is "could not run" (exit 2), never "a violation" (exit 1).
import { parseArgs } from 'node:util';
import { kafkaSecurityFromEnv, type KafkaSecurity } from '@labelflow/messaging';

export const auditUsage = `usage: npm run audit -- [--json] [--prefix P] [--db-suffix S] [--pg-url URL] [--kafka-brokers B] [--no-kafka]
  [--settle-ms 30000] [--stuck-ms 60000] [--outbox-ms 60000]
exit 0: OK, 1: a violation, 2: could not run. See tools/auditor/README.md.`;

/** A command line the auditor refuses: printed with the usage, exit code 2. */
export class AuditUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AuditUsageError';
  }
}

export interface AuditArgs {
  readonly json: boolean;
  readonly prefix: string;
  readonly dbSuffix: string;
  readonly pgUrl: string;
  readonly settleMs: number;
  readonly stuckMs: number;
  readonly outboxMs: number;
  /** Absent with --no-kafka: the dead letters are not listed. */
  readonly kafka?: { readonly brokers: readonly string[]; readonly security: KafkaSecurity };
}

const spec = {
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', default: false },
  prefix: { type: 'string' },
  'db-suffix': { type: 'string' },
  'pg-url': { type: 'string' },
  'kafka-brokers': { type: 'string' },
  'settle-ms': { type: 'string', default: '30000' },
  'stuck-ms': { type: 'string', default: '60000' },
  'outbox-ms': { type: 'string', default: '60000' },
  'no-kafka': { type: 'boolean', default: false },
} as const;

/**
 * Parses `argv` (the arguments after `--`) against `env`. Throws `AuditUsageError` naming the
 * option and the value given.
 */
export function parseAuditArgs(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): { readonly help: true } | { readonly help: false; readonly args: AuditArgs } {
  let values;
  try {
    ({ values } = parseArgs({ args: [...argv], options: spec, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new AuditUsageError((error as Error).message.split('\n')[0] ?? 'bad arguments');
  }
  if (values.help) return { help: true };
  // Digits only: Number('') and Number(' ') are 0, which would quietly judge every task at once.
  const ms = (name: 'settle-ms' | 'stuck-ms' | 'outbox-ms'): number => {
    const raw = values[name];
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n)) throw new AuditUsageError(`--${name} must be a non-negative integer of milliseconds, got ${JSON.stringify(raw)}`);
    return n;
  };
  const settleMs = ms('settle-ms');
  const stuckMs = ms('stuck-ms');
  const outboxMs = ms('outbox-ms');
  let kafka: AuditArgs['kafka'];
  if (!values['no-kafka']) {
    const brokers = (values['kafka-brokers'] ?? env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
    try {
      kafka = { brokers, security: kafkaSecurityFromEnv(env) };
    } catch (error) {
      throw new AuditUsageError((error as Error).message);
    }
  }
  return {
    help: false,
    args: {
      json: values.json,
      prefix: values.prefix ?? env.KAFKA_TOPIC_PREFIX ?? 'labelflow',
      dbSuffix: values['db-suffix'] ?? env.LABELFLOW_DB_SUFFIX ?? '',
      pgUrl: values['pg-url'] ?? env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432',
      settleMs,
      stuckMs,
      outboxMs,
      ...(kafka ? { kafka } : {}),
    },
  };
}
