import type { AuditReport } from '@labelflow/auditor';
import type { TestStack } from '@labelflow/testing';
import { auditSnapshot, findLostEvents, type LostReport } from './checks';
import { sleep, within } from './harness';

export interface CheckTarget {
  readonly stack: TestStack;
  readonly kafkaBrokers: string;
}

/**
 * Audits until the books hold, for at most a minute: in-flight work settles within seconds (the
 * producer's audit waits the same way), a real violation stays. `report` hears every attempt, so
 * a run cut short still carries the last one.
 */
export async function auditSettled({ stack, kafkaBrokers }: CheckTarget, report: (audit: AuditReport | undefined, error: string | undefined) => void): Promise<void> {
  let audit: AuditReport | undefined;
  let auditError: string | undefined;
  for (const until = Date.now() + 60_000; ; await sleep(2_000)) {
    try {
      audit = await within(120_000, 'the audit', auditSnapshot(stack.databases, kafkaBrokers, stack.prefix));
      auditError = undefined;
    } catch (e) {
      auditError = (e as Error).message;
    }
    report(audit, auditError);
    if ((audit?.ok && !auditError) || Date.now() > until) return;
  }
}

/**
 * Looks for lost events up to three times: something may still be on its way (a sweeper fired
 * after the quiesce), so between rounds the stack settles again. `report` hears every round.
 */
export async function lostEventsSettled(
  { stack, kafkaBrokers }: CheckTarget,
  say: (line: string) => void,
  report: (lost: LostReport | undefined, error: string | undefined) => void,
): Promise<void> {
  let lost: LostReport | undefined;
  let lostError: string | undefined;
  for (let round = 1; round <= 3; round++) {
    try {
      lost = await findLostEvents(stack.databases, kafkaBrokers, stack.prefix);
      lostError = undefined;
    } catch (e) {
      lostError = (e as Error).message;
    }
    report(lost, lostError);
    if ((lost && lost.lost === 0) || round === 3) return;
    say(`  ${lost ? `${lost.lost} events look lost` : `check failed: ${lostError}`}; settling and checking again (${round}/3)`);
    await stack.quiesce(60_000).catch(() => undefined);
  }
}
