import type { ServiceDefinition } from '@labelflow/service-kit';
import type { TaskSvcConfig } from './config';
import { importsCapability } from './imports';
import { migrations } from './migrations';
import { tasksCapability } from './tasks';

export const taskService: ServiceDefinition<TaskSvcConfig> = { name: 'task-svc', migrations, capabilities: [tasksCapability, importsCapability] };
