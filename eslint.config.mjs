import nx from '@nx/eslint-plugin';
import tseslint from 'typescript-eslint';

const infra = ['kafkajs', 'pg', 'ioredis', 'fastify', 'pino', 'prom-client', '@opentelemetry/*', 'testcontainers', '@testcontainers/*'];

const boundaries = (extraForLibs) => [
  'error',
  {
    enforceBuildableLibDependency: false,
    allow: [],
    depConstraints: [
      // Contracts are pure schemas: no infrastructure, no other project.
      { sourceTag: 'type:contracts', onlyDependOnLibsWithTags: ['type:contracts', ...extraForLibs], bannedExternalImports: infra },
      { sourceTag: 'type:lib', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', ...extraForLibs] },
      { sourceTag: 'type:testing', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib'] },
      // Services see each other only through contracts; telemetry stays at the edges (libs).
      {
        sourceTag: 'type:app',
        onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', 'type:testing'],
        bannedExternalImports: ['@opentelemetry/*', 'prom-client'],
      },
      // The auditor reads every service's database by design: it is an operations tool, not a service.
      { sourceTag: 'type:tool', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', 'type:tool', ...extraForLibs] },
      { sourceTag: 'type:e2e', onlyDependOnLibsWithTags: ['type:contracts', 'type:lib', 'type:testing', 'type:tool'] },
    ],
  },
];


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
      'no-restricted-syntax': ['error', { selector: 'TSEnumDeclaration', message: 'Use an `as const` object instead of an enum.' }],
      '@nx/enforce-module-boundaries': boundaries([]),
    },
  },
  // Specs may use the testing lib (real infrastructure helpers); production code may not.
  {
    files: ['**/*.spec.ts'],
    rules: { '@nx/enforce-module-boundaries': boundaries(['type:testing']), '@typescript-eslint/no-non-null-assertion': 'off' },
  },
];
