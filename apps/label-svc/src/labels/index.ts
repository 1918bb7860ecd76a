import type { Capability } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { labelReactions } from './reactions';
import { labelRoutes } from './routes';

export const labelsCapability: Capability<LabelSvcConfig> = { reactions: labelReactions, routes: labelRoutes };
