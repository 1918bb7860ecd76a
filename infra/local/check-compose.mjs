#!/usr/bin/env node
// Security check of a compose file, without a Docker engine.
//
// Usage: node infra/local/check-compose.mjs [file|-]   (default infra/docker-compose.yml; "-" = stdin,
//        e.g. the output of "docker-compose config"). Exit 0 when clean, 1 listing every problem.
//
// Works on the file as written (YAML anchors and merge keys resolved, "${VAR...}" interpolations
// judged by their form) and on "config" output (values already interpolated). Problems found:
//   * an infrastructure service (anything but the app services) publishing a port, or using the
//     host's network, without being in a non-default profile; and an opt-in (profiled) port that is
//     not bound to the host's loopback. So the observability UIs (Jaeger, Prometheus, Grafana) reach
//     the host only as the forwarders of profile "observability" publish them: on 127.0.0.1
//   * an app service publishing its METRICS_PORT (/metrics without a token, for Prometheus only)
//   * Grafana without a required admin password, or with anonymous access
//   * trust auth: POSTGRES_HOST_AUTH_METHOD=trust, "trust" in initdb args or pg_hba settings,
//     *ALLOW_EMPTY_PASSWORD*, a Redis without --aclfile/--requirepass, an ACL user with nopass
//   * a password variable that is empty or may be empty (e.g. "${PW}" instead of "${PW:?...}")
//   * a URL (postgres, redis, amqp, mongodb, mysql) without credentials, with a user but no
//     password, or with a password that may be empty
//   * Kafka with a PLAINTEXT listener other services can reach (not bound to loopback), the
//     image's default PLAINTEXT listener, or an app service connecting without SASL
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/** The four services and the saga monitor: the only ones allowed to publish ports by default. */
export const APP_SERVICES = Object.freeze(['task-svc', 'label-svc', 'qa-svc', 'billing-svc', 'saga-monitor']);

const PASSWORD_KEY = /(^|_)(PASSWORD|PASSWD|PASS|SECRET)$/i;
const CREDENTIAL_URL_SCHEMES = new Set(['postgres', 'postgresql', 'redis', 'rediss', 'amqp', 'amqps', 'mongodb', 'mongodb+srv', 'mysql', 'mariadb']);
const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[?::1\]?)$/i;

/** Parses compose YAML with anchors and `<<` merge keys resolved, as compose does. */
export function parseCompose(text) {
  const doc = parse(text, { merge: true, maxAliasCount: -1 });
  if (doc === null || typeof doc !== 'object') throw new Error('compose file is not a YAML mapping');
  return doc;
}

/**
 * The parts of a compose value: literal text and `${VAR...}` / `$VAR` interpolations.
 * `$$` is a literal dollar. `op` is one of '', ':-', '-', ':?', '?', ':+', '+'.
 */
