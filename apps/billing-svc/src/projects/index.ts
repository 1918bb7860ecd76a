import type { Capability } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { projectRoutes } from './routes';

export const projectsCapability: Capability<BillingSvcConfig> = { routes: projectRoutes };
