import type { ServiceDefinition } from '@labelflow/service-kit';
import { billingCapability } from './billing';
import type { BillingSvcConfig } from './config';
import { migrations } from './migrations';
import { projectsCapability } from './projects';

export const billingService: ServiceDefinition<BillingSvcConfig> = {
  name: 'billing-svc',
  migrations,
  capabilities: [projectsCapability, billingCapability],
  // Every event billing-svc consumes debits, credits or refunds: Redis alone never skips one.
  confirmDedupInInbox: true,
};
