import type { Capability } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { reviewReactions } from './reactions';
import { reviewRoutes } from './routes';
import { reviewDeadlineSweeper } from './sweeper';

export const reviewsCapability: Capability<QaSvcConfig> = { reactions: reviewReactions, routes: reviewRoutes, sweepers: (ctx) => [reviewDeadlineSweeper(ctx)] };
