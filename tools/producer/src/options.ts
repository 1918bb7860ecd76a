// `npm run produce` options: parsed and validated here, apart from the CLI, so every refusal is a
// clear sentence a unit test can pin down and nothing starts with a half-valid configuration.
import { parseArgs } from 'node:util';
import { kafkaSecurityFromEnv, type KafkaSecurity } from '@labelflow/messaging';

/** A command line the producer refuses: printed as is, exit code 2. */
export class UsageError extends Error {
  readonly code = 'PRODUCE_USAGE' as const;
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export const ProduceMode = { saga: 'saga', import: 'import' } as const;
export type ProduceMode = (typeof ProduceMode)[keyof typeof ProduceMode];

export interface ImportOptions {
  /** Lines in the generated file. */
  readonly lines: number;
  /** Share of lines repeating an earlier valid line. */
  readonly repeat: number;
  /** Share of lines the server must reject. */
  readonly bad: number;
  /** Upload the same file a second time under a new import id: it must create nothing. */
  readonly reupload: boolean;
}

export interface ProduceOptions {
  readonly mode: ProduceMode;
  readonly tasks: number;
  readonly import: ImportOptions | undefined;
  /** Share of the run's tasks that get a machine pre-label proposal on Kafka (0: none). */
  readonly prelabels: number;
  readonly concurrency: number;
  readonly annotators: number;
  readonly reviewers: number;
  readonly managers: number;
  readonly price: number;
  readonly rates: { readonly reject: number; readonly billingFail: number; readonly qaTimeout: number; readonly cancel: number };
  readonly duplicates: number;
  readonly seed: number;
  readonly timeoutMs: number;
  readonly waitS: number;
  readonly kafkaBrokers: readonly string[];
  /** From the services' KAFKA_SASL_* / KAFKA_SSL variables: the duplicator's, pre-labels' and audit's login. */
  readonly kafkaSecurity: KafkaSecurity;
  readonly prefix: string;
  readonly pgUrl: string;
  readonly dbSuffix: string;
  readonly audit: boolean;
  readonly urls: { readonly task: string; readonly label: string; readonly qa: string; readonly billing: string };
  readonly signingKeyFile: string;
  readonly issuer: string;
  readonly audience: string;
}

export type ParsedArgs = { readonly help: true } | { readonly help: false; readonly options: ProduceOptions };

export const usage =
  'usage: npm run produce -- [--tasks N] [--concurrency C] [--annotators A] [--reviewers V] [--managers M] [--price P] [--reject R] [--billing-fail R] [--qa-timeout R] [--cancel R]\n' +
  '                          [--duplicates R] [--seed S] [--timeout-s T] [--wait-s W] [--no-audit] [--task-url U] [--label-url U] [--qa-url U] [--billing-url U]\n' +
  '                          [--kafka-brokers B] [--prefix P] [--pg-url U] [--db-suffix S] [--signing-key-file F] [--issuer I] [--audience A]\n' +
  '       npm run produce -- --import N [--repeat 0.2] [--bad 0] [--reupload] [--prelabels R [--duplicates R] [--annotators A] [--concurrency C] [--timeout-s T] [--label-url U]] [--seed S] [--price P]\n' +
  '                          [--no-audit] [--task-url U] [--billing-url U] [--kafka-brokers B] [--prefix P] [--pg-url U] [--db-suffix S] [--signing-key-file F] [--issuer I] [--audience A]\n' +
  'Tokens are signed with the local development key (--signing-key-file, default $LABELFLOW_SIGNING_KEY_FILE or .local/auth/dev-signing-key.json), the one npm start configures the services with.';

const spec = {
  tasks: { type: 'string' },
  import: { type: 'string' },
  repeat: { type: 'string' },
  bad: { type: 'string' },
  reupload: { type: 'boolean' },
  prelabels: { type: 'string' },
  concurrency: { type: 'string' },
  annotators: { type: 'string' },
  reviewers: { type: 'string' },
  managers: { type: 'string' },
  price: { type: 'string' },
  reject: { type: 'string' },
  'billing-fail': { type: 'string' },
  'qa-timeout': { type: 'string' },
  cancel: { type: 'string' },
  duplicates: { type: 'string' },
  seed: { type: 'string' },
  'timeout-s': { type: 'string' },
  'wait-s': { type: 'string' },
  'kafka-brokers': { type: 'string' },
  prefix: { type: 'string' },
  'pg-url': { type: 'string' },
  'db-suffix': { type: 'string' },
  'no-audit': { type: 'boolean' },
  'task-url': { type: 'string' },
  'label-url': { type: 'string' },
  'qa-url': { type: 'string' },
  'billing-url': { type: 'string' },
  'signing-key-file': { type: 'string' },
  issuer: { type: 'string' },
  audience: { type: 'string' },
  help: { type: 'boolean' },
} as const;

/** What the options default to where the environment does not say: the CLI passes the real ones. */
export interface Defaults {
  readonly signingKeyFile: string;
  readonly issuer: string;
  readonly audience: string;
}

/** Up to 100 million lines: far past any bench, and still a safe line count for the generator. */
const MAX_IMPORT_LINES = 100_000_000;

/**
 * Parses `argv` (the arguments after `--`) against `env`. Throws `UsageError` with a sentence that
 * names the option, the rule and the value given.
 */
export function parseProduceArgs(argv: readonly string[], env: Readonly<Record<string, string | undefined>>, defaults: Defaults): ParsedArgs {
  let values: Partial<Record<keyof typeof spec, string | boolean>>;
  try {
    ({ values } = parseArgs({ args: [...argv], options: spec, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new UsageError(`${(error as Error).message.split('\n')[0]}; see --help`);
  }
  if (values.help === true) return { help: true };
  const given = (name: keyof typeof spec) => values[name] !== undefined;
  const text = (name: keyof typeof spec, fallback: string): string => {
    const v = values[name];
    return typeof v === 'string' ? v : fallback;
  };
  const int = (name: keyof typeof spec, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const raw = text(name, String(fallback));
    const n = raw.trim() === '' ? NaN : Number(raw);
    if (Number.isInteger(n) && n >= min && n <= max) return n;
    throw new UsageError(`--${name} must be an integer ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`}, got ${raw}`);
  };
  /** A share: `open` excludes 1 (a file cannot be all repeats), `positive` excludes 0. */
  const fraction = (name: keyof typeof spec, fallback: number, { open = false } = {}): number => {
    const raw = text(name, String(fallback));
    const n = raw.trim() === '' ? NaN : Number(raw);
    if (Number.isFinite(n) && n >= 0 && (open ? n < 1 : n <= 1)) return n;
    throw new UsageError(`--${name} must be a fraction ${open ? 'from 0 up to (not including) 1' : 'between 0 and 1'}, got ${raw}`);
  };
  const url = (name: keyof typeof spec, fallback: string): string => {
    const raw = text(name, fallback);
    try {
      const u = new URL(raw);
      if (u.protocol === 'http:' || u.protocol === 'https:') return raw.replace(/\/+$/, '');
    } catch {
      // reported below
    }
    throw new UsageError(`--${name} must be an http(s) URL, got ${raw}`);
  };

  const importing = given('import');
  // An option that would be taken and then do nothing is refused, saying why: a run that ignores
  // what it was told is not the run that was asked for.
  const sagaOnly = (['tasks', 'reject', 'billing-fail', 'qa-timeout', 'cancel', 'reviewers', 'managers', 'wait-s', 'qa-url'] as const).filter(given);
  if (importing && sagaOnly.length > 0) {
    throw new UsageError(`--import uploads a file of tasks and drives no sagas: leave out ${sagaOnly.map((n) => `--${n}`).join(', ')}`);
  }
  const importOnly = (['repeat', 'bad', 'reupload'] as const).filter(given);
  if (!importing && importOnly.length > 0) throw new UsageError(`${importOnly.map((n) => `--${n}`).join(', ')} only apply to --import N`);

  let imported: ImportOptions | undefined;
  if (importing) {
    const lines = int('import', 0, 1, MAX_IMPORT_LINES);
    const repeat = fraction('repeat', 0.2, { open: true });
    const bad = fraction('bad', 0, { open: true });
    if (repeat + bad >= 1) throw new UsageError(`--repeat ${repeat} and --bad ${bad} add up to 1 or more: the file would have no valid line`);
    const distinct = lines - Math.round(lines * repeat) - Math.round(lines * bad);
    if (distinct < 1) throw new UsageError(`--import ${lines} with --repeat ${repeat} and --bad ${bad} leaves no valid line: raise --import`);
    imported = { lines, repeat, bad, reupload: values.reupload === true };
  }

  const rates = { reject: fraction('reject', 0), billingFail: fraction('billing-fail', 0), qaTimeout: fraction('qa-timeout', 0), cancel: fraction('cancel', 0) };
  if (rates.reject + rates.billingFail + rates.qaTimeout + rates.cancel > 1) throw new UsageError('the scenario rates (--reject, --billing-fail, --qa-timeout, --cancel) add up to more than 1');

  const brokers = text('kafka-brokers', env.KAFKA_BROKERS ?? '127.0.0.1:9092')
    .split(',')
    .map((b) => b.trim())
    .filter((b) => b !== '');
  if (brokers.length === 0 || brokers.some((b) => !/^[^\s:/]+:\d{1,5}$/.test(b))) throw new UsageError(`--kafka-brokers must be host:port[,host:port...], got ${text('kafka-brokers', env.KAFKA_BROKERS ?? '')}`);
  const prefix = text('prefix', env.KAFKA_TOPIC_PREFIX ?? 'labelflow');
  if (!/^[A-Za-z0-9._-]{1,200}$/.test(prefix)) throw new UsageError(`--prefix must be 1-200 characters of letters, digits, . _ -, got ${prefix}`);
  const prelabels = fraction('prelabels', 0);
  // Saga tasks are finished by the end of their run: proposals are for tasks that wait for people.
  if (prelabels > 0 && !importing) throw new UsageError('--prelabels proposes labels for the tasks of an import: it needs --import N');
  // Of an import, only its pre-labels are claimed (by the annotators, so many at a time, each within
  // the timeout) and read back from label-svc; the upload itself uses none of these.
  const prelabelOnly = (['annotators', 'concurrency', 'duplicates', 'timeout-s', 'label-url'] as const).filter(given);
  if (importing && prelabels === 0 && prelabelOnly.length > 0) {
    throw new UsageError(`with --import, ${prelabelOnly.map((n) => `--${n}`).join(', ')} only act on the pre-labels (the annotators claim the proposed tasks, label-svc lists them): add --prelabels R, or leave them out`);
  }

  return {
    help: false,
    options: {
      mode: importing ? ProduceMode.import : ProduceMode.saga,
      tasks: importing ? 0 : int('tasks', 50, 1),
      import: imported,
      prelabels,
      concurrency: int('concurrency', 16, 1),
      annotators: int('annotators', 8, 1),
      reviewers: int('reviewers', 3, 1),
      managers: int('managers', 4, 1),
      price: int('price', 150, 1),
      rates,
      duplicates: fraction('duplicates', 0),
      seed: int('seed', 42, 0),
      timeoutMs: int('timeout-s', 300, 1) * 1000,
      // The services honour at most 30 s (MAX_PREFER_WAIT_S).
      waitS: int('wait-s', 10, 0, 30),
      kafkaBrokers: brokers,
      kafkaSecurity: securityFrom(env),
      prefix,
      pgUrl: text('pg-url', env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432'),
      // A second stack's databases (scripts/start.sh's LABELFLOW_DB_SUFFIX): task_svc<suffix> ...
      dbSuffix: text('db-suffix', env.LABELFLOW_DB_SUFFIX ?? ''),
      audit: values['no-audit'] !== true,
      urls: {
        task: url('task-url', env.TASK_SVC_URL ?? 'http://127.0.0.1:3001'),
        label: url('label-url', env.LABEL_SVC_URL ?? 'http://127.0.0.1:3002'),
        qa: url('qa-url', env.QA_SVC_URL ?? 'http://127.0.0.1:3003'),
        billing: url('billing-url', env.BILLING_SVC_URL ?? 'http://127.0.0.1:3004'),
      },
      signingKeyFile: text('signing-key-file', defaults.signingKeyFile),
      // An empty variable means "not set", as before.
      issuer: text('issuer', env.AUTH_ISSUER || defaults.issuer),
      audience: text('audience', env.AUTH_AUDIENCE || defaults.audience),
    },
  };
}

/** The brokers' login as the services read it; a partial or unknown one is a usage error. */
function securityFrom(env: Readonly<Record<string, string | undefined>>): KafkaSecurity {
  try {
    return kafkaSecurityFromEnv(env);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}
