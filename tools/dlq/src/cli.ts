// npm run dlq -- list   --service <svc> [--limit N] [--json]
// npm run dlq -- show   --service <svc> <partition:offset>
// npm run dlq -- replay --service <svc> (<partition:offset>... | --all [--code CODE])
// A service's dead-letter topic is <prefix>.<service>.dlq (KAFKA_TOPIC_PREFIX, default labelflow);
// brokers from KAFKA_BROKERS (default 127.0.0.1:9092), SASL from KAFKA_SASL_* like the services.
// Exit codes: 0 done, 1 a named letter was not found or could not be replayed, 2 usage or connection.
import { parseArgs } from 'node:util';
import { hasJsonStringLongerThan, V8_LENGTH_HASHED_STRING } from '@labelflow/plumbing';
import { ServiceName } from '@labelflow/contracts';
import { z } from 'zod';
import { createKafka, kafkaSecurityFromEnv, type KafkaSecurity } from '@labelflow/messaging';
import { createLogger } from '@labelflow/telemetry';
import { findDeadLetter, findDeadLetters, listDeadLetters, replayDeadLetters, type DeadLetter } from './dead-letters';

const USAGE = 'usage: npm run dlq -- list|show|replay --service <task-svc|label-svc|qa-svc|billing-svc> [partition:offset ...] [--all] [--code CODE] [--limit N] [--json] [--prefix P]';

function fail(message: string): never {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

const { values: args, positionals } = (() => {
  try {
    return parseArgs({
      allowPositionals: true,
      options: {
        service: { type: 'string' },
        prefix: { type: 'string', default: process.env.KAFKA_TOPIC_PREFIX ?? 'labelflow' },
        limit: { type: 'string' },
        all: { type: 'boolean', default: false },
        code: { type: 'string' },
        json: { type: 'boolean', default: false },
      },
    });
  } catch (error) {
    return fail((error as Error).message);
  }
})();

/** The brokers' login as the services read it (KAFKA_SASL_* and KAFKA_SSL); a partial one is a usage error. */
function security(): KafkaSecurity {
  try {
    return kafkaSecurityFromEnv(process.env);
  } catch (error) {
    return fail((error as Error).message);
  }
}

const summary = (l: DeadLetter) =>
  `${l.id.padEnd(8)} ${l.code.padEnd(22)} ${(l.headers['event-type'] ?? '?').padEnd(18)} key=${l.key ?? '-'} from ${l.source ? `${l.source.topic} ${l.source.partition}:${l.source.offset}` : '?'} at ${l.failedAt ?? '?'}${l.replayedFrom ? ` (a replay of ${l.replayedFrom})` : ''}\n         ${l.reason.slice(0, 300)}`;
// A letter of overlong strings (what the consumer refused to parse) is shown as text: parsing
// many of them would be quadratic (plumbing's json-guard).
const full = (l: DeadLetter) => ({ ...l, value: l.value === null ? null : hasJsonStringLongerThan(l.value, V8_LENGTH_HASHED_STRING) ? l.value.toString('utf8') : tryJson(l.value.toString('utf8')) });
const tryJson = (s: string): unknown => {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
};

async function main(): Promise<number> {
  const [command, ...ids] = positionals;
  if (!command || !['list', 'show', 'replay'].includes(command)) fail('say list, show or replay');
  // The saga monitor dead-letters what it cannot record, on a topic of its own like the services.
  const service = ServiceName.or(z.literal('saga-monitor')).safeParse(args.service);
  if (!service.success) fail('--service must be one of task-svc, label-svc, qa-svc, billing-svc, saga-monitor');
  const limit = args.limit === undefined ? undefined : Number(args.limit);
  if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) fail('--limit must be a positive integer');
  const topic = `${args.prefix}.${service.data}.dlq`;
  const kafka = createKafka({ brokers: (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(','), clientId: 'labelflow-dlq', logger: createLogger({ service: 'dlq', level: 'warn' }), ...security() });

  if (command === 'list') {
    const letters = await listDeadLetters(kafka, topic, limit === undefined ? {} : { limit });
    if (args.json) process.stdout.write(`${JSON.stringify(letters.map(full), null, 2)}\n`);
    else process.stdout.write(`${topic}: ${letters.length} dead letter(s)\n${letters.map(summary).join('\n')}${letters.length ? '\n' : ''}`);
    return 0;
  }
  if (command === 'show') {
    if (ids.length !== 1) fail('show takes one partition:offset');
    const letter = await findDeadLetter(kafka, topic, ids[0]!);
    if (!letter) {
      process.stderr.write(`${topic} has no dead letter at ${ids[0]}\n`);
      return 1;
    }
    process.stdout.write(`${JSON.stringify(full(letter), null, 2)}\n`);
    return 0;
  }
  if (args.all === ids.length > 0) fail('replay takes partition:offset ids, or --all (optionally with --code), not both');
  const everyLetter = args.all ? await listDeadLetters(kafka, topic) : undefined;
  const { found: letters, topic: listed } = everyLetter
    ? { found: everyLetter.filter((l) => args.code === undefined || l.code === args.code), topic: everyLetter }
    : await findDeadLetters(kafka, topic, ids);
  const missing = letters.filter((l): l is string => typeof l === 'string');
  for (const id of missing) process.stderr.write(`${topic} has no dead letter at ${id}\n`);
  const results = await replayDeadLetters(kafka, topic, letters.filter((l): l is DeadLetter => typeof l !== 'string'), listed);
  for (const r of results) process.stdout.write(r.ok ? `replayed ${r.id} to ${r.topic}\n` : `${r.skipped ? 'skipped' : 'not replayed'} ${r.id}: ${r.reason}\n`);
  process.stdout.write(`${results.filter((r) => r.ok).length} replayed; the consumer's exactly-once gate drops any it had already applied\n`);
  // Left out on purpose is no failure: a second `replay --all` over the same topic exits 0.
  return missing.length > 0 || results.some((r) => !r.ok && !r.skipped) ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    process.stderr.write(`dlq: ${error.message}\n`);
    process.exit(2);
  },
);
