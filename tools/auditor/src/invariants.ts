import { isMachineActor } from '@labelflow/contracts';
import type { Snapshot } from './snapshot';

export const Invariants = {
  BILLED_ONCE: 'BILLED_ONCE',
  BILLED_APPROVED: 'BILLED_APPROVED',
  NO_SURVIVING_DEBIT: 'NO_SURVIVING_DEBIT',
  BUDGET_BALANCE: 'BUDGET_BALANCE',
  PAYOUT_BALANCE: 'PAYOUT_BALANCE',
  MACHINE_UNPAID: 'MACHINE_UNPAID',
  COMPENSATED: 'COMPENSATED',
  COMPLETED_KEPT: 'COMPLETED_KEPT',
  LEDGER_ATTRIBUTED: 'LEDGER_ATTRIBUTED',
  NOT_STUCK: 'NOT_STUCK',
  OUTBOX_DRAINED: 'OUTBOX_DRAINED',
} as const;
export type Invariant = (typeof Invariants)[keyof typeof Invariants];

export interface Violation {
  readonly invariant: Invariant;
  readonly detail: string;
  readonly taskId?: string;
  readonly projectId?: string;
}

export interface AuditOptions {
  readonly now: Date;
  /** Tasks that changed more recently than this may still have events in flight; cross-service checks skip them. */
  readonly settleMs: number;
  /** A non-terminal step may last this long past its deadline or lease before the task counts as stuck. */
  readonly stuckMs: number;
  /** An outbox row waiting to be published for longer than this is a violation (a parked one is, whatever its age). */
  readonly outboxMs: number;
}

const TERMINAL_FAILURES = new Set(['failed', 'cancelled']);
const sum = (xs: readonly { amount: number }[]) => xs.reduce((n, x) => n + x.amount, 0);

/** Net money booked per task attempt: debits minus refunds (project side), credits minus reversals. */
function netByAttempt(ledger: Snapshot['ledger']) {
  const net = new Map<string, Map<number, { debit: number; credit: number; debits: number }>>();
  for (const e of ledger) {
    if (!e.taskId || e.attempt === null) continue;
    const perTask = net.get(e.taskId) ?? new Map();
    const cur = perTask.get(e.attempt) ?? { debit: 0, credit: 0, debits: 0 };
    if (e.kind === 'debit') perTask.set(e.attempt, { ...cur, debit: cur.debit + e.amount, debits: cur.debits + 1 });
    else if (e.kind === 'refund') perTask.set(e.attempt, { ...cur, debit: cur.debit - e.amount });
    else if (e.kind === 'credit') perTask.set(e.attempt, { ...cur, credit: cur.credit + e.amount });
    else if (e.kind === 'reversal') perTask.set(e.attempt, { ...cur, credit: cur.credit - e.amount });
    net.set(e.taskId, perTask);
  }
  return net;
}

