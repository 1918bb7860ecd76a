#!/usr/bin/env bash
# Validates infra/docker-compose.yml without a Docker engine:
#   1. "config -q" with dummy values for the required secrets (so that only the file is judged,
#      not whether infra/.env exists), and "config -q" for the opt-in profiles infra-ports and
#      observability;
#   2. the security check infra/local/check-compose.mjs on the file as written (every problem
#      listed at once);
#   3. that "config" refuses to run when a required secret is missing (no silent empty password);
#   4. the security check again on the resolved "config" output (anchors, merges and profiles as
#      compose itself sees them);
#   5. that every file the compose file mounts from the repo exists (the observability stack is
#      provisioned from infra/observability/; how those files fit the compose file and the code is
#      checked by libs/testing/src/observability-files.unit.spec.ts);
#   6. with Prometheus' own promtool: the Prometheus configuration and alert rules, the alert
#      rules' unit tests (infra/observability/prometheus/alerts.test.yml), and the PromQL of every
#      Grafana dashboard panel. promtool comes from Debian's prometheus package, unpacked into
#      .local/promtool (never installed: no daemon), unless one is on the PATH.
# Uses "docker compose" (v2 plugin) or "docker-compose"; installs Debian's docker-compose
# package when neither works.
#
# Usage: infra/local/validate-compose.sh [compose-file]
set -euo pipefail

# shellcheck source=infra/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_TAG="compose"

FILE="${1:-$REPO_ROOT/infra/docker-compose.yml}"
[[ -f "$FILE" ]] || die "no such file: $FILE"
CHECK="$REPO_ROOT/infra/local/check-compose.mjs"

compose=()
if have docker && docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif have docker-compose && docker-compose version >/dev/null 2>&1; then
  compose=(docker-compose)
else
  apt_install docker-compose
  have docker-compose || die "docker-compose not found after install"
  compose=(docker-compose)
fi
have node || die "node not found (needed for $CHECK)"

# The secrets the file requires (${VAR:?...}); dummy values, never used for anything.
SECRETS=(POSTGRES_PASSWORD POSTGRES_APP_PASSWORD REDIS_PASSWORD KAFKA_SASL_PASSWORD KAFKA_PRELABEL_PASSWORD GRAFANA_ADMIN_PASSWORD AUTH_PUBLIC_KEYS)
dummy_env=(
  POSTGRES_PASSWORD=dummy-postgres-password
  POSTGRES_APP_PASSWORD=dummy-app-password
  REDIS_PASSWORD=dummy-redis-password
  KAFKA_SASL_PASSWORD=dummy-kafka-password
  KAFKA_PRELABEL_PASSWORD=dummy-prelabel-password
  GRAFANA_ADMIN_PASSWORD=dummy-grafana-password
  'AUTH_PUBLIC_KEYS={"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}'
)
# An empty env file: an infra/.env next to the compose file must not hide a missing variable.
empty_env="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -rf "$empty_env" "$work"' EXIT

log "using: ${compose[*]} ($("${compose[@]}" version --short 2>/dev/null || echo '?'))"
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" config -q
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" --profile infra-ports config -q
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" --profile observability config -q
log "ok: $FILE is valid (default services, profiles infra-ports and observability)"

# The file as written: lists every problem at once.
node "$CHECK" "$FILE"

