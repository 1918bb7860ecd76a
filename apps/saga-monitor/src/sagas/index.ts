import type { Capability } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from '../config';
import { sagaConsumer } from './reactions';
import { retentionChore } from './retention';
import { sagaRoutes } from './routes';
import { alertSweeper } from './sweeper';

export const sagasCapability: Capability<SagaMonitorConfig> = { consumes: sagaConsumer, routes: sagaRoutes, sweepers: (ctx) => [alertSweeper(ctx)], chores: retentionChore };
