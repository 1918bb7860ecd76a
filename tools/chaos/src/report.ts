import { formatReport, type AuditReport } from '@labelflow/auditor';
import type { LostReport } from './checks';
import type { InjectedFault } from './faults';
import { describeFault, FaultKind, faultKinds, serviceOrder, type PlannedFault } from './schedule';
import type { Finding } from './supervisor';

export interface ChaosResult {
  readonly tasks: number;
  readonly duplicates: number;
  readonly seed: number;
  readonly qaSlaMs: number;
  readonly prefix: string;
  readonly startedAt: string;
  readonly durationMs: number;
  readonly phasesMs: Readonly<Record<string, number>>;
  readonly planned: readonly PlannedFault[];
  readonly faults: readonly InjectedFault[];
  readonly production?: {
    readonly byScenario: Readonly<Record<string, number>>;
    readonly byOutcome: Readonly<Record<string, number>>;
    /** By scenario, then outcome. */
    readonly matrix: Readonly<Record<string, Readonly<Record<string, number>>>>;
    readonly unexpected: readonly { readonly scenario: string; readonly outcome: string; readonly taskId?: string; readonly error?: string }[];
    readonly duplicated: number;
    readonly latencyMs: { readonly p50: number; readonly p99: number };
    readonly durationMs: number;
    readonly requestsPerStep: number;
    /** 429 RATE_LIMITED answers (waited out, sent again); absent in results from before authentication. */
    readonly rateLimited?: number;
  };
  /** Undefined when the run did not get that far. */
  readonly quiesced?: boolean;
  /** Why the run was cut short (a signal, the time bound). */
  readonly aborted?: string;
  readonly quiesceError?: string;
  readonly audit?: AuditReport;
  readonly auditError?: string;
  readonly lost?: LostReport;
  readonly lostError?: string;
  readonly findings: readonly Finding[];
  readonly proxies: Readonly<Record<string, { readonly forwarded: number; readonly held: number; readonly dropped: number }>>;
  /** Harness problems: a fault not carried out, a check that could not run, the time bound. */
  readonly harnessErrors: readonly string[];
  readonly notes: readonly string[];
  readonly logDir: string;
}

export interface Verdict {
  readonly pass: boolean;
  /** 0 pass; 1 the services failed (violations, unexpected outcomes, lost events, findings); 2 the run itself could not be completed. */
  readonly exitCode: 0 | 1 | 2;
  readonly reasons: readonly string[];
}

export const unexpectedCount = (r: ChaosResult) => r.production?.unexpected.length;
export const violationCount = (r: ChaosResult) => r.audit?.violations.length;
export const lostCount = (r: ChaosResult) => r.lost?.lost;

/** Exit 0 only if violations = 0, unexpected = 0 and lost = 0 (and no service died by itself). */
export function verdict(r: ChaosResult): Verdict {
  const failures: string[] = [];
  const u = unexpectedCount(r);
  const v = violationCount(r);
  const l = lostCount(r);
  if (u !== undefined && u > 0) failures.push(`${u} unexpected saga outcomes`);
  if (v !== undefined && v > 0) failures.push(`${v} audit violations`);
  if (l !== undefined && l > 0) failures.push(`${l} lost events`);
  if (r.findings.length > 0) failures.push(`${r.findings.length} findings (a service died, did not restart or did not recover by itself)`);
  if (r.quiesced === false) failures.push(`the stack did not come to rest: ${r.quiesceError ?? 'unknown'}`);
  const harness = [...r.harnessErrors];
  if (r.aborted) return { pass: false, exitCode: 2, reasons: [`aborted: ${r.aborted}`, ...failures] };
  if (u === undefined) harness.push('the load did not complete');
  if (v === undefined) harness.push(`the audit did not run${r.auditError ? `: ${r.auditError}` : ''}`);
  if (l === undefined) harness.push(`the lost-event check did not run${r.lostError ? `: ${r.lostError}` : ''}`);
  if (failures.length > 0) return { pass: false, exitCode: 1, reasons: [...failures, ...harness] };
  if (harness.length > 0) return { pass: false, exitCode: 2, reasons: harness };
  return { pass: true, exitCode: 0, reasons: [] };
}

const kindTitle: Readonly<Record<FaultKind, string>> = {
  kill: 'SIGKILL + restart',
  'pg-drop': 'PostgreSQL connections dropped',
  'pg-restart': 'PostgreSQL restart',
  'kafka-restart': 'Kafka broker restart',
  'redis-outage': 'Redis outage',
  pause: 'service paused (SIGSTOP/SIGCONT)',
};

