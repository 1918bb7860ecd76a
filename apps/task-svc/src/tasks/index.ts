import type { Capability } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import { taskConsumer } from './reactions';
import { taskRoutes } from './routes';
import { leaseSweeper } from './sweepers';

export const tasksCapability: Capability<TaskSvcConfig> = { consumes: taskConsumer, routes: taskRoutes, sweepers: (ctx) => [leaseSweeper(ctx)] };
