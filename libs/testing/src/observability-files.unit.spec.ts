import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot } from './infra';

// The observability stack of infra/docker-compose.yml is provisioned from infra/observability/:
// nothing checks those files at run time but the containers that read them, and none runs in CI.
// This spec holds them to the compose file (every target, endpoint and mount names a real service
// and file) and to the code (every metric a rule or a panel queries is one the code registers,
// with the labels it groups by).

type Checker = typeof import('../../../infra/local/check-compose.mjs');
const { APP_SERVICES, checkCompose, environmentOf, hostIpOf, parseCompose, targetOf } = (await import(
  pathToFileURL(join(repoRoot, 'infra/local/check-compose.mjs')).href
)) as Checker;

type Service = Record<string, unknown>;
type Compose = { services: Record<string, Service> };
type Json = Record<string, unknown>;

const infraDir = join(repoRoot, 'infra');
const read = (path: string) => readFileSync(join(repoRoot, path), 'utf8');
const compose = (): Compose => parseCompose(read('infra/docker-compose.yml')) as Compose;
const services = compose().services;
const envOf = (name: string) => new Map(environmentOf(services[name]));

/** The repo path behind a container path of a service, through its bind mounts (relative to infra/). */
function repoPathOf(service: string, containerPath: string): string | undefined {
  for (const volume of (services[service]?.volumes as string[] | undefined) ?? []) {
    const [source, target] = String(volume).split(':');
    if (!source?.startsWith('.') || !target) continue;
    if (containerPath === target || containerPath.startsWith(`${target}/`)) {
      return relative(repoRoot, join(infraDir, source, posix.relative(target, containerPath)));
    }
  }
  return undefined;
}
const hostPort = (endpoint: string) => {
  const url = /^[a-z]+:\/\//i.test(endpoint) ? new URL(endpoint) : new URL(`tcp://${endpoint}`);
  return { host: url.hostname, port: url.port };
};

// --- What the code registers ---------------------------------------------------------------

interface Registered {
  readonly kind: 'counter' | 'gauge' | 'histogram' | 'summary';
  /** undefined when the label names are not a literal array (then they are not checked). */
  readonly labels: readonly string[] | undefined;
  readonly file: string;
}

const STRING = String.raw`(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\x60(?:[^\x60\\]|\\.)*\x60)`;
const strings = (text: string) => [...text.matchAll(new RegExp(STRING, 'g'))].map((m) => m[0].slice(1, -1));

/** TypeScript sources of apps/ and libs/ that ship (no specs, no test harness). */
function sources(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (entry === 'node_modules' || entry === 'dist' || entry === 'test-support') continue;
    if (statSync(path).isDirectory()) found.push(...sources(path));
    else if (entry.endsWith('.ts') && !entry.endsWith('.spec.ts') && !entry.endsWith('.d.ts')) found.push(path);
  }
  return found;
}

/**
 * Metric names as the code registers them: `metrics.counter|gauge|histogram('name', 'help',
 * ['label', …])` of libs/telemetry's Metrics, or prom-client's `new Counter({ name: 'name', …,
 * labelNames: [...] })`. A name that is not a literal is not found: keep them literal.
 */
function registeredMetrics(): Map<string, Registered> {
  const found = new Map<string, Registered>();
  const viaMetrics = new RegExp(String.raw`\.(counter|gauge|histogram)\(\s*'([a-zA-Z_:][a-zA-Z0-9_:]*)'\s*,\s*${STRING}\s*(?:,\s*\[([^\]]*)\]|(\)))?`, 'g');
  const viaClient = /new\s+(Counter|Gauge|Histogram|Summary)\s*(?:<[^>]*>)?\s*\(\s*\{([\s\S]*?)\}\s*\)/g;
  const files = [...sources(join(repoRoot, 'apps')), ...sources(join(repoRoot, 'libs'))].filter((f) => !f.includes(`${join('libs', 'testing')}`));
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const rel = relative(repoRoot, file);
    for (const m of text.matchAll(viaMetrics)) {
      found.set(m[2]!, { kind: m[1] as Registered['kind'], labels: m[3] !== undefined ? strings(m[3]) : m[4] ? [] : undefined, file: rel });
    }
    for (const m of text.matchAll(viaClient)) {
      const name = /\bname\s*:\s*'([a-zA-Z_:][a-zA-Z0-9_:]*)'/.exec(m[2]!)?.[1];
      if (!name) continue;
      const labels = /\blabelNames\s*:\s*\[([^\]]*)\]/.exec(m[2]!)?.[1];
      found.set(name, { kind: m[1]!.toLowerCase() as Registered['kind'], labels: labels === undefined ? undefined : strings(labels), file: rel });
    }
    // prom-client's default metrics, where the code turns them on (the ones the alerts read).
    if (/\bcollectDefaultMetrics\(/.test(text)) found.set('process_start_time_seconds', { kind: 'gauge', labels: [], file: rel });
  }
  return found;
}

