import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const lib = (name: string) => fileURLToPath(new URL(`./libs/${name}/src/index.ts`, import.meta.url));
const alias = {
  '@labelflow/auditor': fileURLToPath(new URL('./tools/auditor/src/index.ts', import.meta.url)),
  '@labelflow/producer': fileURLToPath(new URL('./tools/producer/src/index.ts', import.meta.url)),
  '@labelflow/dlq': fileURLToPath(new URL('./tools/dlq/src/index.ts', import.meta.url)),
  ...Object.fromEntries(
  ['contracts', 'messaging', 'outbox', 'dedup', 'telemetry', 'service-kit', 'testing', 'idgen', 'idempotency', 'auth', 'plumbing'].map((n) => [`@labelflow/${n}`, lib(n)])),
};

// Three tiers, picked by file suffix: unit (pure, in-memory), int (real Kafka/PostgreSQL/Redis),
// e2e (the four services as processes). Int and e2e share one global setup that resolves the
// real infrastructure once.
export default defineConfig({
  resolve: { alias },
  test: {
    // Two files at a time. Int and e2e files share one broker and one database server, but each
    // test uses topics, consumer groups, databases and Redis key prefixes of its own, and a test
    // that stops or breaks a server starts a private one on a spare port. Two workers keep both
    // cores busy (e2e: 86 % busy at two, against 558 s one at a time and 328 s two at a time);
    // more would only queue for the CPU and stretch the timing-bound tests.
    fileParallelism: true,
    maxWorkers: 2,
    minWorkers: 1,
    projects: [
      {
        resolve: { alias },
        test: { name: 'unit', include: ['{apps,libs,tools}/**/*.unit.spec.ts'], environment: 'node' },
      },
      {
        resolve: { alias },
        test: {
          name: 'int',
          include: ['{apps,libs,tools}/**/*.int.spec.ts'],
          globalSetup: ['libs/testing/src/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      {
        resolve: { alias },
        test: {
          name: 'e2e',
          include: ['e2e/**/*.e2e.spec.ts'],
          globalSetup: ['libs/testing/src/global-setup.ts'],
          testTimeout: 180_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
