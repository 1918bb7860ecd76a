import type { ServiceDefinition } from '@labelflow/service-kit';
import type { QaSvcConfig } from './config';
import { migrations } from './migrations';
import { reviewsCapability } from './reviews';

export const qaService: ServiceDefinition<QaSvcConfig> = { name: 'qa-svc', migrations, capabilities: [reviewsCapability] };