// --- What a PromQL expression names ----------------------------------------------------------

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'inf', 'nan', 'atan2']);

/**
 * The metric names and label names of a PromQL expression (Grafana's `$variables` allowed). Not a
 * parser: strings, ranges and durations are dropped, labels are read from matchers and from
 * by/without/on/ignoring/group_* lists, and a name not followed by "(" is a metric.
 */
function promqlNames(expr: string): { metrics: string[]; labels: string[] } {
  const labels = new Set<string>();
  let text = expr.replace(new RegExp(STRING, 'g'), '""');
  text = text.replace(/\{([^{}]*)\}/g, (_, inner: string) => {
    for (const m of inner.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)/g)) labels.add(m[1]!);
    return ' ';
  });
  text = text.replace(/\[[^\]]*\]/g, ' ');
  text = text.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)/g, (_, _kw: string, list: string) => {
    for (const label of list.split(',').map((l) => l.trim()).filter(Boolean)) labels.add(label);
    return ' ';
  });
  text = text.replace(/\boffset\s+-?[0-9smhdwy]+/g, ' ').replace(/\$\{?\w+\}?/g, ' ');
  const metrics = new Set<string>();
  for (const m of text.matchAll(/(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?=\s*(\(?))/g)) {
    if (m[2] === '(' || KEYWORDS.has(m[1]!.toLowerCase())) continue;
    metrics.add(m[1]!);
  }
  return { metrics: [...metrics], labels: [...labels] };
}

/** Parentheses, brackets and braces balance, outside strings: the one syntax slip a grep cannot see. */
const balanced = (expr: string) => {
  const stack: string[] = [];
  const pairs: Record<string, string> = { ')': '(', ']': '[', '}': '{' };
  for (const c of expr.replace(new RegExp(STRING, 'g'), '""')) {
    if ('([{'.includes(c)) stack.push(c);
    else if (c in pairs && stack.pop() !== pairs[c]) return false;
  }
  return stack.length === 0;
};

/** Labels Prometheus adds to every series it scrapes, and the one every labelflow registry adds. */
const SCRAPE_LABELS = ['job', 'instance'];
const DEFAULT_LABELS = ['service'];
/** Series Prometheus makes itself, not a service. */
const SYNTHETIC = new Map<string, readonly string[]>([['up', []]]);

/** Problems of one expression: unknown metrics, and labels none of its metrics carries. */
function exprProblems(where: string, expr: string, registered: Map<string, Registered>, extraLabels: readonly string[] = []): string[] {
  const problems: string[] = [];
  if (!balanced(expr)) problems.push(`${where}: unbalanced brackets in ${expr}`);
  const { metrics, labels } = promqlNames(expr);
  if (metrics.length === 0) problems.push(`${where}: names no metric: ${expr}`);
  const known = new Set<string>([...SCRAPE_LABELS, ...extraLabels]);
  let checkLabels = true;
  for (const name of metrics) {
    const synthetic = SYNTHETIC.get(name);
    if (synthetic) {
      synthetic.forEach((l) => known.add(l));
      continue;
    }
    const base = name.replace(/_(bucket|sum|count)$/, '');
    const metric = registered.get(name) ?? (registered.get(base)?.kind === 'histogram' || registered.get(base)?.kind === 'summary' ? registered.get(base) : undefined);
    if (!metric) {
      problems.push(`${where}: ${name} is not registered by any code in apps/ or libs/`);
      checkLabels = false;
      continue;
    }
    if (metric.labels === undefined) checkLabels = false;
    [...(metric.labels ?? []), ...DEFAULT_LABELS].forEach((l) => known.add(l));
    if (name.endsWith('_bucket') && metric.kind === 'histogram') known.add('le');
  }
  if (checkLabels) {
    for (const label of labels) if (!known.has(label)) problems.push(`${where}: label "${label}" is on none of ${metrics.join(', ')}`);
  }
  return problems;
}

// --- The files -------------------------------------------------------------------------------