/** The cross-service invariants of the saga, checked on one snapshot of the four databases. */
export function checkInvariants(s: Snapshot, o: AuditOptions): Violation[] {
  const violations: Violation[] = [];
  const flag = (invariant: Invariant, detail: string, ids: { taskId?: string; projectId?: string } = {}) => violations.push({ invariant, detail, ...ids });
  const now = o.now.getTime();
  const settled = (t: Snapshot['tasks'][number]) => now - t.updatedAt.getTime() >= o.settleMs;
  const price = new Map(s.projects.map((p) => [p.projectId, p.pricePerTask]));
  const machinePrice = new Map(s.projects.map((p) => [p.projectId, p.machinePricePerTask ?? 0]));
  const billedTo = new Map((s.billings ?? []).map((b) => [`${b.taskId}#${b.attempt}`, b.annotatorId]));
  const net = netByAttempt(s.ledger);

  for (const t of s.tasks) {
    if (!settled(t)) continue;
    const ids = { taskId: t.taskId, projectId: t.projectId };
    const booked = [...(net.get(t.taskId) ?? new Map()).entries()].filter(([, n]) => n.debit !== 0 || n.credit !== 0);
    const machine = isMachineActor(billedTo.get(`${t.taskId}#${t.attempt}`) ?? '');
    if (t.status === 'completed' && machine) {
      // The machine rule: the project pays its machine price (a debit, none at 0) and nobody is credited.
      const expected = machinePrice.get(t.projectId) ?? 0;
      const ok = expected === 0 ? booked.length === 0 : booked.length === 1 && booked[0]?.[0] === t.attempt && booked[0][1].debit === expected && booked[0][1].credit === 0 && booked[0][1].debits === 1;
      if (!ok) flag('BILLED_ONCE', `completed task labelled by a model on attempt ${t.attempt} at machine price ${expected}: net booked ${JSON.stringify(Object.fromEntries(booked))}`, ids);
    } else if (t.status === 'completed') {
      const expected = price.get(t.projectId);
      const ok = booked.length === 1 && booked[0]?.[0] === t.attempt && booked[0][1].debit === expected && booked[0][1].credit === expected && booked[0][1].debits === 1;
      if (!ok) flag('BILLED_ONCE', `completed task on attempt ${t.attempt} at price ${expected}: net booked ${JSON.stringify(Object.fromEntries(booked))}`, ids);
    } else if (TERMINAL_FAILURES.has(t.status)) {
      if (booked.length > 0) flag('NO_SURVIVING_DEBIT', `${t.status} task still has money booked without refund: ${JSON.stringify(Object.fromEntries(booked))}`, ids);
    } else {
      const stale = booked.filter(([attempt]) => attempt !== t.attempt);
      if (stale.length > 0) flag('NO_SURVIVING_DEBIT', `money booked for superseded attempts ${stale.map(([a]) => a).join(', ')} (task on attempt ${t.attempt})`, ids);
      // A task not yet completed may already be billed (task-svc completes it next): billing-svc
      // books a debit and its credit in one transaction, so whatever is booked on the current
      // attempt is one whole billing, never half of one or two.
      const current = booked.find(([attempt]) => attempt === t.attempt)?.[1];
      if (current) {
        const expected = machine ? { debit: machinePrice.get(t.projectId) ?? 0, credit: 0 } : { debit: price.get(t.projectId), credit: price.get(t.projectId) };
        if (current.debit !== expected.debit || current.credit !== expected.credit || current.debits !== 1) {
          flag('BILLED_ONCE', `${t.status} task on attempt ${t.attempt} has booked ${JSON.stringify(current)}, not one billing at ${JSON.stringify(expected)}`, ids);
        }
        checkBilledApproved(s, t, flag);
      }
    }
    // billing-svc's own record of the attempt agrees, also where no money moved (a model's labels at a machine price of 0).
    if (t.status === 'completed' && s.billings) {
      const billing = s.billings.find((b) => b.taskId === t.taskId && b.attempt === t.attempt);
      if (billing?.status !== 'completed') flag('BILLED_ONCE', `completed task's billing of attempt ${t.attempt} is ${billing?.status ?? 'missing'} in billing-svc`, ids);
    }
    checkRecordedEverywhere(s, t, flag);
    if (TERMINAL_FAILURES.has(t.status)) checkCompensated(s, t, flag);
    else {
      checkSupersededUndone(s, t, flag);
      checkNotStuck(s, t, o, flag);
      if (t.status === 'completed') checkCompletedKept(s, t, flag);
    }
  }

  for (const p of s.projects) {
    const entries = s.ledger.filter((e) => e.projectId === p.projectId);
    const expected = sum(entries.filter((e) => e.kind === 'topup')) - sum(entries.filter((e) => e.kind === 'debit')) + sum(entries.filter((e) => e.kind === 'refund'));
    if (p.balance !== expected) flag('BUDGET_BALANCE', `balance ${p.balance} != top-ups - debits + refunds = ${expected}`, { projectId: p.projectId });
    if (p.balance < 0) flag('BUDGET_BALANCE', `negative balance ${p.balance}`, { projectId: p.projectId });
  }
  checkPayouts(s, flag);
  checkLedgerAttributed(s, settled, flag);
  // A model is never paid: no payout row and no credit or reversal names one.
  for (const p of s.payouts.filter((p) => isMachineActor(p.annotatorId))) flag('MACHINE_UNPAID', `a model has a payout row: ${p.annotatorId} holds ${p.balance}`);
  for (const e of s.ledger.filter((e) => e.annotatorId !== null && isMachineActor(e.annotatorId))) {
    flag('MACHINE_UNPAID', `a ${e.kind} of ${e.amount} names the model ${e.annotatorId}`, { ...(e.taskId ? { taskId: e.taskId } : {}), projectId: e.projectId });
  }
  for (const row of s.unpublished) {
    const age = now - row.createdAt.getTime();
    // The relay has given up on a parked row (and holds its task's later rows behind it): waiting
    // longer never publishes it, only an operator's release does, so its age excuses nothing.
    if (row.parkedAt) {
      const why = row.failure ? `: ${row.failure.length > 200 ? `${row.failure.slice(0, 200)}…` : row.failure}` : '';
      flag('OUTBOX_DRAINED', `${row.service} outbox row ${row.id} (${row.eventType}) parked by the relay at ${row.parkedAt.toISOString()}${why}; it is never published until an operator releases it (failed_at = NULL)`);
    } else if (age > o.outboxMs) flag('OUTBOX_DRAINED', `${row.service} outbox row ${row.id} (${row.eventType}) unpublished for ${Math.round(age / 1000)} s`);
  }
  return violations;
}

