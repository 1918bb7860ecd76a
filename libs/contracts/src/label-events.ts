import { z } from 'zod';
import { AnnotatorId, storable } from './ids';
import { defineEvent } from './envelope';

export const Annotation = z.object({
  label: storable(z.string().min(1).max(200)),
  confidence: z.number().min(0).max(1).optional(),
});
export type Annotation = z.infer<typeof Annotation>;

export const LabelSubmitted = defineEvent('LabelSubmitted', 1, z.object({
  annotatorId: AnnotatorId,
  annotations: z.array(Annotation).min(1).max(1000),
}));

export const LabelEvent = z.discriminatedUnion('type', [LabelSubmitted]);
export type LabelSubmitted = z.infer<typeof LabelSubmitted>;
export type LabelEvent = z.infer<typeof LabelEvent>;