const collectorConfig = parse(read('infra/observability/otel-collector.yaml')) as Json;
const prometheusConfig = parse(read('infra/observability/prometheus/prometheus.yml')) as Json;
const datasources = (parse(read('infra/observability/grafana/provisioning/datasources/datasources.yaml')) as { datasources: Json[] }).datasources;
const dashboardProviders = (parse(read('infra/observability/grafana/provisioning/dashboards/dashboards.yaml')) as { providers: Json[] }).providers;
const dashboardsDir = 'infra/observability/grafana/dashboards';
const dashboards = readdirSync(join(repoRoot, dashboardsDir))
  .filter((f) => f.endsWith('.json'))
  .map((f) => ({ file: `${dashboardsDir}/${f}`, json: JSON.parse(read(`${dashboardsDir}/${f}`)) as Json }));

/** Every panel, rows' collapsed children included. */
const panelsOf = (dashboard: Json): Json[] =>
  ((dashboard.panels as Json[] | undefined) ?? []).flatMap((p) => [p, ...((p.panels as Json[] | undefined) ?? [])]);

describe('the PromQL name reader', () => {
  it('reads metrics and labels and leaves out functions, keywords, ranges and variables', () => {
    expect(
      promqlNames('histogram_quantile(0.95, sum by (le, service) (rate(http_request_duration_seconds_bucket{service=~"$service",route!="/x"}[$__rate_interval]))) / on (service) group_left up offset 5m'),
    ).toEqual({ metrics: ['http_request_duration_seconds_bucket', 'up'], labels: ['service', 'route', 'le'] });
  });

  it('sees the metric on both sides of a binary operator and inside unless', () => {
    expect(promqlNames('consumer_dead_lettered_total unless consumer_dead_lettered_total offset 5m > 0 or a_total and bool b').metrics).toEqual(['consumer_dead_lettered_total', 'a_total', 'b']);
  });

  it('flags a metric nobody registers, a label its metric lacks, and an unbalanced bracket', () => {
    const registered = new Map<string, Registered>([['consumer_lag_messages', { kind: 'gauge', labels: ['group', 'topic', 'partition'], file: 'x.ts' }]]);
    expect(exprProblems('r', 'max by (group, topik) (consumer_lag_messages)', registered)).toEqual(['r: label "topik" is on none of consumer_lag_messages']);
    expect(exprProblems('r', 'sum(rate(consumer_lagg_messages[5m]))', registered)).toEqual(['r: consumer_lagg_messages is not registered by any code in apps/ or libs/']);
    expect(exprProblems('r', 'max(consumer_lag_messages', registered)).toEqual([expect.stringMatching(/unbalanced/)]);
  });
});