type Flag = (invariant: Invariant, detail: string, ids?: { taskId?: string; projectId?: string }) => void;

/**
 * Every payout equals its credits minus its reversals, per annotator and currency: each ledger
 * entry counts in its project's currency, so a credit in EUR never makes up for a USD payout. Every
 * annotator the ledger pays is checked, with a payout row or without one (then its balance is 0).
 */
function checkPayouts(s: Snapshot, flag: Flag): void {
  // Payout rows without a currency (billing-svc before its migration 9) hold every currency in one.
  const split = s.payouts.every((p) => p.currency !== undefined);
  const currencyOf = new Map(s.projects.map((p) => [p.projectId, split ? (p.currency ?? '') : '']));
  const key = (annotatorId: string, currency: string | undefined) => JSON.stringify([annotatorId, currency ?? '']);
  const expected = new Map<string, number>();
  const held = new Map<string, number>();
  for (const p of s.payouts) held.set(key(p.annotatorId, p.currency), p.balance);
  for (const e of s.ledger) {
    if (e.annotatorId === null || (e.kind !== 'credit' && e.kind !== 'reversal')) continue;
    const k = key(e.annotatorId, currencyOf.get(e.projectId));
    expected.set(k, (expected.get(k) ?? 0) + (e.kind === 'credit' ? e.amount : -e.amount));
  }
  for (const k of new Set([...held.keys(), ...expected.keys()])) {
    const [annotatorId, currency] = JSON.parse(k) as [string, string];
    const [balance, owed] = [held.get(k) ?? 0, expected.get(k) ?? 0];
    if (balance !== owed) flag('PAYOUT_BALANCE', `payout of ${annotatorId}${currency ? ` in ${currency}` : ''} is ${balance}, credits - reversals = ${owed}`);
  }
}

function checkCompensated(s: Snapshot, t: Snapshot['tasks'][number], flag: Flag): void {
  const ids = { taskId: t.taskId, projectId: t.projectId };
  // On a cancelled task, a review still pending or labels still submitted are a verdict the
  // cancel never cleared: a reviewer could still approve its work. (A failed task's attempt was
  // approved before its billing failed, so only the approval itself can linger there.)
  const open = (status: string, verdict: string, pending: string) => status === verdict || (t.status === 'cancelled' && status === pending);
  for (const r of s.reviews.filter((r) => r.taskId === t.taskId && open(r.status, 'passed', 'pending'))) {
    flag('COMPENSATED', `${t.status} task keeps ${r.status === 'passed' ? 'an approved' : 'a pending'} review (attempt ${r.attempt}) in qa-svc`, ids);
  }
  for (const l of s.labels.filter((l) => l.taskId === t.taskId && open(l.status, 'accepted', 'submitted'))) {
    flag('COMPENSATED', `${t.status} task keeps ${l.status} labels (attempt ${l.attempt}) in label-svc`, ids);
  }
  if (t.status === 'cancelled') {
    for (const a of s.assignments.filter((a) => a.taskId === t.taskId && a.annotatorId !== null)) flag('COMPENSATED', `cancelled task keeps an open assignment to ${a.annotatorId} in label-svc`, ids);
  }
}

