// Summarises a V8 .cpuprofile (node --cpu-prof): self time by function and by package/library,
// and inclusive time by package (time with at least one frame of it on the stack), optionally only
// inside the timed windows a bench run recorded (profileWindowsUs in bench/results/pipeline-*.json).
//   node --cpu-prof --cpu-prof-dir=/tmp/prof --import tsx bench/pipeline.bench.ts
//   npx tsx bench/profile-summary.ts /tmp/prof/CPU.*.cpuprofile --results bench/results/pipeline-<ts>.json --window pipeline --top 30
// Windows and profile timestamps are both CLOCK_MONOTONIC microseconds on Linux (process.hrtime and
// V8's TimeTicks), so a window cuts the profile to exactly the samples taken while it ran.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    results: { type: 'string' },
    window: { type: 'string', default: 'pipeline' },
    top: { type: 'string', default: '25' },
    json: { type: 'boolean', default: false },
  },
});
const file = positionals[0];
if (!file) {
  console.error('usage: tsx bench/profile-summary.ts <file.cpuprofile> [--results bench/results/pipeline-*.json --window pipeline|raw|relay] [--top 25] [--json]');
  process.exit(2);
}
const TOP = Number(args.top);

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

let windows: [number, number][] = [[profile.startTime, profile.endTime]];
if (args.results) {
  const results = JSON.parse(readFileSync(args.results, 'utf8')) as { profileWindowsUs?: Record<string, [number, number][]> };
  const picked = results.profileWindowsUs?.[args.window ?? 'pipeline'];
  if (!picked || picked.length === 0) throw new Error(`no window "${args.window}" in ${args.results}`);
  const outside = picked.filter(([a, b]) => b < profile.startTime || a > profile.endTime);
  if (outside.length > 0) throw new Error(`${outside.length} window(s) lie outside the profile (${profile.startTime}..${profile.endTime} µs): not the same run, or not the same clock`);
  windows = picked;
}
const inWindow = (t: number) => windows.some(([a, b]) => t >= a && t <= b);

/** Where a frame's code lives: a package, one of the repo's libs/apps, Node's internals, or V8's pseudo-frames. */
function owner(frame: CallFrame): string {
  const { url, functionName } = frame;
  if (!url) {
    if (functionName.startsWith('(')) return functionName; // (garbage collector), (idle), (program), (root)
    return '(native / V8 builtins)';
  }
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[0] === 'internal' ? 'internal' : url.slice(5)}`;
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/');
    const [scope = '', name = ''] = rest;
    return scope.startsWith('@') ? `${scope}/${name}` : scope;
  }
  const repo = /\/(libs|apps|bench|tools)\/([^/]+)\//.exec(url);
  if (repo) return `${repo[1]}/${repo[2]}`;
  return url;
}
const where = (frame: CallFrame) => {
  const path = frame.url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, '~/').replace(/^.*\/(libs|apps|bench|tools)\//, '$1/');
  // tsx (esbuild, whitespace minified) puts a whole module on one line: the column tells functions apart.
  return path ? `${path}:${frame.lineNumber + 1}:${frame.columnNumber + 1}` : '';
};

/** Frames of the repo's own code (libs, apps, bench, tools): their inclusive time says which step of the pipeline costs what. */
const isRepo = (frame: CallFrame) => frame.url !== '' && !frame.url.includes('/node_modules/') && /\/(libs|apps|bench|tools)\//.test(frame.url);

const self = new Map<string, number>();
const inclusiveRepo = new Map<string, number>();
const selfOwner = new Map<string, number>();
const inclusiveOwner = new Map<string, number>();
let total = 0;
let t = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i] ?? 0;
  // A sample stands for the time until the next one.
  const dt = profile.timeDeltas[i + 1] ?? 0;
  if (!inWindow(t)) continue;
  const node = byId.get(profile.samples[i] ?? -1);
  if (!node) continue;
  total += dt;
  const f = node.callFrame;
  const key = `${f.functionName || '(anonymous)'}  ${where(f)}`;
  self.set(key, (self.get(key) ?? 0) + dt);
  const o = owner(f);
  selfOwner.set(o, (selfOwner.get(o) ?? 0) + dt);
  const seen = new Set<string>();
  const seenRepo = new Set<string>();
  for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) break;
    if (frame.functionName === '(root)') continue;
    seen.add(owner(frame));
    if (isRepo(frame)) seenRepo.add(`${frame.functionName || '(anonymous)'}  ${where(frame)}`);
  }
  for (const s of seen) inclusiveOwner.set(s, (inclusiveOwner.get(s) ?? 0) + dt);
  for (const s of seenRepo) inclusiveRepo.set(s, (inclusiveRepo.get(s) ?? 0) + dt);
}

const top = (m: Map<string, number>, n: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n);
const pct = (us: number) => `${((us / Math.max(1, total)) * 100).toFixed(1)}%`;
const ms = (us: number) => `${(us / 1000).toFixed(0)} ms`;

if (args.json) {
  console.log(JSON.stringify({ totalUs: total, windows, selfByFunction: top(self, TOP), selfByOwner: top(selfOwner, TOP), inclusiveByOwner: top(inclusiveOwner, TOP), inclusiveRepoFunctions: top(inclusiveRepo, TOP) }, null, 2));
} else {
  const span = windows.reduce((a, [s, e]) => a + (e - s), 0);
  console.log(`profile ${file}: ${ms(total)} sampled in ${windows.length} window(s) of ${ms(span)} in all${args.results ? ` (${args.window} windows of ${args.results})` : ''}\n`);
  console.log('## Self time by package / library\n\n| owner | self | share |\n|---|---:|---:|');
  for (const [k, v] of top(selfOwner, TOP)) console.log(`| ${k} | ${ms(v)} | ${pct(v)} |`);
  console.log('\n## Inclusive time by package / library (on the stack)\n\n| owner | inclusive | share |\n|---|---:|---:|');
  for (const [k, v] of top(inclusiveOwner, TOP)) console.log(`| ${k} | ${ms(v)} | ${pct(v)} |`);
  console.log(`\n## Top ${TOP} repo functions (libs, apps) by inclusive time\n\n| function  location | inclusive | share |\n|---|---:|---:|`);
  for (const [k, v] of top(inclusiveRepo, TOP)) console.log(`| ${k.replace(/\|/g, '\\|')} | ${ms(v)} | ${pct(v)} |`);
  console.log(`\n## Top ${TOP} functions by self time\n\n| function  location | self | share |\n|---|---:|---:|`);
  for (const [k, v] of top(self, TOP)) console.log(`| ${k.replace(/\|/g, '\\|')} | ${ms(v)} | ${pct(v)} |`);
}
