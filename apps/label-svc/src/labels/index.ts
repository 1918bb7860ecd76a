import type { Capability } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { labelConsumer } from './reactions';
import { labelRoutes } from './routes';

export const labelsCapability: Capability<LabelSvcConfig> = { consumes: labelConsumer, routes: labelRoutes };