/**
 * The services' per-task records that refuse what comes late: a cancellation recorded in each of
 * them (so no late claim's labels, review or approval acts on the task), and billing-svc knowing
 * the task's current attempt (so a late approval of a superseded one is refused, not charged). A
 * compensating event dead-lettered on its way leaves no other trace until the money moves.
 */
function checkRecordedEverywhere(s: Snapshot, t: Snapshot['tasks'][number], flag: Flag): void {
  const ids = { taskId: t.taskId, projectId: t.projectId };
  const billing = s.billingTasks?.find((b) => b.taskId === t.taskId);
  if (t.status === 'cancelled') {
    const missing = [
      ...(s.billingTasks && billing?.cancelled !== true ? ['billing-svc (a late approval would be charged)'] : []),
      ...(s.reviewTasks && s.reviewTasks.find((r) => r.taskId === t.taskId)?.cancelled !== true ? ['qa-svc (late labels would open a review)'] : []),
      ...(s.assignments.some((a) => a.cancelled !== undefined) && s.assignments.find((a) => a.taskId === t.taskId)?.cancelled !== true ? ['label-svc (a late claim would take labels)'] : []),
    ];
    for (const where of missing) flag('COMPENSATED', `cancelled task's cancellation is not recorded in ${where}`, ids);
    return;
  }
  if (s.billingTasks && t.attempt > 1 && (billing?.latestAttempt ?? 1) < t.attempt) {
    flag('COMPENSATED', `billing-svc knows attempt ${billing?.latestAttempt ?? 1} of a task on attempt ${t.attempt}: a late approval of a superseded attempt would be charged`, ids);
  }
}

/**
 * billing-svc books money for an attempt only on that attempt's QaPassed, and qa-svc approves only
 * labels label-svc published: so money on the current attempt of a task task-svc has not completed
 * yet (task-svc may simply be behind) is there only with the steps before it, qa-svc's passed review
 * of the attempt and label-svc's live labels of it (whose author LEDGER_ATTRIBUTED matches against
 * the payee). A refund is no such case: it comes with a cancel (a terminal task) or a reopen (a
 * superseded attempt). And task-svc never takes a task back to `open` within an attempt, so an open
 * task's attempt was never claimed, and nothing of it can have been billed, however far behind
 * task-svc is.
 */
function checkBilledApproved(s: Snapshot, t: Snapshot['tasks'][number], flag: Flag): void {
  const review = s.reviews.find((r) => r.taskId === t.taskId && r.attempt === t.attempt);
  const label = s.labels.find((l) => l.taskId === t.taskId && l.attempt === t.attempt);
  // A billing that failed and was retried: BillingFailed revoked the review and voided the labels
  // for that reason, and their services wait for the retry's BillingCompleted to take them back,
  // which billing-svc's own record of the attempt shows already done.
  const retried = s.billings?.some((b) => b.taskId === t.taskId && b.attempt === t.attempt && b.status === 'completed') === true;
  const approved = review?.status === 'passed' || (retried && review?.status === 'revoked' && review.closeReason === 'BILLING_FAILED');
  const labelled = label?.status === 'submitted' || label?.status === 'accepted' || (retried && label?.status === 'voided' && label.voidReason === 'BILLING_FAILED');
  const missing = [
    ...(t.status === 'open' ? ['task-svc has never had the attempt claimed'] : []),
    ...(approved ? [] : [`qa-svc's review of it is ${review?.status ?? 'missing'}, not passed`]),
    ...(labelled ? [] : [`label-svc's labels of it are ${label?.status ?? 'missing'}`]),
  ];
  if (missing.length > 0) flag('BILLED_APPROVED', `${t.status} task's attempt ${t.attempt} is billed, yet ${missing.join('; ')}`, { taskId: t.taskId, projectId: t.projectId });
}

/**
 * A completed task keeps what it was paid for everywhere: the approved review of its attempt in
 * qa-svc and that attempt's accepted labels in label-svc. A compensation that reached one service
 * after the saga had completed (a billing failure replayed after its retry succeeded) shows here.
 */