export function interpolations(value) {
  const parts = [];
  const re = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])((?:[^{}]|\{[^{}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g;
  let last = 0;
  for (let m = re.exec(value); m !== null; m = re.exec(value)) {
    if (m.index > last) parts.push({ literal: value.slice(last, m.index) });
    if (m[0] === '$$') parts.push({ literal: '$' });
    else parts.push({ name: m[1] ?? m[4], op: m[2] ?? '', arg: m[3] ?? '' });
    last = re.lastIndex;
  }
  if (last < value.length) parts.push({ literal: value.slice(last) });
  return parts;
}

/** True when one interpolation can end up empty (only `${VAR:?msg}` and `${VAR:-non-empty}` cannot). */
const partMayBeEmpty = (p) => {
  if ('literal' in p) return p.literal === '';
  if (p.op === ':?') return false;
  if (p.op === ':-') return p.arg === '' || interpolations(p.arg).every(partMayBeEmpty);
  return true;
};

/** True when a (possibly interpolated) value can be empty after interpolation. */
export function mayBeEmpty(value) {
  if (value === null || value === undefined) return true;
  const parts = interpolations(String(value));
  return parts.length === 0 || parts.every(partMayBeEmpty);
}

/** `environment` as [key, value] pairs, from the map or the list form (`KEY=value`, or `KEY` = from the shell). */
export function environmentOf(service) {
  const env = service?.environment;
  if (!env) return [];
  if (Array.isArray(env)) {
    return env.map((entry) => {
      const s = String(entry);
      const eq = s.indexOf('=');
      return eq === -1 ? [s, null] : [s.slice(0, eq), s.slice(eq + 1)];
    });
  }
  return Object.entries(env).map(([k, v]) => [k, v === null || v === undefined ? null : String(v)]);
}

const textOf = (v) => (v === undefined || v === null ? '' : Array.isArray(v) ? v.map(String).join(' ') : String(v));
const commandText = (service) => `${textOf(service.entrypoint)} ${textOf(service.command)}`;
const inProfile = (service) => Array.isArray(service.profiles) && service.profiles.length > 0;
const describePort = (p) => {
  if (p !== null && typeof p === 'object') {
    const host = p.host_ip ? `${p.host_ip}:` : '';
    return `${host}${p.published ?? '(random)'}->${p.target}${p.protocol ? `/${p.protocol}` : ''}`;
  }
  return String(p);
};

/**
 * Credentials in a URL value. Interpolations are replaced by placeholders first, so that their
 * text (`${PW:?run x: first}`) never confuses the URL syntax. Returns null for other values.
 */
export function urlCredentials(value) {
  const parts = interpolations(String(value));
  const tokens = [];
  const flat = parts.map((p) => ('literal' in p ? p.literal : `\u0000${tokens.push(p) - 1}\u0000`)).join('');
  const m = /^([a-z][a-z0-9+.-]*):\/\/(?:([^@/?#]*)@)?([^/?#]*)/i.exec(flat.trim());
  if (!m || !CREDENTIAL_URL_SCHEMES.has(m[1].toLowerCase())) return null;
  if (m[2] === undefined) return { scheme: m[1], user: null, password: null, passwordMayBeEmpty: true };
  const colon = m[2].indexOf(':');
  const user = colon === -1 ? m[2] : m[2].slice(0, colon);
  if (colon === -1) return { scheme: m[1], user, password: null, passwordMayBeEmpty: true };
  const password = m[2].slice(colon + 1);
  const pwParts = password.split('\u0000').map((s, i) => (i % 2 === 1 ? tokens[Number(s)] : { literal: s }));
  return { scheme: m[1], user, password, passwordMayBeEmpty: pwParts.every(partMayBeEmpty) };
}

/**
 * The host address of a published port: the short syntax ("[ip:]published:target[/proto]", or a
 * bare container port, published on every address) or the long one "config" prints. Null means
 * every interface of the host.
 */
export function hostIpOf(port) {
  if (port !== null && typeof port === 'object') return port.host_ip ? String(port.host_ip) : null;
  const text = String(port).replace(/\/(tcp|udp|sctp)$/i, '');
  const v6 = /^\[([^\]]+)\]:/.exec(text);
  if (v6) return v6[1];
  const parts = text.split(':');
  return parts.length === 3 ? parts[0] : null;
}

/** The container port of a published port (short or long syntax), as a string ("3001", "3000-3005"). */
export function targetOf(port) {
  if (port !== null && typeof port === 'object') return String(port.target);
  const text = String(port).replace(/\/(tcp|udp|sctp)$/i, '');
  return text.slice(text.lastIndexOf(':') + 1);
}

const TRUE = /^(yes|true|1|on|y)$/i;
const isGrafana = (service) => /(^|\/)grafana(-oss|-enterprise)?(:|$)/i.test(String(service.image ?? ''));

/** Grafana's own login: a required admin password (or a file with it), no anonymous access. */
function grafanaProblems(name, env) {
  const problems = [];
  if (!env.has('GF_SECURITY_ADMIN_PASSWORD') && !env.has('GF_SECURITY_ADMIN_PASSWORD__FILE')) {
    problems.push(`${name}: Grafana without GF_SECURITY_ADMIN_PASSWORD keeps its default admin/admin login; require it with \${GRAFANA_ADMIN_PASSWORD:?...}`);
  }
  if (TRUE.test(String(env.get('GF_AUTH_ANONYMOUS_ENABLED') ?? '').trim())) {
    const role = env.get('GF_AUTH_ANONYMOUS_ORG_ROLE') ?? 'Viewer';
    problems.push(`${name}: GF_AUTH_ANONYMOUS_ENABLED lets anyone in without a login (as ${role}; a Viewer can still query every datasource)`);
  }
  if (TRUE.test(String(env.get('GF_AUTH_DISABLE_LOGIN_FORM') ?? '').trim()) && !TRUE.test(String(env.get('GF_AUTH_GENERIC_OAUTH_ENABLED') ?? '').trim())) {
    problems.push(`${name}: GF_AUTH_DISABLE_LOGIN_FORM without another login method`);
  }
  return problems;
}

const isKafka = (name, service) => /(^|\/)(kafka|cp-kafka|cp-server)(:|$)/i.test(String(service.image ?? '')) || (!service.image && /^kafka$/i.test(name));
const isRedis = (name, service) => /(^|\/)(redis|valkey|redis-stack-server)(:|$)/i.test(String(service.image ?? '')) || (!service.image && /^redis$/i.test(name));

/** Problems of a Kafka broker service: which listeners speak PLAINTEXT to more than the container itself. */
function kafkaProblems(name, service, env) {
  const cmd = commandText(service);
  if (/start-sasl\.sh/.test(cmd)) {
    // infra/kafka/start-sasl.sh: every client listener is SASL_PLAINTEXT/SCRAM, the controller is on loopback.
    return env.has('KAFKA_SASL_PASSWORD') ? [] : [`${name}: start-sasl.sh needs KAFKA_SASL_PASSWORD in its environment`];
  }
  const get = (key) => env.get(key) ?? env.get(key.replace(/^KAFKA_/, 'KAFKA_CFG_'));
  const listeners = get('KAFKA_LISTENERS');
  if (!listeners) return [`${name}: no SASL listener configured (the image's default listener is PLAINTEXT on every interface)`];
  const map = new Map(
    String(get('KAFKA_LISTENER_SECURITY_PROTOCOL_MAP') ?? '')
      .split(',')
      .map((e) => e.trim().split(':'))
      .filter((e) => e.length === 2)
      .map(([k, v]) => [k.toUpperCase(), v.toUpperCase()]),
  );
  const problems = [];
  for (const listener of String(listeners).split(',').map((l) => l.trim()).filter(Boolean)) {
    const m = /^([A-Za-z0-9_]+):\/\/(\[[^\]]*\]|[^:]*):(\d+)$/.exec(listener);
    if (!m) continue;
    const protocol = map.get(m[1].toUpperCase()) ?? m[1].toUpperCase();
    if (protocol === 'PLAINTEXT' && !LOOPBACK.test(m[2])) {
      problems.push(`${name}: listener ${listener} is PLAINTEXT (no authentication) and reachable from other containers; use SASL_PLAINTEXT/SASL_SSL or bind it to 127.0.0.1`);
    }
  }
  return problems;
}

/** Every security problem of a parsed compose document; an empty list means it passes. */
export function checkCompose(doc, { appServices = APP_SERVICES } = {}) {
  const problems = [];
  const services = doc?.services;
  if (!services || typeof services !== 'object') return ['compose file has no services'];
  const apps = new Set(appServices);
  for (const [name, raw] of Object.entries(services)) {
    const service = raw ?? {};
    const envPairs = environmentOf(service);
    const env = new Map(envPairs);
    const cmd = commandText(service);
    const isApp = apps.has(name);

    const ports = Array.isArray(service.ports) ? service.ports : [];
    if (!isApp && inProfile(service)) {
      const open = ports.filter((p) => !LOOPBACK.test(hostIpOf(p) ?? ''));
      if (open.length > 0) {
        problems.push(`${name}: opt-in port ${open.map(describePort).join(', ')} is published on every interface of the host; bind it to 127.0.0.1 ("127.0.0.1:${targetOf(open[0])}:${targetOf(open[0])}")`);
      }
    }
    if (!isApp && !inProfile(service)) {
      if (ports.length > 0) {
        problems.push(`${name}: infrastructure service publishes ${ports.map(describePort).join(', ')} by default; move the port behind a non-default profile (e.g. profiles: ["infra-ports"])`);
      }
      if (String(service.network_mode ?? '') === 'host') problems.push(`${name}: infrastructure service uses the host's network by default (every port it opens is published)`);
    }

    for (const [key, value] of envPairs) {
      const v = value ?? '';
      if (/ALLOW_EMPTY_PASSWORD/i.test(key) && /^(yes|true|1|on|y)$/i.test(v.trim())) problems.push(`${name}: ${key}=${v} allows an empty password`);
      if (key === 'POSTGRES_HOST_AUTH_METHOD' && /^trust$/i.test(v.trim())) problems.push(`${name}: POSTGRES_HOST_AUTH_METHOD=trust accepts every connection without a password`);
      if (/INITDB_ARGS/i.test(key) && /(--auth(-host|-local)?=|-A\s*)trust\b/i.test(v)) problems.push(`${name}: ${key} sets trust authentication (${v})`);
      if (/HBA/i.test(key) && /\btrust\b/i.test(v)) problems.push(`${name}: ${key} contains a trust pg_hba rule`);
      if (PASSWORD_KEY.test(key)) {
        if (value === null) problems.push(`${name}: ${key} is taken from the shell unchecked and may be empty; use ${key}: \${${key}:?...}`);
        else if (mayBeEmpty(value)) problems.push(`${name}: ${key} is empty or may be empty ("${v}"); require it with \${VAR:?message}`);
      }
      const creds = value === null ? null : urlCredentials(value);
      if (creds) {
        if (creds.user === null) problems.push(`${name}: ${key} (${creds.scheme}://) carries no credentials`);
        else if (creds.password === null) problems.push(`${name}: ${key} has user "${creds.user}" without a password`);
        else if (creds.passwordMayBeEmpty) problems.push(`${name}: ${key} has user "${creds.user}" with an empty (or possibly empty) password`);
      }
    }

    if (/pg_hba/i.test(cmd) && /\btrust\b/i.test(cmd)) problems.push(`${name}: its command writes a trust pg_hba rule`);
    if (/\bnopass\b/i.test(cmd)) problems.push(`${name}: a Redis ACL user with nopass accepts any password`);
    if (/--requirepass\s+(""|''|$)/.test(cmd)) problems.push(`${name}: --requirepass is empty`);
    if (isRedis(name, service)) {
      const bitnamiPassword = env.has('REDIS_PASSWORD') && /bitnami/i.test(String(service.image ?? ''));
      if (!/--aclfile\b|--requirepass\b/.test(cmd) && !bitnamiPassword) problems.push(`${name}: Redis runs without --aclfile or --requirepass (the default user needs no password)`);
      if (/--aclfile\b/.test(cmd) && /user\s+default\s+on\b/i.test(cmd) && !/user\s+default\s+on\b[^\n]*>/i.test(cmd)) {
        problems.push(`${name}: the Redis default user is on without a password`);
      }
    }
    if (isKafka(name, service)) problems.push(...kafkaProblems(name, service, env));
    if (isGrafana(service)) problems.push(...grafanaProblems(name, env));
    const metricsPort = env.get('METRICS_PORT');
    if (isApp && metricsPort && ports.some((p) => targetOf(p) === String(metricsPort).trim())) {
      problems.push(`${name}: publishes its METRICS_PORT ${metricsPort}, where /metrics needs no token; leave it to the compose network (Prometheus scrapes it there)`);
    }
    if (isApp && env.has('KAFKA_BROKERS') && !env.get('KAFKA_SASL_MECHANISM')) problems.push(`${name}: connects to Kafka without SASL (no KAFKA_SASL_MECHANISM/USERNAME/PASSWORD)`);
  }
  return problems;
}

/** checkCompose of YAML text. */
export const checkComposeText = (text, options) => checkCompose(parseCompose(text), options);

const isMain = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1];
if (isMain) {
  const arg = process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'docker-compose.yml');
  const label = arg === '-' ? '(stdin)' : arg;
  let problems;
  try {
    problems = checkComposeText(readFileSync(arg === '-' ? 0 : arg, 'utf8'));
  } catch (error) {
    console.error(`check-compose: cannot check ${label}: ${error.message}`);
    process.exit(2);
  }
  if (problems.length > 0) {
    console.error(`check-compose: ${label}: ${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
    process.exit(1);
  }
  console.error(`check-compose: ${label}: ok (no infrastructure port published by default, opt-in ports on loopback only, no trust auth, no empty password, Kafka SASL only, Grafana behind its login)`);
}
