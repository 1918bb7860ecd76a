import type { Capability } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { billingReactions } from './reactions';
import { billingRoutes } from './routes';

export const billingCapability: Capability<BillingSvcConfig> = { reactions: billingReactions, routes: billingRoutes };
