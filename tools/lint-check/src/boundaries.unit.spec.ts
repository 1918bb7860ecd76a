// Proves that each boundary rule of eslint.config.mjs bites: a fixture that breaks it fails lint
// with the expected rule, and a fixture that keeps it passes. Fixtures are source text linted under
// virtual paths inside real projects, so @nx/enforce-module-boundaries resolves their project and
// tags from the workspace graph, and `eslint .` never sees them.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const BOUNDARIES = '@nx/enforce-module-boundaries';
const PURE_IMPORTS = '@typescript-eslint/no-restricted-imports';
const PURE_NAMES = 'no-restricted-imports';
const PURE_SYNTAX = 'no-restricted-syntax';

interface Finding {
  readonly ruleId: string | null;
  readonly message: string;
}

let eslint: ESLint;

/**
 * Lints `code` as if it were the file at `path` (relative to the workspace root); returns its errors,
 * and the rule-less warning ESLint gives for a file no config covers, so a fixture cannot pass by
 * being ignored.
 */
async function lint(path: string, code: string): Promise<readonly Finding[]> {
  const [result] = await eslint.lintText(code, { filePath: join(root, path), warnIgnored: true });
  return (result?.messages ?? []).filter((m) => m.severity === 2 || m.ruleId === null).map((m) => ({ ruleId: m.ruleId, message: m.message }));
}

const importOf = (specifier: string) => `import * as dep from '${specifier}';\nexport { dep };\n`;

