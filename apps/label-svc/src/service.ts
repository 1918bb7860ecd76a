import type { ServiceDefinition } from '@labelflow/service-kit';
import type { LabelSvcConfig } from './config';
import { labelsCapability } from './labels';
import { migrations } from './migrations';
import { prelabelsCapability } from './prelabels';

export const labelService: ServiceDefinition<LabelSvcConfig> = { name: 'label-svc', migrations, capabilities: [labelsCapability, prelabelsCapability] };
