import type { ServiceDefinition } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from './config';
import { migrations } from './migrations';
import { sagasCapability } from './sagas';

export const sagaMonitor: ServiceDefinition<SagaMonitorConfig> = { name: 'saga-monitor', migrations, capabilities: [sagasCapability], publicRoutes: ['/ui'] };
