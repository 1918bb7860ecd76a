import type { Capability } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { reviewConsumer } from './reactions';
import { reviewRoutes } from './routes';
import { reviewDeadlineSweeper } from './sweeper';

export const reviewsCapability: Capability<QaSvcConfig> = { consumes: reviewConsumer, routes: reviewRoutes, sweepers: (ctx) => [reviewDeadlineSweeper(ctx)] };
