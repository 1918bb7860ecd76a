// Bundles each service (and the saga monitor) into dist/apps/<svc>/main.js. Path aliases (@labelflow/*) are resolved from
// tsconfig; npm packages stay external and load from node_modules at run time.
import { build } from 'esbuild';

const all = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc', 'saga-monitor'];
const wanted = process.argv.slice(2);
const services = wanted.length > 0 ? wanted : all;
for (const svc of services) {
  if (!all.includes(svc)) {
    console.error(`unknown service ${svc}; expected one of ${all.join(', ')}`);
    process.exit(2);
  }
}
const started = Date.now();
await Promise.all(
  services.map((svc) =>
    build({
      entryPoints: [`apps/${svc}/src/main.ts`],
      outfile: `dist/apps/${svc}/main.js`,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      packages: 'external',
      sourcemap: true,
      tsconfig: 'tsconfig.base.json',
      logLevel: 'warning',
    }),
  ),
);
console.error(`built ${services.join(', ')} in ${Date.now() - started} ms`);
