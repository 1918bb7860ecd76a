import type { Violation } from './invariants';

export interface DeadLetter {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly code: string;
  readonly message: string;
  readonly source: string;
}

export interface AuditReport {
  readonly checkedAt: string;
  readonly counts: { readonly tasks: number; readonly projects: number; readonly byStatus: Readonly<Record<string, number>> };
  readonly violations: readonly Violation[];
  readonly deadLetters: readonly DeadLetter[];
  readonly ok: boolean;
}

export function formatReport(r: AuditReport): string {
  const lines = [
    `labelflow audit at ${r.checkedAt}`,
    `  tasks: ${r.counts.tasks} (${Object.entries(r.counts.byStatus).map(([s, n]) => `${s} ${n}`).join(', ') || 'none'}); projects: ${r.counts.projects}`,
  ];
  if (r.violations.length === 0) lines.push('  invariants: all hold');
  else {
    lines.push(`  VIOLATIONS: ${r.violations.length}`);
    for (const v of r.violations) lines.push(`    [${v.invariant}]${v.taskId ? ` task ${v.taskId}` : ''}${v.projectId && !v.taskId ? ` project ${v.projectId}` : ''}: ${v.detail}`);
  }
  lines.push(`  dead-lettered events: ${r.deadLetters.length}`);
  for (const d of r.deadLetters.slice(0, 50)) lines.push(`    ${d.topic}/${d.partition}@${d.offset} from ${d.source}: ${d.code} ${d.message}`);
  if (r.deadLetters.length > 50) lines.push(`    ... ${r.deadLetters.length - 50} more`);
  lines.push(r.ok ? 'verdict: OK' : 'verdict: VIOLATED');
  return lines.join('\n');
}
