import type { Capability } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import { taskReactions } from './reactions';
import { taskRoutes } from './routes';
import { leaseSweeper } from './sweepers';

export const tasksCapability: Capability<TaskSvcConfig> = { reactions: taskReactions, routes: taskRoutes, sweepers: (ctx) => [leaseSweeper(ctx)] };
