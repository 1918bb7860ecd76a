import type { Capability } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { billingConsumer } from './reactions';
import { billingRoutes } from './routes';

export const billingCapability: Capability<BillingSvcConfig> = { consumes: billingConsumer, routes: billingRoutes };