beforeAll(() => {
  // The Nx rule reads the cached project graph and silently skips when there is none, so build it
  // from the project.json files as they are now (what `npm run lint` does first).
  const require = createRequire(import.meta.url);
  const nxBin = join(dirname(require.resolve('nx/package.json')), (require('nx/package.json') as { bin: { nx: string } }).bin.nx);
  execFileSync(process.execPath, [nxBin, 'show', 'projects'], { cwd: root, env: { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true' }, stdio: 'ignore' });
  eslint = new ESLint({ cwd: root });
}, 120_000);

interface Project {
  readonly name: string;
  readonly layer: number;
  /** A production file of the project (it need not exist). */
  readonly file: string;
  /** How others import it; apps have no import path. */
  readonly alias?: string;
}

const lib = (name: string, layer: number): Project => ({ name, layer, file: `libs/${name}/src/fixture.ts`, alias: `@labelflow/${name}` });
const layered: readonly Project[] = [
  lib('contracts', 0),
  lib('telemetry', 1),
  lib('plumbing', 2),
  ...['messaging', 'outbox', 'dedup', 'idgen', 'idempotency', 'auth'].map((name) => lib(name, 3)),
  lib('service-kit', 4),
  { name: 'task-svc', layer: 5, file: 'apps/task-svc/src/tasks/fixture.ts' },
];
const edges = layered.flatMap((source) =>
  layered.filter((target) => target !== source && target.alias).map((target) => ({ source: source.name, target: target.name, file: source.file, specifier: target.alias!, allowed: target.layer < source.layer })),
);

describe('layers: contracts → telemetry → plumbing → infrastructure libs → service-kit → apps', { timeout: 60_000 }, () => {
  it.each(edges.filter((e) => e.allowed))('$source may import $target, a lower layer', async ({ file, specifier }) => {
    expect(await lint(file, importOf(specifier))).toEqual([]);
  });

  // Some upward imports are also caught as a cycle (the lower project already depends on the upper one).
  it.each(edges.filter((e) => !e.allowed))('$source may not import $target, a layer at or above its own', async ({ file, specifier }) => {
    const findings = await lint(file, importOf(specifier));
    // Contracts' own allow-list refuses the same import a second time.
    const own = file.startsWith('libs/contracts/') ? [{ ruleId: PURE_IMPORTS, message: expect.stringContaining('libs/contracts holds pure schemas') }] : [];
    expect(findings).toEqual([{ ruleId: BOUNDARIES, message: expect.stringMatching(/can only depend on libs tagged with|Circular dependency/) }, ...own]);
  });

  it('two infrastructure libs are kept apart by their shared layer tag, not only by cycle detection', async () => {
    expect(await lint('libs/auth/src/fixture.ts', importOf('@labelflow/idgen'))).toEqual([
      { ruleId: BOUNDARIES, message: expect.stringContaining('A project tagged with "layer:3-infra" can only depend on libs tagged with "layer:0-contracts", "layer:1-telemetry", "layer:2-plumbing"') },
    ]);
  });

  it('an infrastructure lib’s integration test may wire in a sibling lib, its production code may not', async () => {
    expect(await lint('libs/outbox/src/fixture.int.spec.ts', importOf('@labelflow/messaging'))).toEqual([]);
    expect(await lint('libs/outbox/src/fixture.ts', importOf('@labelflow/messaging'))).toEqual([{ ruleId: BOUNDARIES, message: expect.stringContaining('"layer:3-infra"') }]);
  });

  it('a spec stays inside the layers apart from libs/testing', async () => {
    expect(await lint('libs/telemetry/src/fixture.unit.spec.ts', importOf('@labelflow/service-kit'))).toEqual([{ ruleId: BOUNDARIES, message: expect.stringMatching(/can only depend on libs tagged with|Circular dependency/) }]);
  });

  it('every lib but libs/testing and every app carries exactly one layer tag, and each app its own scope', () => {
    const tagsOf = (dir: string) => (JSON.parse(readFileSync(join(root, dir, 'project.json'), 'utf8')) as { tags: string[] }).tags;
    for (const project of layered) {
      const dir = project.alias ? `libs/${project.name}` : `apps/${project.name}`;
      expect(tagsOf(dir).filter((t) => t.startsWith('layer:')), dir).toHaveLength(1);
    }
    for (const svc of ['task-svc', 'label-svc', 'qa-svc', 'billing-svc']) expect(tagsOf(`apps/${svc}`)).toEqual(['type:app', `scope:${svc}`, 'layer:5-app']);
    expect(tagsOf('libs/testing').filter((t) => t.startsWith('layer:'))).toEqual([]);
  });
});

describe('services see each other only through contracts', { timeout: 60_000 }, () => {
  const file = 'apps/task-svc/src/tasks/fixture.ts';

  it.each([
    ['a relative path', '../../../label-svc/src/labels/decide'],
    ['a path from the workspace root', 'apps/label-svc/src/labels/decide'],
  ])('an app may not import another app by %s', async (_how, specifier) => {
    expect(await lint(file, importOf(specifier))).toEqual([{ ruleId: BOUNDARIES, message: expect.stringContaining('Projects cannot be imported by a relative or absolute path') }]);
  });

  it('an app may not import an operations tool: its scope allows only shared libs and itself', async () => {
    expect(await lint(file, importOf('@labelflow/auditor'))).toEqual([
      { ruleId: BOUNDARIES, message: 'A project tagged with "scope:task-svc" can only depend on libs tagged with "scope:shared", "scope:task-svc"' },
    ]);
  });

  it('a shared lib may not import an operations tool', async () => {
    expect(await lint('libs/service-kit/src/fixture.ts', importOf('@labelflow/producer'))).toEqual([
      { ruleId: BOUNDARIES, message: 'A project tagged with "scope:shared" can only depend on libs tagged with "scope:shared"' },
    ]);
  });

  it('an app may import the events of another service from contracts', async () => {
    expect(await lint(file, "import type { LabelSubmitted } from '@labelflow/contracts';\nexport type Seen = LabelSubmitted;\n")).toEqual([]);
  });

  it.each(['prom-client', '@opentelemetry/api'])('an app may not import %s: telemetry stays in libs', async (pkg) => {
    expect(await lint(file, importOf(pkg))).toEqual([{ ruleId: BOUNDARIES, message: expect.stringContaining(`"type:app" is not allowed to import "${pkg}"`) }]);
  });
});

describe('contracts are pure schemas', { timeout: 60_000 }, () => {
  const file = 'libs/contracts/src/fixture.ts';

  it.each(['kafkajs', 'pg', 'ioredis', 'fastify', 'pino', 'prom-client', '@opentelemetry/api', 'testcontainers', '@testcontainers/postgresql', '@platformatic/kafka', 'pg/lib/client.js'])(
    'contracts may not import the infrastructure package %s',
    async (pkg) => {
      const findings = await lint(file, importOf(pkg));
      expect(findings).toContainEqual({ ruleId: BOUNDARIES, message: expect.stringContaining(`"type:contracts" is not allowed to import "${pkg}"`) });
      expect(findings).toContainEqual({ ruleId: PURE_IMPORTS, message: expect.stringContaining('libs/contracts holds pure schemas') });
    },
  );

  it.each(['jose', 'node:http', 'node:crypto', '@labelflow/telemetry'])('contracts may not import %s either: they hold an allow-list, not a ban list', async (pkg) => {
    expect((await lint(file, importOf(pkg))).map((f) => f.ruleId)).toContain(PURE_IMPORTS);
  });

  it('contracts load nothing at run time', async () => {
    expect((await lint(file, "export const later = () => import('zod');\n")).map((f) => f.ruleId)).toEqual([PURE_SYNTAX]);
  });

  it('contracts may import zod and their own files, in a subfolder too', async () => {
    expect(await lint(file, importOf('zod'))).toEqual([]);
    expect(await lint(file, importOf('./ids'))).toEqual([]);
    expect(await lint('libs/contracts/src/sub/fixture.ts', importOf('../ids'))).toEqual([]);
  });

  it('contracts may not reach a built-in at run time either', async () => {
    expect((await lint(file, "export const fs = process.getBuiltinModule('node:fs');\n")).map((f) => f.ruleId)).toEqual([PURE_SYNTAX]);
  });
});

describe('libs/testing is for specs, test-support, e2e, ops tools and bench only', { timeout: 60_000 }, () => {
  const testing = importOf('@labelflow/testing');

  it.each(['apps/task-svc/src/tasks/fixture.ts', 'apps/billing-svc/src/main.ts', 'libs/dedup/src/fixture.ts', 'libs/service-kit/src/fixture.ts'])(
    'the production file %s may not import it',
    async (file) => {
      expect(await lint(file, testing)).toEqual([{ ruleId: BOUNDARIES, message: expect.stringMatching(/^A project tagged with "type:(app|lib)" can only depend on libs tagged with (?!.*type:testing)/) }]);
    },
  );

  it.each([
    'apps/task-svc/src/tasks/fixture.unit.spec.ts',
    'apps/qa-svc/src/reviews/fixture.int.spec.ts',
    'libs/dedup/src/fixture.int.spec.ts',
    'libs/idgen/test-support/fixture.ts',
    'e2e/fixture.e2e.spec.ts',
    'e2e/fixture.ts',
    'tools/chaos/src/fixture.ts',
    'bench/fixture.bench.ts',
  ])('%s may import it', async (file) => {
    expect(await lint(file, testing)).toEqual([]);
  });
});

describe('apps reach Kafka only through @labelflow/messaging', { timeout: 60_000 }, () => {
  const kafkajs = "import { Kafka } from 'kafkajs';\nexport { Kafka };\n";

  it.each(['apps/saga-monitor/src/sagas/fixture.ts', 'apps/qa-svc/src/main.ts'])('the production file %s may not import kafkajs', async (file) => {
    expect(await lint(file, kafkajs)).toEqual([{ ruleId: BOUNDARIES, message: 'A project tagged with "type:app" is not allowed to import "kafkajs"' }]);
  });

  it.each(['apps/qa-svc/src/reviews/fixture.int.spec.ts', 'libs/messaging/src/fixture.ts'])('%s may import it', async (file) => {
    expect(await lint(file, kafkajs)).toEqual([]);
  });

  it.each(['@platformatic/kafka', 'kafkajs/src/index.js', 'prom-client/lib/counter.js', '@opentelemetry/api'])('an app may not reach %s by another client or a deep path either', async (pkg) => {
    expect(await lint('apps/qa-svc/src/reviews/fixture.ts', importOf(pkg))).toEqual([{ ruleId: BOUNDARIES, message: `A project tagged with "type:app" is not allowed to import "${pkg}"` }]);
  });

  it.each([
    ['createRequire', "import { createRequire } from 'node:module';\nexport const kafka = createRequire(import.meta.url)('kafkajs');\n", PURE_NAMES],
    ['the default export of node:module', "import Module from 'node:module';\nexport const kafka = Module.createRequire(import.meta.url)('kafkajs');\n", PURE_NAMES],
    ['process.getBuiltinModule', "export const m = process.getBuiltinModule('node:module');\n", PURE_SYNTAX],
    ['import() of a name', "const name = 'kafka' + 'js';\nexport const later = () => import(name);\n", PURE_SYNTAX],
  ])('an app may not load a package at run time past the import rules: %s', async (_what, code, ruleId) => {
    expect((await lint('apps/qa-svc/src/reviews/fixture.ts', code)).map((f) => f.ruleId)).toEqual([ruleId]);
  });

  it('an app may still import() a literal path, which the import rules see', async () => {
    expect(await lint('apps/qa-svc/src/reviews/fixture.ts', "export const later = () => import('./other');\n")).toEqual([]);
  });
});

describe('decide.ts and state.ts import only contracts and their own capability', { timeout: 60_000 }, () => {
  const files = ['apps/task-svc/src/fixture/decide.ts', 'apps/billing-svc/src/fixture/state.ts'];
  const cases = files.flatMap((file) => [
    { file, what: 'ioredis', code: "import { Redis } from 'ioredis';\nexport { Redis };\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'pg as a type', code: "import type { Pool } from 'pg';\nexport type P = Pool;\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'a Node built-in', code: "import { randomUUID } from 'node:crypto';\nexport { randomUUID };\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'an infrastructure lib', code: "import { createKafka } from '@labelflow/messaging';\nexport { createKafka };\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'telemetry types', code: "import type { Logger } from '@labelflow/telemetry';\nexport type L = Logger;\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'service-kit runtime code', code: "import { execute } from '@labelflow/service-kit';\nexport { execute };\n", ruleIds: [PURE_NAMES, PURE_IMPORTS] },
    { file, what: 'a decider type of service-kit without `import type`', code: "import { Decision } from '@labelflow/service-kit';\nexport type D = Decision<never>;\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'any other service-kit type', code: "import type { Decider } from '@labelflow/service-kit';\nexport type D = Decider<never, never, never>;\n", ruleIds: [PURE_NAMES] },
    { file, what: 'the capability’s repository', code: "import { load } from './repository';\nexport { load };\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'the capability’s routes', code: "import { routes } from './routes';\nexport { routes };\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'another capability', code: "import { evolve } from '../projects/state';\nexport { evolve };\n", ruleIds: [PURE_IMPORTS] },
    { file, what: 'a module at run time', code: "export const later = () => import('ioredis');\n", ruleIds: [PURE_SYNTAX] },
  ]);

  it.each(cases)('$file may not import $what', async ({ file, code, ruleIds }) => {
    const findings = await lint(file, code);
    expect(findings.map((f) => f.ruleId).sort()).toEqual([...ruleIds].sort());
    expect(findings.every((f) => f.message.includes('decide.ts and state.ts are pure'))).toBe(true);
  });

  it.each(files)('%s may import contracts, its own state and the decider types of service-kit', async (file) => {
    const code = [
      "import { TaskStatus, type TaskId } from '@labelflow/contracts';",
      "import type { Decision, EventDraft, Rejection } from '@labelflow/service-kit';",
      "import { evolve } from './policy';",
      'export type Shapes = [TaskId, Decision<EventDraft>, Rejection];',
      'export { TaskStatus, evolve };',
      '',
    ].join('\n');
    expect(await lint(file, code)).toEqual([]);
  });

  it('the same imports stay open to the rest of the capability', async () => {
    expect(await lint('apps/task-svc/src/fixture/execute.ts', "import { execute } from '@labelflow/service-kit';\nimport { load } from './repository';\nexport { execute, load };\n")).toEqual([]);
  });
});
