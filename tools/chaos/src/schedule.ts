import type { ServiceName } from '@labelflow/contracts';
import { seededRandom } from '@labelflow/producer';

export const serviceOrder: readonly ServiceName[] = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc'];

/** The faults a run injects. */
export const FaultKind = {
  kill: 'kill',
  pgDrop: 'pg-drop',
  pgRestart: 'pg-restart',
  kafkaRestart: 'kafka-restart',
  redisOutage: 'redis-outage',
  pause: 'pause',
} as const;
export type FaultKind = (typeof FaultKind)[keyof typeof FaultKind];

export const faultKinds: readonly FaultKind[] = Object.values(FaultKind);

/** What each kind does, for the schedule and the report. */
export const faultLabel: Readonly<Record<FaultKind, string>> = {
  kill: 'SIGKILL a service, then restart it',
  'pg-drop': "drop every service's PostgreSQL connections (pg_terminate_backend)",
  'pg-restart': 'restart PostgreSQL (stop fast, start)',
  'kafka-restart': 'restart the Kafka broker (stop, start)',
  'redis-outage': 'stop Redis, start it again later',
  pause: 'pause a service (SIGSTOP, then SIGCONT after its session timeout)',
};

export interface PlannedFault {
  /** 1-based position in the schedule. */
  readonly n: number;
  readonly kind: FaultKind;
  /** The service a kill or a pause hits. */
  readonly service?: ServiceName;
  /** Injected once this many tasks have finished (and the fault before it has recovered). */
  readonly atTasks: number;
  /** How long an outage or a pause lasts. */
  readonly durationMs?: number;
}

export interface ScheduleInput {
  readonly tasks: number;
  readonly seed: number;
  readonly killsPerService: number;
  readonly pgDrops: number;
  readonly redisOutageMs: number;
  readonly pauseMs: number;
  /** Faults are spread between these fractions of the tasks done. */
  readonly window: readonly [number, number];
}


/**
 * The fault schedule: every fault of the run in a seeded order, each at a number of finished tasks
 * spread over the window (one slot per fault, a seeded point inside each slot). Pure and
 * deterministic: the same input gives the same schedule, which the run prints before it starts.
 */
export function planFaults(input: ScheduleInput): PlannedFault[] {
  const random = seededRandom(input.seed ^ 0x9e3779b9);
  const faults: Omit<PlannedFault, 'n' | 'atTasks'>[] = [];
  for (let round = 0; round < input.killsPerService; round++) for (const service of serviceOrder) faults.push({ kind: FaultKind.kill, service });
  for (let i = 0; i < input.pgDrops; i++) faults.push({ kind: FaultKind.pgDrop });
  faults.push({ kind: FaultKind.pgRestart });
  faults.push({ kind: FaultKind.kafkaRestart });
  faults.push({ kind: FaultKind.redisOutage, durationMs: input.redisOutageMs });
  faults.push({ kind: FaultKind.pause, service: serviceOrder[Math.floor(random() * serviceOrder.length)] ?? 'task-svc', durationMs: input.pauseMs });
  // Fisher-Yates with the seeded generator.
  for (let i = faults.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    const [a, b] = [faults[i], faults[j]];
    if (a && b) [faults[i], faults[j]] = [b, a];
  }
  const [from, to] = input.window;
  const slot = (to - from) / faults.length;
  return faults.map((f, i) => {
    const fraction = from + slot * (i + 0.2 + 0.6 * random());
    return { n: i + 1, ...f, atTasks: Math.min(input.tasks, Math.max(1, Math.round(fraction * input.tasks))) };
  });
}

/** One line of the printed schedule. */
export function describeFault(f: Pick<PlannedFault, 'kind' | 'service' | 'durationMs'>): string {
  const s = (ms?: number) => `${((ms ?? 0) / 1000).toFixed(ms !== undefined && ms % 1000 !== 0 ? 1 : 0)} s`;
  switch (f.kind) {
    case FaultKind.kill:
      return `SIGKILL ${f.service}, restart it`;
    case FaultKind.pgDrop:
      return "drop every service's PostgreSQL connections";
    case FaultKind.pgRestart:
      return 'restart PostgreSQL';
    case FaultKind.kafkaRestart:
      return 'restart the Kafka broker';
    case FaultKind.redisOutage:
      return `stop Redis for ${s(f.durationMs)}`;
    case FaultKind.pause:
      return `SIGSTOP ${f.service} for ${s(f.durationMs)}, then SIGCONT`;
  }
}

/** The schedule as printed before the run starts. */
export function formatSchedule(faults: readonly PlannedFault[], tasks: number, seed: number): string {
  const width = String(tasks).length;
  const lines = faults.map((f) => `  #${String(f.n).padStart(2)}  after ${String(f.atTasks).padStart(width)}/${tasks} tasks (${((100 * f.atTasks) / tasks).toFixed(1).padStart(4)}%)  ${describeFault(f)}`);
  return [`fault schedule (seed ${seed}, ${faults.length} faults, one at a time, each once the one before has recovered):`, ...lines].join('\n');
}
