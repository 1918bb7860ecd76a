import type { Capability } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { billingReadRoutes } from './read-routes';
import { billingConsumer } from './reactions';
import { billingRoutes } from './routes';

export const billingCapability: Capability<BillingSvcConfig> = {
  consumes: billingConsumer,
  routes: (app, ctx) => {
    billingRoutes(app, ctx);
    billingReadRoutes(app, ctx);
  },
};
