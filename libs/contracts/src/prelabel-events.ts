import { z } from 'zod';
import { ActorName, Attempt, Instant, ProjectId, storable, TaskId } from './ids';

/**
 * Machine pre-labels: label proposals published by model workers outside labelflow, on the input
 * topic `<prefix>.prelabels` (keyed by task id). No labelflow service produces them, so they carry
 * no `producer` and no Snowflake id: a worker names its proposal itself (`id`, 1-128 characters).
 *
 * Lengths are bounded so that the machine actor id `model.<name>@<version>` always fits ActorName
 * (128 characters): 6 + 64 + 1 + 57. A name has no `@`, so the id splits back unambiguously and two
 * models can never share one actor id.
 */
export const ProposalId = storable(z.string().min(1).max(128)).brand<'ProposalId'>();
export type ProposalId = z.infer<typeof ProposalId>;
export const ModelName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'must be 1-64 characters of letters, digits, . _ -')
  .brand<'ModelName'>();
export type ModelName = z.infer<typeof ModelName>;
export const ModelVersion = ActorName.max(57).brand<'ModelVersion'>();
export type ModelVersion = z.infer<typeof ModelVersion>;

export const ModelRef = z.object({ name: ModelName, version: ModelVersion }).readonly();
export type ModelRef = z.infer<typeof ModelRef>;

/** A proposed label; the confidence is required (the auto-submit threshold compares it). */
export const PrelabelAnnotation = z.object({ label: storable(z.string().min(1).max(200)), confidence: z.number().min(0).max(1) }).readonly();
export type PrelabelAnnotation = z.infer<typeof PrelabelAnnotation>;

export const PRELABEL_PROPOSED = 'PrelabelProposed';

/** Version 1 of a proposal: flat, no envelope `payload`, no `producer`. */
export const PrelabelProposed = z
  .object({
    id: ProposalId,
    type: z.literal(PRELABEL_PROPOSED),
    version: z.literal(1),
    taskId: TaskId,
    projectId: ProjectId,
    attempt: Attempt,
    occurredAt: Instant,
    model: ModelRef,
    annotations: z.array(PrelabelAnnotation).min(1).max(1000).readonly(),
  })
  .readonly();
export type PrelabelProposed = z.infer<typeof PrelabelProposed>;

/** Every (type, version) the prelabels topic carries: one for now, a discriminated union to grow into. */
export const PrelabelEvent = z.discriminatedUnion('type', [z.discriminatedUnion('version', [PrelabelProposed])]);
export type PrelabelEvent = z.infer<typeof PrelabelEvent>;

/** `model.<name>@<version>`: the annotator id of labels a model's proposal submitted (an ActorName). */
export const machineActorId = (model: ModelRef): string => `model.${model.name}@${model.version}`;

const MACHINE_ACTOR = /^model\.[A-Za-z0-9][A-Za-z0-9._-]{0,63}@[A-Za-z0-9][A-Za-z0-9._@-]{0,56}$/;

/**
 * True for an id of the form `machineActorId` gives. label-svc refuses a person whose token
 * subject has this form as a labeller, so an annotator id of this form always names a model.
 */
export const isMachineActor = (actorId: string): boolean => MACHINE_ACTOR.test(actorId);

/**
 * The dedup key type of a proposal: one effect per (task, attempt, project, model name + version).
 * A model re-publishing its proposal (under the same or a new id) is a duplicate; another model, or
 * a new version of it, is a proposal of its own. So is one naming another project: a misaddressed
 * proposal, refused or kept apart, must not use up the slot of the one addressed right.
 */
export const prelabelDedupType = (event: Pick<PrelabelProposed, 'model' | 'projectId'>): string => `${PRELABEL_PROPOSED}:${event.projectId}:${event.model.name}@${event.model.version}`;

/** What a model worker supplies; `occurredAt` defaults to now. */
export interface PrelabelProposalInput {
  readonly id: string;
  readonly taskId: string;
  readonly projectId: string;
  readonly attempt: number;
  readonly model: { readonly name: string; readonly version: string };
  readonly annotations: readonly { readonly label: string; readonly confidence: number }[];
  readonly occurredAt?: string;
}

/** A validated proposal; throws (zod) on anything the consumer would dead-letter. */
export const buildPrelabelProposed = (input: PrelabelProposalInput): PrelabelProposed =>
  PrelabelProposed.parse({ ...input, type: PRELABEL_PROPOSED, version: 1, occurredAt: input.occurredAt ?? new Date().toISOString() });

/** A Kafka message as producers send it: keyed by task id, with the headers every labelflow topic carries. */
export interface PrelabelMessage {
  readonly key: string;
  readonly value: string;
  readonly headers: { readonly 'event-type': typeof PRELABEL_PROPOSED; readonly 'event-version': string };
}

/** The message for a proposal (value JSON, key = task id, `event-type` / `event-version` headers). */
export const prelabelMessage = (proposal: PrelabelProposed): PrelabelMessage => ({
  key: proposal.taskId,
  value: JSON.stringify(proposal),
  headers: { 'event-type': PRELABEL_PROPOSED, 'event-version': String(proposal.version) },
});