describe('the observability files of the compose stack', () => {
  const registered = registeredMetrics();

  it('finds the metrics the code registers, with their label names', () => {
    expect(registered.get('consumer_lag_messages')).toEqual({ kind: 'gauge', labels: ['group', 'topic', 'partition'], file: join('libs', 'messaging', 'src', 'consumer-metrics.ts') });
    expect(registered.get('dedup_breaker_open')?.labels).toEqual([]);
    expect(registered.get('consumer_processing_seconds')?.kind).toBe('histogram');
  });

  it('runs the collector, Jaeger, Prometheus and Grafana, and sends every app service to the collector and Prometheus', () => {
    for (const name of ['otel-collector', 'jaeger', 'prometheus', 'grafana']) expect(services[name], name).toBeDefined();
    for (const app of APP_SERVICES) {
      const env = envOf(app);
      expect(env.get('METRICS_PORT'), app).toBe('9464');
      // Loopback is the default: Prometheus in another container reaches it only on the compose network's address.
      expect(env.get('METRICS_HOST'), app).toBe('0.0.0.0');
      expect(env.get('OTEL_EXPORTER_OTLP_ENDPOINT'), app).toBe('http://otel-collector:4318');
    }
  });

  it('mounts every observability file it provisions from the repo', () => {
    for (const [name, service] of Object.entries(services)) {
      for (const volume of (service.volumes as string[] | undefined) ?? []) {
        const source = String(volume).split(':')[0]!;
        if (source.startsWith('.')) expect(existsSync(join(infraDir, source)), `${name}: ${volume}`).toBe(true);
      }
    }
  });

  it('scrapes every app service on its METRICS_PORT, and only compose services', () => {
    const jobs = prometheusConfig.scrape_configs as { job_name: string; static_configs: { targets: string[] }[] }[];
    const targets = jobs.flatMap((j) => j.static_configs.flatMap((c) => c.targets));
    for (const target of targets) {
      const { host, port } = hostPort(target);
      expect(services[host], `scrape target ${target} is not a compose service`).toBeDefined();
      expect(port, `scrape target ${target}: not the service's METRICS_PORT`).toBe(envOf(host).get('METRICS_PORT'));
      const published = ((services[host]?.ports as unknown[] | undefined) ?? []).map((p) => targetOf(p));
      expect(published, `${host} publishes its unauthenticated metrics port`).not.toContain(port);
    }
    expect(targets.map((t) => hostPort(t).host).sort()).toEqual([...APP_SERVICES].sort());
  });

  it('loads its rule files from the mounted configuration directory', () => {
    for (const file of prometheusConfig.rule_files as string[]) {
      const repoPath = repoPathOf('prometheus', file);
      expect(repoPath && existsSync(join(repoRoot, repoPath)), `${file} is not a file of the repo mounted into prometheus`).toBe(true);
    }
    const command = (services.prometheus?.command as string[]).join(' ');
    const configFile = /--config\.file=(\S+)/.exec(command)?.[1] ?? '';
    expect(repoPathOf('prometheus', configFile)).toBe(join('infra', 'observability', 'prometheus', 'prometheus.yml'));
  });

  it('alerts on overdue sagas, dead-letter growth, an open dedup breaker, consumer lag, a relay behind and HTTP 5xx, with registered metrics only', () => {
    const problems: string[] = [];
    const rules: Json[] = [];
    for (const file of prometheusConfig.rule_files as string[]) {
      const doc = parse(read(repoPathOf('prometheus', file)!)) as { groups: { name: string; rules: Json[] }[] };
      for (const group of doc.groups) rules.push(...group.rules);
    }
    const names = rules.map((r) => r.alert);
    expect(new Set(names).size, 'alert names are unique').toBe(names.length);
    for (const rule of rules) {
      const where = `alert ${String(rule.alert)}`;
      expect(typeof rule.alert === 'string' && typeof rule.expr === 'string', where).toBe(true);
      expect((rule.labels as Json | undefined)?.severity, `${where}: severity`).toMatch(/^(warning|critical)$/);
      expect((rule.annotations as Json | undefined)?.summary, `${where}: summary`).toEqual(expect.any(String));
      if (rule.for !== undefined) expect(rule.for, `${where}: for`).toMatch(/^\d+[smh]$/);
      const { metrics } = promqlNames(String(rule.expr));
      const labels = Object.values((rule.annotations as Record<string, string>) ?? {}).flatMap((a) => [...a.matchAll(/\$labels\.(\w+)/g)].map((m) => m[1]!));
      problems.push(...exprProblems(where, String(rule.expr), registered));
      // An annotation can only show a label the expression keeps.
      const kept = new Set([...promqlNames(String(rule.expr)).labels, ...SCRAPE_LABELS]);
      for (const label of labels) if (!kept.has(label)) problems.push(`${where}: its annotations show $labels.${label}, which the expression does not keep (${metrics.join(', ')})`);
    }
    expect(problems).toEqual([]);
    const expressions = rules.map((r) => String(r.expr)).join('\n');
    for (const metric of ['saga_alerts_active', 'consumer_dead_lettered_total', 'dedup_breaker_open', 'consumer_lag_messages', 'consumer_caught_up_timestamp_seconds', 'outbox_oldest_pending_seconds', 'outbox_failed_total', 'deadlines_failed_total', 'http_requests_total']) {
      expect(expressions, `an alert on ${metric}`).toContain(metric);
    }
    expect(expressions).toMatch(/increase\(consumer_dead_lettered_total\[5m\]\)/);
    expect(expressions).toMatch(/http_requests_total\{status=~"5\.\."\}/);
  });

  it('receives OTLP on the port the services export to and sends traces on to Jaeger', () => {
    const otlp = ((collectorConfig.receivers as Json).otlp as Json).protocols as Record<string, { endpoint: string }>;
    expect(otlp.http?.endpoint).toBe('0.0.0.0:4318');
    expect(otlp.grpc?.endpoint).toBe('0.0.0.0:4317');
    const { host, port } = hostPort(envOf('task-svc').get('OTEL_EXPORTER_OTLP_ENDPOINT')!);
    expect(host).toBe('otel-collector');
    expect(port).toBe(hostPort(otlp.http!.endpoint).port);
    const command = (services['otel-collector']?.command as string[]).join(' ');
    expect(repoPathOf('otel-collector', /--config=(\S+)/.exec(command)?.[1] ?? '')).toBe(join('infra', 'observability', 'otel-collector.yaml'));

    const service = collectorConfig.service as { extensions?: string[]; pipelines: Record<string, Record<'receivers' | 'processors' | 'exporters', string[] | undefined>> };
    const used = new Set<string>(service.extensions ?? []);
    for (const [pipeline, parts] of Object.entries(service.pipelines)) {
      for (const kind of ['receivers', 'processors', 'exporters'] as const) {
        for (const component of parts[kind] ?? []) {
          expect((collectorConfig[kind] as Json | undefined)?.[component], `pipeline ${pipeline}: ${kind} ${component} is not defined`).toBeDefined();
          used.add(component);
        }
      }
    }
    for (const ext of service.extensions ?? []) expect((collectorConfig.extensions as Json)[ext], `extension ${ext}`).toBeDefined();
    for (const kind of ['receivers', 'processors', 'exporters', 'extensions']) {
      for (const component of Object.keys((collectorConfig[kind] as Json | undefined) ?? {})) expect(used, `${kind} ${component} is defined but unused`).toContain(component);
    }
    expect(service.pipelines.traces?.exporters).toEqual(['otlp/jaeger']);
    const jaeger = hostPort(((collectorConfig.exporters as Json)['otlp/jaeger'] as { endpoint: string }).endpoint);
    expect(jaeger).toEqual({ host: 'jaeger', port: '4317' });
    expect(services[jaeger.host]).toBeDefined();
  });

  it('provisions Grafana datasources that point at compose services, and a dashboard directory that is mounted', () => {
    for (const ds of datasources) {
      const { host } = hostPort(String(ds.url));
      expect(services[host], `datasource ${String(ds.name)}: ${String(ds.url)}`).toBeDefined();
      expect(ds.uid, `datasource ${String(ds.name)} needs a fixed uid`).toEqual(expect.stringMatching(/^[a-z0-9-]+$/));
    }
    for (const provider of dashboardProviders) {
      const path = String((provider.options as Json).path);
      expect(repoPathOf('grafana', path), `dashboards path ${path}`).toBe(join('infra', 'observability', 'grafana', 'dashboards'));
    }
    const home = envOf('grafana').get('GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH');
    if (home) expect(existsSync(join(repoRoot, repoPathOf('grafana', home) ?? '/nonexistent')), `home dashboard ${home}`).toBe(true);
    expect(repoPathOf('grafana', '/etc/grafana/provisioning/datasources/datasources.yaml')).toBe(join('infra', 'observability', 'grafana', 'provisioning', 'datasources', 'datasources.yaml'));
  });

  it('draws every dashboard panel from a provisioned datasource, with registered metrics only', () => {
    const uids = new Map(datasources.map((ds) => [String(ds.uid), String(ds.type)]));
    const problems: string[] = [];
    expect(dashboards.length).toBeGreaterThan(0);
    for (const { file, json } of dashboards) {
      const variables = ((json.templating as { list?: Json[] } | undefined)?.list ?? []).map((v) => String(v.name));
      const checkSource = (where: string, ds: unknown) => {
        if (ds === undefined || ds === null) return;
        const { uid, type } = ds as { uid?: string; type?: string };
        if (!uid || uids.get(uid) !== type) problems.push(`${where}: datasource ${JSON.stringify(ds)} is not a provisioned one (${[...uids].map(([u, t]) => `${t}/${u}`).join(', ')})`);
      };
      for (const variable of (json.templating as { list?: Json[] } | undefined)?.list ?? []) {
        checkSource(`${file} variable ${String(variable.name)}`, variable.datasource);
        const query = typeof variable.query === 'string' ? variable.query : String((variable.query as Json | undefined)?.query ?? '');
        const metric = /label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*(\w+)\s*\)/.exec(query);
        if (metric) problems.push(...exprProblems(`${file} variable ${String(variable.name)}`, `${metric[1]}{${metric[2]}=""}`, registered));
      }
      const ids = new Set<unknown>();
      let queried = 0;
      for (const panel of panelsOf(json)) {
        const where = `${file} panel "${String(panel.title)}"`;
        if (ids.has(panel.id)) problems.push(`${where}: duplicate panel id ${String(panel.id)}`);
        ids.add(panel.id);
        if (panel.type === 'row') continue;
        checkSource(where, panel.datasource);
        const targets = (panel.targets as Json[] | undefined) ?? [];
        if (targets.length === 0) problems.push(`${where}: no query`);
        for (const target of targets) {
          checkSource(`${where} query ${String(target.refId)}`, target.datasource ?? panel.datasource);
          queried += 1;
          problems.push(...exprProblems(`${where} query ${String(target.refId)}`, String(target.expr), registered));
          for (const v of String(target.expr).matchAll(/\$(\w+)/g)) {
            if (!v[1]!.startsWith('__') && !variables.includes(v[1]!)) problems.push(`${where}: $${v[1]} is not a variable of the dashboard`);
          }
        }
      }
      expect(queried, `${file} has queries`).toBeGreaterThan(0);
    }
    expect(problems).toEqual([]);
  });

  it('covers saga throughput and step latency, dedup tiers, dead letters, lag and HTTP rate, errors and latency', () => {
    const exprs = dashboards.flatMap(({ json }) => panelsOf(json).flatMap((p) => ((p.targets as Json[] | undefined) ?? []).map((t) => String(t.expr)))).join('\n');
    for (const metric of ['saga_outcomes_total', 'saga_step_seconds_bucket', 'dedup_duplicates_total', 'dedup_checks_total', 'consumer_dead_lettered_total', 'consumer_lag_messages', 'http_requests_total', 'http_request_duration_seconds_bucket']) {
      expect(exprs, metric).toContain(metric);
    }
  });
});