/** An unexpected outcome's error reduced to its step and answer, e.g. `labels: 409 IDEMPOTENCY_KEY_IN_FLIGHT`. */
export function errorSignature(error: string | undefined): string {
  if (!error) return 'no error (another final status)';
  const step = /^([a-z]+): (\d{3})/.exec(error);
  const code = /"code":"([A-Z_]+)"/.exec(error)?.[1];
  if (step) return `${step[1]}: ${step[2]}${code ? ` ${code}` : ''}`;
  if (/at the deadline/.test(error)) return 'still in flight at the load deadline';
  return error.replace(/\d{6,}/g, '<id>').slice(0, 120);
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

function faultDetail(kind: FaultKind, done: readonly InjectedFault[]): string {
  const of = done.filter((f) => f.kind === kind);
  if (of.length === 0) return '';
  const parts: string[] = [];
  if (kind === FaultKind.kill || kind === FaultKind.pause) {
    parts.push(serviceOrder.map((s) => [s, of.filter((f) => f.service === s).length] as const).filter(([, c]) => c > 0).map(([s, c]) => `${s} ${c}`).join(', '));
  }
  if (kind === FaultKind.redisOutage || kind === FaultKind.pause) parts.push(of.map((f) => secs(f.durationMs ?? 0)).join(', '));
  if (kind === FaultKind.pgDrop) parts.push(of.map((f) => f.note ?? '').join(', '));
  const worst = Math.max(...of.map((f) => f.recoveryMs));
  parts.push(`ready again ≤ ${secs(worst)} after`);
  const failed = of.filter((f) => f.error || !f.recovered).length;
  if (failed > 0) parts.push(`**${failed} not recovered or not carried out**`);
  const late = of.filter((f) => f.afterLoad).length;
  if (late > 0) parts.push(`${late} after the load ended`);
  return parts.filter(Boolean).join('; ');
}

/** The markdown summary: one table with the counts that decide the verdict, then the details. */
export function formatChaosReport(r: ChaosResult): string {
  const v = verdict(r);
  const out: string[] = [];
  const p = r.production;
  out.push(`## Chaos run: ${r.tasks} tasks, duplicates ${r.duplicates}, seed ${r.seed}`);
  out.push('');
  out.push(`Started ${r.startedAt}, took ${secs(r.durationMs)} (${Object.entries(r.phasesMs).map(([k, ms]) => `${k} ${secs(ms)}`).join(', ')}). Topic prefix \`${r.prefix}\`, QA SLA ${secs(r.qaSlaMs)}. Logs: \`${r.logDir}\`.`);
  out.push('');
  out.push('| | count | detail |');
  out.push('|---|---:|---|');
  for (const kind of faultKinds) {
    const count = r.faults.filter((f) => f.kind === kind).length;
    const planned = r.planned.filter((f) => f.kind === kind).length;
    out.push(`| faults: ${kindTitle[kind]} | ${count}${count !== planned ? ` of ${planned} planned` : ''} | ${cell(faultDetail(kind, r.faults))} |`);
  }
  for (const outcome of ['completed', 'failed', 'cancelled', 'error']) out.push(`| sagas: ${outcome} | ${p ? (p.byOutcome[outcome] ?? 0) : 'n/a'} | |`);
  const bold = (x: number | undefined) => (x === undefined ? 'n/a' : x === 0 ? '0' : `**${x}**`);
  out.push(`| **unexpected outcomes** | ${bold(unexpectedCount(r))} | ${p ? `of ${r.tasks} sagas` : ''} |`);
  out.push(`| **audit violations** | ${bold(violationCount(r))} | ${r.audit ? `${r.audit.counts.tasks} tasks audited, REPEATABLE READ per database` : cell(r.auditError ?? '')} |`);
  out.push(
    `| **lost events** | ${bold(lostCount(r))} | ${r.lost ? `${r.lost.notOnKafka} outbox rows not on Kafka (of ${r.lost.outboxRows}), ${r.lost.missingInboxRows} inbox rows missing` : cell(r.lostError ?? '')} |`,
  );
  out.push(`| unplanned exits and other findings | ${bold(r.findings.length)} | |`);
  out.push(`| dead letters | ${r.audit ? r.audit.deadLetters.length : 'n/a'} | listed by the audit, not violations |`);
  out.push(`| duplicated deliveries | ${p ? p.duplicated : 'n/a'} | |`);
  out.push(`| verdict | ${v.pass ? 'PASS' : `FAIL (exit ${v.exitCode})`} | ${cell(v.reasons.join('; '))} |`);

  out.push('', '### Faults as injected', '');
  out.push('| # | after tasks | fault | outage | ready again after | note |');
  out.push('|---:|---:|---|---:|---:|---|');
  for (const f of r.faults) {
    const note = [f.note, f.afterLoad ? 'after the load ended' : '', f.error ? `ERROR: ${f.error}` : '', f.recovered ? '' : 'NOT RECOVERED'].filter(Boolean).join('; ');
    out.push(`| ${f.n} | ${f.tasksDone} (planned ${f.atTasks}) | ${describeFault(f)} | ${secs(f.outageMs)} | ${secs(f.recoveryMs)} | ${cell(note)} |`);
  }
  const missed = r.planned.filter((pf) => !r.faults.some((f) => f.n === pf.n));
  for (const f of missed) out.push(`| ${f.n} | — | ${describeFault(f)} | | | NOT INJECTED |`);

  if (p) {
    const outcomes = ['completed', 'failed', 'cancelled', 'error'];
    out.push('', '### Sagas by scenario and outcome', '');
    out.push(`| scenario | ${outcomes.join(' | ')} |`);
    out.push(`|---|${outcomes.map(() => '---:').join('|')}|`);
    for (const [scenario, row] of Object.entries(p.matrix)) out.push(`| ${scenario} | ${outcomes.map((o) => row[o] ?? 0).join(' | ')} |`);
    out.push('', `Load: ${secs(p.durationMs)}, saga p50 ${p.latencyMs.p50} ms, p99 ${p.latencyMs.p99} ms, ${p.requestsPerStep.toFixed(2)} HTTP requests per step${p.rateLimited ? ` (${p.rateLimited} answered 429 RATE_LIMITED and were sent again)` : ''}.`);
    if (p.unexpected.length > 0) {
      const causes = new Map<string, number>();
      for (const u of p.unexpected) causes.set(errorSignature(u.error), (causes.get(errorSignature(u.error)) ?? 0) + 1);
      out.push('', `### Unexpected outcomes (${p.unexpected.length})`, '');
      out.push('| cause | count |', '|---|---:|');
      for (const [cause, count] of [...causes].sort((x, y) => y[1] - x[1])) out.push(`| ${cell(cause)} | ${count} |`);
      out.push('', 'First 20:', '');
      for (const u of p.unexpected.slice(0, 20)) out.push(`- ${u.scenario} ended ${u.outcome}${u.taskId ? ` (task ${u.taskId})` : ''}${u.error ? `: ${u.error}` : ''}`);
    }
  }
  if (r.findings.length > 0) {
    out.push('', `### FINDINGS (${r.findings.length})`, '');
    for (const f of r.findings) out.push(`- ${f.at} ${f.service ?? 'stack'}: ${f.what}${f.during ? ` — during: ${f.during}` : ''}${f.log ? ` — log: \`${f.log}\`` : ''}`);
  }
  if (r.lost && (r.lost.lost > 0 || r.lost.notes.length > 0)) {
    out.push('', `### Lost events (${r.lost.lost}; first ${Math.min(50, r.lost.sample.length)})`, '');
    for (const e of r.lost.sample) {
      out.push(e.where === 'kafka' ? `- not on Kafka: ${e.service} ${e.type} task ${e.taskId} attempt ${e.attempt} (event ${e.eventId}, ${e.detail})` : `- not in ${e.service}'s inbox: ${e.type} task ${e.taskId} attempt ${e.attempt}`);
    }
    for (const note of r.lost.notes) out.push(`- note: ${note}`);
  }
  if (r.audit) out.push('', '### Audit', '', '```', formatReport(r.audit), '```');
  out.push('', '### Front doors', '');
  out.push(`Requests forwarded / held while the service was down / client connections dropped: ${Object.entries(r.proxies).map(([s, x]) => `${s} ${x.forwarded}/${x.held}/${x.dropped}`).join(', ')}.`);
  for (const note of r.notes) out.push(`- note: ${note}`);
  if (r.harnessErrors.length > 0) {
    out.push('', '### Harness problems', '');
    for (const e of r.harnessErrors) out.push(`- ${e}`);
  }
  return out.join('\n');
}