function checkCompletedKept(s: Snapshot, t: Snapshot['tasks'][number], flag: Flag): void {
  const ids = { taskId: t.taskId, projectId: t.projectId };
  const review = s.reviews.find((r) => r.taskId === t.taskId && r.attempt === t.attempt);
  if (review?.status !== 'passed') flag('COMPLETED_KEPT', `completed task's review of attempt ${t.attempt} is ${review?.status ?? 'missing'} in qa-svc`, ids);
  const label = s.labels.find((l) => l.taskId === t.taskId && l.attempt === t.attempt);
  if (label?.status !== 'accepted') flag('COMPLETED_KEPT', `completed task's labels of attempt ${t.attempt} are ${label?.status ?? 'missing'} in label-svc`, ids);
}

/**
 * Money booked for a task is booked for a task task-svc has, in that task's project, and a
 * credit or reversal names whoever labelled the attempt in label-svc. The balances alone cannot
 * see a payment to the wrong person or on the wrong project's books: every sum would still agree.
 */
function checkLedgerAttributed(s: Snapshot, settled: (t: Snapshot['tasks'][number]) => boolean, flag: Flag): void {
  const tasks = new Map(s.tasks.map((t) => [t.taskId, t]));
  const labeller = new Map(s.labels.flatMap((l) => (l.annotatorId ? [[`${l.taskId}#${l.attempt}`, l.annotatorId] as const] : [])));
  for (const e of s.ledger) {
    // Only a top-up belongs to no task. Any other row without its task and attempt would escape
    // every per-attempt check while the balances moved with it, and still sum up right.
    if (e.kind !== 'topup' && (!e.taskId || e.attempt === null)) {
      flag('LEDGER_ATTRIBUTED', `a ${e.kind} of ${e.amount} names no ${e.taskId ? 'attempt' : 'task'}`, { ...(e.taskId ? { taskId: e.taskId } : {}), projectId: e.projectId });
      continue;
    }
    if (!e.taskId) continue;
    const task = tasks.get(e.taskId);
    if (!task) {
      flag('LEDGER_ATTRIBUTED', `a ${e.kind} of ${e.amount} names task ${e.taskId}, which task-svc does not have`, { taskId: e.taskId, projectId: e.projectId });
      continue;
    }
    if (!settled(task)) continue;
    const ids = { taskId: task.taskId, projectId: task.projectId };
    if (e.projectId !== task.projectId) flag('LEDGER_ATTRIBUTED', `a ${e.kind} of ${e.amount} is booked on project ${e.projectId}; the task belongs to ${task.projectId}`, ids);
    const labelledBy = e.attempt === null ? undefined : labeller.get(`${e.taskId}#${e.attempt}`);
    if ((e.kind === 'credit' || e.kind === 'reversal') && labelledBy !== undefined && e.annotatorId !== labelledBy) {
      flag('LEDGER_ATTRIBUTED', `a ${e.kind} of ${e.amount} names ${e.annotatorId ?? 'nobody'}; attempt ${e.attempt} was labelled by ${labelledBy}`, ids);
    }
  }
  // Whom billing charged an attempt to decides the price and the payout (a model's labels: the
  // machine price, nobody credited), and a model's billing books no credit the loop above would see.
  for (const b of s.billings ?? []) {
    const task = tasks.get(b.taskId);
    const labelledBy = labeller.get(`${b.taskId}#${b.attempt}`);
    if (!task || !settled(task)) continue;
    const ids = { taskId: task.taskId, projectId: task.projectId };
    if (labelledBy !== undefined && b.annotatorId !== labelledBy) flag('LEDGER_ATTRIBUTED', `billing of attempt ${b.attempt} names ${b.annotatorId}; it was labelled by ${labelledBy}`, ids);
    // Nobody approves their own work: qa-svc's SELF_REVIEW is the one check that stops it, and no sum shows it.
    const payee = labelledBy ?? b.annotatorId;
    if (b.approvedBy != null && b.approvedBy === payee) flag('LEDGER_ATTRIBUTED', `billing of attempt ${b.attempt} pays ${payee} for work ${payee} approved`, ids);
  }
}

/**
 * An attempt that a reopen replaced keeps no approval anywhere (nobody pays for it), and nothing
 * of it waits for a verdict: the reopen ended its pending review and its submitted labels.
 */
