import { z } from 'zod';
import { AnnotatorId, storable } from './ids';
import { defineEvent } from './envelope';
import { labelSubmittedV1ToV2 } from './upcast';

export const Annotation = z.object({
  label: storable(z.string().min(1).max(200)),
  confidence: z.number().min(0).max(1).optional(),
});
export type Annotation = z.infer<typeof Annotation>;

/**
 * How long the annotator worked on one submission, in milliseconds, as their labelling tool
 * measured it. Bounded by the longest assignment lease (30 days): a longer claim cannot exist.
 */
export const WorkDurationMs = z.number().int().min(0).max(30 * 24 * 3_600_000);

const labelPayload = {
  annotatorId: AnnotatorId,
  annotations: z.array(Annotation.readonly()).min(1).max(1000).readonly(),
  /**
   * Who held the attempt when someone else's labels were submitted for it: the assignee, on a
   * model's auto-submitted pre-label (`annotatorId` is then the model). Absent when the holder
   * submitted. Added without a new version: a reader that does not know it drops it, and qa-svc
   * keeps the holder from reviewing labels of a task they held. In both versions' schemas, so an
   * instance pinned to v1 (a gray release) still tells the readers that know it.
   */
  heldBy: AnnotatorId.optional(),
};

/** Version 1: what label-svc wrote before `durationMs`, and what an instance pinned to `LABEL_EVENT_VERSION=1` still writes. */
export const LabelSubmittedV1 = defineEvent('LabelSubmitted', 1, z.object(labelPayload));
/** Version 2, the newest: adds `durationMs`, null when nobody measured it (a v1 event, a client that did not say). */
export const LabelSubmitted = defineEvent(
  'LabelSubmitted',
  2,
  z.object({
    ...labelPayload,
    durationMs: WorkDurationMs.nullable(),
  }),
);

// One schema per (type, version): the outer union picks the type, the inner one the version, and
// an older version is lifted to the newest on the way out, so every reader sees one shape.
export const LabelEvent = z.discriminatedUnion('type', [z.discriminatedUnion('version', [LabelSubmittedV1.transform(labelSubmittedV1ToV2), LabelSubmitted])]);
export type LabelSubmittedV1 = z.infer<typeof LabelSubmittedV1>;
export type LabelSubmitted = z.infer<typeof LabelSubmitted>;
export type LabelEvent = z.infer<typeof LabelEvent>;
