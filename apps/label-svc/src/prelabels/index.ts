import type { Capability } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { prelabelRoutes } from './routes';

/**
 * Machine pre-labels: the project's policy and the proposals' read side. Proposals are consumed by
 * the labels capability (labels/reactions.ts), since one may become the attempt's labels.
 */
export const prelabelsCapability: Capability<LabelSvcConfig> = { routes: prelabelRoutes };
