import type { TestProject } from 'vitest/node';
import { buildServices } from './processes';
import { resolveInfra } from './infra';

declare module 'vitest' {
  export interface ProvidedContext {
    infra: { kafkaBrokers: string; pgUrl: string; redisUrl: string; source: string };
  }
}

/** Resolves real infrastructure once per run and builds the service bundles e2e tests spawn. */
export default async function setup(project: TestProject) {
  const { infra, teardown } = await resolveInfra();
  console.error(`[labelflow] test infrastructure from ${infra.source}: kafka ${infra.kafkaBrokers}, postgres ${infra.pgUrl}, redis ${infra.redisUrl}`);
  if (project.name === 'e2e') await buildServices();
  project.provide('infra', { ...infra });
  return teardown;
}
