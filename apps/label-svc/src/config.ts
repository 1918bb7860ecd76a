import { z } from 'zod';
import { BaseConfig } from '@labelflow/service-kit';

export const LabelSvcConfig = BaseConfig.extend({
  PORT: BaseConfig.shape.PORT.default(3002),
  /**
   * The version of LabelSubmitted this instance writes (default 2, the newest). 1 keeps writing
   * what not-yet-upgraded readers understand during a gray release; v2's `durationMs` is then lost.
   */
  LABEL_EVENT_VERSION: z.enum(['1', '2']).default('2').transform((v) => (v === '1' ? 1 : 2)),
});
export type LabelSvcConfig = ReturnType<typeof LabelSvcConfig.parse>;
