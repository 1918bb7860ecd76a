import type { Capability } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import { importRoutes } from './routes';

/** Bulk task import: HTTP only; the tasks it creates are the tasks capability's from then on. */
export const importsCapability: Capability<TaskSvcConfig> = { routes: importRoutes };
