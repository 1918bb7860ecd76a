import { describe, expect, it } from 'vitest';
import { parseProduceArgs, ProduceMode, UsageError, type ProduceOptions } from './options';

const defaults = { signingKeyFile: '/keys/dev.json', issuer: 'labelflow-dev', audience: 'labelflow' };
const parse = (argv: string[], env: Record<string, string> = {}): ProduceOptions => {
  const parsed = parseProduceArgs(argv, env, defaults);
  if (parsed.help) throw new Error('unexpected --help');
  return parsed.options;
};
const refusal = (argv: string[], env: Record<string, string> = {}): string => {
  try {
    parseProduceArgs(argv, env, defaults);
  } catch (error) {
    expect(error).toBeInstanceOf(UsageError);
    return (error as Error).message;
  }
  throw new Error(`${argv.join(' ')} was accepted`);
};

describe('the produce command line', () => {
  it('drives 50 happy sagas against the local stack when given nothing', () => {
    const o = parse([]);
    expect(o).toMatchObject({ mode: ProduceMode.saga, tasks: 50, import: undefined, prelabels: 0, duplicates: 0, seed: 42, timeoutMs: 300_000, waitS: 10, audit: true });
    expect(o.urls).toEqual({ task: 'http://127.0.0.1:3001', label: 'http://127.0.0.1:3002', qa: 'http://127.0.0.1:3003', billing: 'http://127.0.0.1:3004' });
    expect(o.kafkaBrokers).toEqual(['127.0.0.1:9092']);
    expect({ key: o.signingKeyFile, iss: o.issuer, aud: o.audience }).toEqual({ key: '/keys/dev.json', iss: 'labelflow-dev', aud: 'labelflow' });
  });

  it('takes the brokers, prefix, database and service URLs from the environment unless an option says otherwise', () => {
    const env = { KAFKA_BROKERS: 'k1:9092,k2:9093', KAFKA_TOPIC_PREFIX: 'lf-b', PG_URL: 'postgres://pg:5432', TASK_SVC_URL: 'http://host:3201/', AUTH_ISSUER: '' };
    const o = parse(['--prefix', 'other'], env);
    expect(o.kafkaBrokers).toEqual(['k1:9092', 'k2:9093']);
    expect({ prefix: o.prefix, pg: o.pgUrl, task: o.urls.task, iss: o.issuer }).toEqual({ prefix: 'other', pg: 'postgres://pg:5432', task: 'http://host:3201', iss: 'labelflow-dev' });
  });

  it('logs in to the brokers as the services do, from KAFKA_SASL_* and KAFKA_SSL, and refuses a partial login', () => {
    expect(parse([]).kafkaSecurity).toEqual({ ssl: false });
    const env = { KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: 'labelflow', KAFKA_SASL_PASSWORD: 'pw' };
    expect(parse([], env).kafkaSecurity).toEqual({ sasl: { mechanism: 'scram-sha-512', username: 'labelflow', password: 'pw' }, ssl: false });
    expect(refusal([], { KAFKA_SASL_USERNAME: 'labelflow' })).toMatch(/^KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD go together/);
  });

  it('uploads a generated file with 20% repeated lines and no bad ones by default with --import', () => {
    const o = parse(['--import', '20000']);
    expect(o.mode).toBe(ProduceMode.import);
    expect(o.import).toEqual({ lines: 20_000, repeat: 0.2, bad: 0, reupload: false });
    expect(parse(['--import', '1000', '--repeat', '0', '--bad', '0.01', '--reupload', '--prelabels', '0.5', '--duplicates', '0.2']).import).toEqual({ lines: 1000, repeat: 0, bad: 0.01, reupload: true });
  });

  it('refuses an import size that is not a positive integer', () => {
    expect(refusal(['--import', '0'])).toBe('--import must be an integer from 1 to 100000000, got 0');
    expect(refusal(['--import', '1e3.5'])).toMatch(/^--import must be an integer/);
    expect(refusal(['--import', ''])).toMatch(/^--import must be an integer .*, got $/);
  });

  it('refuses repeat and bad shares outside [0, 1) or that leave no valid line', () => {
    expect(refusal(['--import', '10', '--repeat', '1'])).toBe('--repeat must be a fraction from 0 up to (not including) 1, got 1');
    expect(refusal(['--import', '10', '--bad=-0.1'])).toBe('--bad must be a fraction from 0 up to (not including) 1, got -0.1');
    expect(refusal(['--import', '10', '--repeat', '0.6', '--bad', '0.4'])).toBe('--repeat 0.6 and --bad 0.4 add up to 1 or more: the file would have no valid line');
    expect(refusal(['--import', '2', '--repeat', '0.5', '--bad', '0.4'])).toBe('--import 2 with --repeat 0.5 and --bad 0.4 leaves no valid line: raise --import');
  });

  it('refuses saga options next to --import, and import options without it', () => {
    expect(refusal(['--import', '10', '--tasks', '5', '--reject', '0.1'])).toBe('--import uploads a file of tasks and drives no sagas: leave out --tasks, --reject');
    expect(parse(['--import', '10', '--prelabels', '0.5', '--annotators', '3', '--concurrency', '4'])).toMatchObject({ annotators: 3, concurrency: 4 });
    expect(refusal(['--repeat', '0.1', '--reupload'])).toBe('--repeat, --reupload only apply to --import N');
  });

  it('refuses every option an import would take and ignore, as it refuses --reviewers, saying why', () => {
    expect(refusal(['--import', '10', '--managers', '2', '--qa-url', 'http://127.0.0.1:3203'])).toBe('--import uploads a file of tasks and drives no sagas: leave out --managers, --qa-url');
    expect(refusal(['--import', '10', '--concurrency', '4', '--duplicates', '0.3'])).toBe(
      'with --import, --concurrency, --duplicates only act on the pre-labels (the annotators claim the proposed tasks, label-svc lists them): add --prelabels R, or leave them out',
    );
    expect(refusal(['--import', '10', '--prelabels', '0', '--annotators', '3', '--timeout-s', '60', '--label-url', 'http://127.0.0.1:3202'])).toMatch(/^with --import, --annotators, --timeout-s, --label-url only act on the pre-labels/);
    expect(parse(['--import', '10', '--prelabels', '0.2', '--duplicates', '0.3', '--timeout-s', '60', '--label-url', 'http://127.0.0.1:3202', '--price', '20', '--seed', '7'])).toMatchObject({ duplicates: 0.3, timeoutMs: 60_000, price: 20, seed: 7 });
    // In a saga run each of them does something.
    expect(parse(['--managers', '2', '--qa-url', 'http://127.0.0.1:3203', '--concurrency', '4', '--duplicates', '0.3'])).toMatchObject({ managers: 2, concurrency: 4, duplicates: 0.3 });
  });

  it('refuses a pre-label share outside [0, 1], or without an import to propose labels for', () => {
    expect(parse(['--import', '100', '--prelabels', '1']).prelabels).toBe(1);
    expect(refusal(['--import', '100', '--prelabels', '1.5'])).toBe('--prelabels must be a fraction between 0 and 1, got 1.5');
    expect(refusal(['--import', '100', '--prelabels', 'half'])).toBe('--prelabels must be a fraction between 0 and 1, got half');
    expect(refusal(['--tasks', '10', '--prelabels', '0.5'])).toBe('--prelabels proposes labels for the tasks of an import: it needs --import N');
  });

  it('refuses scenario rates that add up to more than 1', () => {
    expect(refusal(['--reject', '0.6', '--cancel', '0.5'])).toBe('the scenario rates (--reject, --billing-fail, --qa-timeout, --cancel) add up to more than 1');
  });

  it('refuses malformed brokers, prefixes and URLs, and a wait the services would not honour', () => {
    expect(refusal(['--kafka-brokers', 'localhost'])).toBe('--kafka-brokers must be host:port[,host:port...], got localhost');
    expect(refusal(['--prefix', 'a b'])).toBe('--prefix must be 1-200 characters of letters, digits, . _ -, got a b');
    expect(refusal(['--task-url', 'ftp://x'])).toBe('--task-url must be an http(s) URL, got ftp://x');
    expect(refusal(['--wait-s', '31'])).toBe('--wait-s must be an integer from 0 to 30, got 31');
  });

  it('refuses an unknown option or a stray argument, naming it', () => {
    expect(refusal(['--imports', '10'])).toMatch(/^Unknown option '--imports'.*; see --help$/);
    expect(refusal(['10'])).toMatch(/Unexpected argument '10'.*; see --help$/);
  });

  it('answers --help without validating anything else', () => {
    expect(parseProduceArgs(['--help', '--import', '0'], {}, defaults)).toEqual({ help: true });
  });
});