# Every required secret, when missing, must stop compose (not become an empty password).
for var in "${SECRETS[@]}"; do
  without=()
  for kv in "${dummy_env[@]}"; do
    [[ "$kv" == "$var="* ]] || without+=("$kv")
  done
  if out="$(env -u "$var" "${without[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" config -q 2>&1)"; then
    die "compose accepts the file without $var: it must be required (\${$var:?...})"
  fi
  grep -q "$var\|compose:env" <<<"$out" || die "compose failed without $var, but not because of it: $out"
done
log "ok: compose refuses to run without any of ${SECRETS[*]}"

# The file as compose resolves it (with the opt-in profiles, so the forwarders are judged too).
profiles=(--profile infra-ports --profile observability)
resolved="$(env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" "${profiles[@]}" config)"
node "$CHECK" - <<<"$resolved"
log "ok: $FILE passes the security check"

# Bind mounts: every host path compose resolved (absolute, in the "source: /..." lines of the long
# syntax or "/host:/container[:mode]" of the short one) must exist; a typo would otherwise start a
# container on an empty directory compose creates.
missing=0
while IFS= read -r src; do
  [[ -e "$src" ]] || { printf '  missing mount source: %s\n' "$src" >&2; missing=1; }
done < <(sed -nE -e 's/^[[:space:]]*source: (\/[^[:space:]]+)[[:space:]]*$/\1/p' -e 's/^[[:space:]]*- (\/[^:[:space:]]+):\/.*$/\1/p' <<<"$resolved")
((missing == 0)) || die "$FILE mounts files that do not exist"
log "ok: every file $FILE mounts exists"


# promtool: the one on the PATH, else Debian's, taken out of the package without installing it.
promtool_bin() {
  if have promtool; then
    command -v promtool
    return
  fi
  local bin="$LOCAL_DIR/promtool/promtool"
  if [[ ! -x "$bin" ]]; then
    have apt-get && have dpkg-deb || die "promtool not found, and no apt-get/dpkg-deb to take it from Debian's prometheus package"
    local -a sudo_cmd=()
    [[ "$(id -u)" -eq 0 ]] || sudo_cmd=(sudo)
    log "fetching promtool (Debian package prometheus, unpacked into $LOCAL_DIR/promtool)"
    # apt downloads as its own user when it can write the directory.
    chmod 755 "$work" && mkdir -p "$work/deb" && chmod 777 "$work/deb"
    if ! (cd "$work/deb" && apt-get "${APT_OPTS[@]}" download -qq prometheus >&2); then
      [[ ${#sudo_cmd[@]} -eq 0 ]] || have sudo || die "promtool not found, and the package lists need 'apt-get update' as root: run it, or put promtool on the PATH"
      "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update -qq >&2
      (cd "$work/deb" && apt-get "${APT_OPTS[@]}" download -qq prometheus >&2) || die "apt-get download prometheus failed"
    fi
    ensure_local_dir
    mkdir -p "$LOCAL_DIR/promtool"
    dpkg-deb --fsys-tarfile "$work"/deb/prometheus_*.deb | tar -x -O ./usr/bin/promtool >"$bin.tmp"
    chmod 755 "$bin.tmp"
    mv "$bin.tmp" "$bin"
  fi
  printf '%s\n' "$bin"
}
PROMTOOL="$(promtool_bin)"
PROM_DIR="$REPO_ROOT/infra/observability/prometheus"
DASHBOARDS="$REPO_ROOT/infra/observability/grafana/dashboards"

# The configuration names its rule files by their path in the container: check a copy that names
# them where they are.
mkdir -p "$work/prometheus"
cp "$PROM_DIR"/*.yml "$work/prometheus/"
sed -i "s#/etc/prometheus/#$work/prometheus/#g" "$work/prometheus/prometheus.yml"
"$PROMTOOL" check config "$work/prometheus/prometheus.yml" >&2
(cd "$PROM_DIR" && "$PROMTOOL" test rules alerts.test.yml) >&2
log "ok: prometheus.yml, alerts.yml and their tests pass promtool ($("$PROMTOOL" --version 2>&1 | head -n1))"

# Each panel query as a recording rule, Grafana's variables replaced by values, for promtool's parser.
node - "$DASHBOARDS" >"$work/dashboards.rules.yml" <<'NODE'
const { readdirSync, readFileSync } = require('node:fs');
const { join } = require('node:path');
const dir = process.argv[2];
const lines = ['groups:', '  - name: dashboard-queries', '    rules:'];
let n = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
  const dashboard = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  const panels = (dashboard.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]);
  for (const panel of panels) {
    for (const target of panel.targets ?? []) {
      if (!target.expr) continue;
      const expr = target.expr
        .replace(/\$__(rate_interval|interval)\b/g, '1m')
        .replace(/\$__range\b/g, '1h')
        .replace(/\$\{?\w+\}?/g, '.*');
      lines.push(`      - record: dashboard:${file.replace(/\W/g, '_')}:${++n}`, `        expr: ${JSON.stringify(expr)}`);
    }
  }
}
if (n === 0) throw new Error(`no panel queries in ${dir}`);
console.log(lines.join('\n'));
NODE
"$PROMTOOL" check rules "$work/dashboards.rules.yml" >&2
log "ok: every Grafana panel query parses as PromQL"

# Summary of services (to stderr).
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" "${profiles[@]}" config --services 2>/dev/null | sed 's/^/  service: /' >&2 || true
