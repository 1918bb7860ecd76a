// Prints one closing line over all tiers: "tests: N passed, N failed" (plus skipped, and the test
// files that failed without a failed test), and exits non-zero when any test or file failed, or
// when no test ran at all.
import { existsSync, readFileSync } from 'node:fs';

let passed = 0;
let failed = 0;
let skipped = 0;
// A file whose beforeAll threw, or that did not load, fails with its tests counted as skipped, not
// failed: counted by files, or the closing line would read "0 failed" over a failed run.
let failedFiles = 0;
for (const file of process.argv.slice(2)) {
  if (!existsSync(file)) continue;
  const report = JSON.parse(readFileSync(file, 'utf8'));
  const files = (report.testResults ?? []).filter((r) => r.status === 'failed' && !(r.assertionResults ?? []).some((a) => a.status === 'failed'));
  for (const r of files) console.log(`${file}: ${r.name} failed outside its tests (a hook, or loading it: see its output above)${r.message ? `: ${r.message.split('\n')[0]}` : ''}`);
  passed += report.numPassedTests ?? 0;
  failed += report.numFailedTests ?? 0;
  failedFiles += files.length;
  skipped += (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
  console.log(`${file}: ${report.numPassedTests} passed, ${report.numFailedTests} failed${files.length ? `, ${files.length} files failed outside their tests` : ''}`);
}
const extras = [skipped ? `${skipped} skipped` : '', failedFiles ? `${failedFiles} test files failed outside their tests` : ''].filter(Boolean);
console.log(`tests: ${passed} passed, ${failed} failed${extras.map((e) => `, ${e}`).join('')}`);
process.exit(failed > 0 || failedFiles > 0 || passed === 0 ? 1 : 0);
