import { z } from 'zod';
import { BaseConfig } from '@labelflow/service-kit';

export const QaSvcConfig = BaseConfig.extend({
  PORT: BaseConfig.shape.PORT.default(3003),
  /** The review SLA: a review still pending this long after it opened times out (default 72 h). */
  QA_SLA_MS: z.coerce.number().int().min(1).max(31_536_000_000).default(259_200_000),
});
export type QaSvcConfig = ReturnType<typeof QaSvcConfig.parse>;
