import nx from '@nx/eslint-plugin';
import tseslint from 'typescript-eslint';

// Each package and its deep paths (`pg/lib/client.js`): a subpath reaches the same infrastructure.
const withSubpaths = (pkgs) => pkgs.flatMap((p) => [p, `${p}/**`]);
const infra = withSubpaths(['kafkajs', 'pg', 'ioredis', 'fastify', 'pino', 'prom-client', '@opentelemetry/*', '@platformatic/*', '@redis/*', 'testcontainers', '@testcontainers/*']);

// The layers, bottom up. A project may import only layers below its own; the infrastructure libs
// share one layer so that none of them can lean on another (what two of them need belongs in
// plumbing). docs/architecture.md "Module boundaries" draws the same map.
const layers = ['layer:0-contracts', 'layer:1-telemetry', 'layer:2-plumbing', 'layer:3-infra', 'layer:4-service-kit', 'layer:5-app'];
const below = (layer) => layers.slice(0, layers.indexOf(layer));
const services = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc', 'saga-monitor'];

/**
 * Test code (specs, test-support) may also import libs/testing, and an infrastructure lib's
 * integration test may wire a sibling in (the outbox relay against a real Kafka publisher); the
 * production graph stays layered.
 */
const boundaries = ({ testCode }) => {
  const testing = testCode ? ['type:testing'] : [];
  const layer = (tag, extra = []) => ({ sourceTag: tag, onlyDependOnLibsWithTags: [...below(tag), ...extra, ...testing] });
  return [
    'error',
    {
      enforceBuildableLibDependency: false,
      allow: [],
      // libs/testing stands above every layer (its in-process service harness builds on
      // service-kit) and the specs of lower libs use it. Nx draws one graph for production and test
      // imports, so those test-time loops read as cycles; the layer tags keep production acyclic.
      ignoredCircularDependencies: [['tag:type:testing', 'tag:type:lib'], ['tag:type:testing', 'tag:type:contracts']],
      depConstraints: [
        // Scope: a service's own code and shared libs, nothing of another service or of the ops tools.
        ...services.map((svc) => ({ sourceTag: `scope:${svc}`, onlyDependOnLibsWithTags: ['scope:shared', `scope:${svc}`] })),
        { sourceTag: 'scope:shared', onlyDependOnLibsWithTags: ['scope:shared'] },
        { sourceTag: 'scope:ops', onlyDependOnLibsWithTags: ['scope:shared', 'scope:ops'] },
        // Kind: contracts are pure schemas; libs/testing only reaches production code through specs.
        { sourceTag: 'type:contracts', onlyDependOnLibsWithTags: ['type:contracts', ...testing], bannedExternalImports: infra },
        { sourceTag: 'type:lib', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', ...testing] },
        { sourceTag: 'type:testing', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib'] },
        // Services see each other only through contracts; telemetry stays at the edges (libs), and
        // Kafka is reached through @labelflow/messaging (its consumer shell, retries, dead letters).
        {
          sourceTag: 'type:app',
          onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', ...testing],
          bannedExternalImports: withSubpaths(['@opentelemetry/*', 'prom-client', ...(testCode ? [] : ['kafkajs', '@platformatic/*'])]),
        },
        // The auditor reads every service's database by design: it is an operations tool, not a service.
        { sourceTag: 'type:tool', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', 'type:tool', ...testing] },
        { sourceTag: 'type:e2e', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', 'type:testing', 'type:tool'] },
        ...layers.map((tag) => (tag === 'layer:3-infra' && testCode ? layer(tag, [tag]) : layer(tag))),
      ],
    },
  ];
};

const noEnums = { selector: 'TSEnumDeclaration', message: 'Use an `as const` object instead of an enum.' };
const contractsMessage = 'libs/contracts holds pure schemas: it imports zod and its own files, nothing else (no infrastructure, no Node built-ins, nothing loaded at run time).';
// A module loaded at run time by a name the linter cannot read reaches any package past the import
// rules above: `createRequire` (node:module, by any import of it), `process.getBuiltinModule`, and
// `import()` of anything but a literal.
const runTimeMessage = 'A module loaded at run time gets past the import boundaries: import the package, or reach it through the lib that owns it.';
const noRunTimeModules = ['node:module', 'module'].map((name) => ({ name, message: runTimeMessage }));
const runTimeLoads = [
  { selector: "ImportExpression[source.type!='Literal']", message: runTimeMessage },
  { selector: "MemberExpression[object.name='process'][property.name='getBuiltinModule']", message: runTimeMessage },
];
const pureMessage = 'decide.ts and state.ts are pure: they import only @labelflow/contracts and files of their own capability (never its shell: repository, routes, reactions, execute, sweepers).';
const deciderTypes = ['Decision', 'EventDraft', 'Rejection'];

export default [
  { ignores: ['**/node_modules/**', '**/dist/**', '.local/**', '.nx/**', 'coverage/**'] },
  ...nx.configs['flat/base'],
  ...nx.configs['flat/typescript'],
  {
    files: ['**/*.ts'],
    languageOptions: { parser: tseslint.parser },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-restricted-syntax': ['error', noEnums],
      '@nx/enforce-module-boundaries': boundaries({ testCode: false }),
    },
  },
  // Contracts: an allow-list, not a ban list, so a package nobody thought of is refused too.
  {
    files: ['libs/contracts/src/**/*.ts'],
    ignores: ['**/*.spec.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': ['error', { patterns: [{ regex: '^(?!zod$|zod/|\\.\\.?/)', message: contractsMessage }] }],
      'no-restricted-syntax': ['error', noEnums, { selector: 'ImportExpression', message: contractsMessage }, { selector: "MemberExpression[object.name='process'][property.name='getBuiltinModule']", message: contractsMessage }],
    },
  },
  { files: ['apps/**/*.ts'], ignores: ['**/*.spec.ts'], rules: { 'no-restricted-imports': ['error', { paths: noRunTimeModules }], 'no-restricted-syntax': ['error', noEnums, ...runTimeLoads] } },
  // Specs and the scripts they spawn may use the testing lib (real infrastructure helpers); production code may not.
  {
    files: ['**/*.spec.ts', '**/test-support/**/*.ts'],
    rules: { '@nx/enforce-module-boundaries': boundaries({ testCode: true }), '@typescript-eslint/no-non-null-assertion': 'off' },
  },
  // Deciders stay replayable and unit-testable without infrastructure. The three decider types of
  // service-kit are the one exception, type-only: they erase at compile time.
  {
    files: ['apps/**/decide.ts', 'apps/**/state.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: [{ name: '@labelflow/service-kit', allowImportNames: deciderTypes, message: `${pureMessage} From service-kit only the types ${deciderTypes.join(', ')}.` }] }],
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^(?!@labelflow/contracts$|@labelflow/service-kit$|\\./)', message: pureMessage },
            { regex: '^\\./(repository|routes|reactions|execute|index|sweepers?)(\\.ts)?$', message: pureMessage },
            { regex: '^@labelflow/service-kit$', allowTypeImports: true, message: `${pureMessage} From service-kit only \`import type\` of ${deciderTypes.join(', ')}.` },
          ],
        },
      ],
      'no-restricted-syntax': ['error', noEnums, { selector: 'ImportExpression', message: pureMessage }],
    },
  },
];