function checkSupersededUndone(s: Snapshot, t: Snapshot['tasks'][number], flag: Flag): void {
  const ids = { taskId: t.taskId, projectId: t.projectId };
  const live = { passed: 'an approved review', pending: 'a pending review' } as const;
  for (const r of s.reviews.filter((r) => r.taskId === t.taskId && r.attempt < t.attempt && (r.status === 'passed' || r.status === 'pending'))) {
    flag('COMPENSATED', `superseded attempt ${r.attempt} keeps ${live[r.status as keyof typeof live]} in qa-svc (task on attempt ${t.attempt})`, ids);
  }
  for (const l of s.labels.filter((l) => l.taskId === t.taskId && l.attempt < t.attempt && (l.status === 'accepted' || l.status === 'submitted'))) {
    flag('COMPENSATED', `superseded attempt ${l.attempt} keeps ${l.status} labels in label-svc (task on attempt ${t.attempt})`, ids);
  }
}

/**
 * Every task in flight must be waiting on something that will fire: an assignment lease, a review
 * deadline, or an event younger than the stuck bound. An open task waits in the pool for a claim:
 * no deadline applies to it, so it is never stuck.
 */
function checkNotStuck(s: Snapshot, t: Snapshot['tasks'][number], o: AuditOptions, flag: Flag): void {
  const ids = { taskId: t.taskId, projectId: t.projectId };
  const now = o.now.getTime();
  const idle = now - t.updatedAt.getTime();
  switch (t.status) {
    case 'open':
    case 'completed':
      return;
    case 'assigned': {
      if (!t.leaseExpiresAt) flag('NOT_STUCK', 'assigned without a lease', ids);
      else if (t.leaseExpiresAt.getTime() + o.stuckMs < now) flag('NOT_STUCK', `assignment lease ended at ${t.leaseExpiresAt.toISOString()} and the task was not reopened`, ids);
      // The lease may run a day: a claim label-svc never learned of would refuse the annotator's
      // labels (ASSIGNMENT_UNKNOWN) all that time, and only then reopen.
      if (t.assignee === undefined || idle <= o.stuckMs) return;
      const known = s.assignments.find((a) => a.taskId === t.taskId);
      if (known?.attempt !== t.attempt || known.annotatorId !== t.assignee) {
        flag('NOT_STUCK', `assigned to ${t.assignee ?? 'nobody'} on attempt ${t.attempt} for ${Math.round(idle / 1000)} s, but label-svc ${known ? `has attempt ${known.attempt} held by ${known.annotatorId ?? 'nobody'}` : 'knows no assignment'}: the annotator cannot submit`, ids);
      }
      return;
    }
    case 'labelled':
    case 'in_review': {
      const review = s.reviews.find((r) => r.taskId === t.taskId && r.attempt === t.attempt);
      if (!review) {
        if (idle > o.stuckMs) flag('NOT_STUCK', `${t.status} for ${Math.round(idle / 1000)} s and qa-svc has no review of attempt ${t.attempt}`, ids);
        return;
      }
      const live = review.status === 'pending' && review.deadlineAt !== null && review.deadlineAt.getTime() + o.stuckMs >= now;
      if (!live && idle > o.stuckMs) flag('NOT_STUCK', `${t.status} but the review of attempt ${t.attempt} is ${review.status} (deadline ${review.deadlineAt?.toISOString() ?? 'none'})`, ids);
      // A rework's review opens to decisions once qa-svc has read the reopen that began the attempt
      // (it names the holders who may not judge it): until then every verdict is "not yet".
      const reopened = s.reviewTasks?.find((r) => r.taskId === t.taskId)?.reopenedAttempt;
      if (live && t.attempt > 1 && reopened !== undefined && reopened < t.attempt && idle > o.stuckMs) {
        flag('NOT_STUCK', `the review of attempt ${t.attempt} waits for qa-svc to read the task's reopen to it (it has read attempt ${reopened}'s; a dead-lettered TaskReopened?): no verdict lands before its deadline times it out`, ids);
      }
      return;
    }
    case 'approved':
      if (idle > o.stuckMs) flag('NOT_STUCK', `approved for ${Math.round(idle / 1000)} s without a billing outcome`, ids);
      return;
    default:
      flag('NOT_STUCK', `unknown status ${t.status}`, ids);
  }
}