describe('the compose check of the observability stack', () => {
  it('reads the host address and container port of the short and long port syntax', () => {
    expect(['3001:3001', '127.0.0.1:9090:9090', '[::1]:3000:3000/tcp', '9464', { host_ip: '127.0.0.1', published: 3000, target: 3000 }, { published: 80, target: 8080 }].map((p) => [hostIpOf(p), targetOf(p)])).toEqual([
      [null, '3001'],
      ['127.0.0.1', '9090'],
      ['::1', '3000'],
      [null, '9464'],
      ['127.0.0.1', '3000'],
      [null, '8080'],
    ]);
  });

  it('flags an observability UI forwarded on every interface of the host, even behind its profile', () => {
    const doc = compose();
    doc.services['grafana-port']!.ports = ['3000:3000'];
    expect(checkCompose(doc)).toEqual([expect.stringMatching(/^grafana-port: opt-in port 3000:3000 is published on every interface/)]);
  });

  it('flags a UI published by default instead of through the opt-in forwarder', () => {
    const doc = compose();
    doc.services.jaeger!.ports = ['127.0.0.1:16686:16686'];
    expect(checkCompose(doc)).toEqual([expect.stringMatching(/^jaeger: infrastructure service publishes 127\.0\.0\.1:16686:16686 by default/)]);
  });

  it('flags Grafana without an admin password, and Grafana open to anonymous users', () => {
    const withoutPassword = compose();
    delete (withoutPassword.services.grafana!.environment as Json).GF_SECURITY_ADMIN_PASSWORD;
    expect(checkCompose(withoutPassword)).toEqual([expect.stringMatching(/^grafana: Grafana without GF_SECURITY_ADMIN_PASSWORD/)]);
    const anonymous = compose();
    Object.assign(anonymous.services.grafana!.environment as Json, { GF_AUTH_ANONYMOUS_ENABLED: 'true', GF_AUTH_ANONYMOUS_ORG_ROLE: 'Admin' });
    expect(checkCompose(anonymous)).toEqual([expect.stringMatching(/^grafana: GF_AUTH_ANONYMOUS_ENABLED lets anyone in without a login \(as Admin/)]);
  });

  it('flags an app service that publishes its unauthenticated metrics port', () => {
    const doc = compose();
    (doc.services['saga-monitor']!.ports as string[]).push('9464:9464');
    expect(checkCompose(doc)).toEqual([expect.stringMatching(/^saga-monitor: publishes its METRICS_PORT 9464/)]);
  });

  it('lets the saga monitor publish its own HTTP port like the four services', () => {
    expect(APP_SERVICES).toContain('saga-monitor');
    expect(services['saga-monitor']?.ports).toEqual(['3005:3005']);
    expect(envOf('saga-monitor').get('DATABASE_URL')).toMatch(/@postgres:5432\/saga_monitor$/);
    expect(read('infra/postgres-init/01-databases.sql')).toMatch(/^CREATE DATABASE saga_monitor;$/m);
  });
});
