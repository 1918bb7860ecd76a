import { BaseConfig } from '@labelflow/service-kit';

export const LabelSvcConfig = BaseConfig.extend({ PORT: BaseConfig.shape.PORT.default(3002) });
export type LabelSvcConfig = ReturnType<typeof LabelSvcConfig.parse>;
