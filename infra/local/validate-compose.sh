#!/usr/bin/env bash
# Validates infra/docker-compose.yml without a Docker engine:
#   1. "config -q" with dummy values for the required secrets (so that only the file is judged,
#      not whether infra/.env exists), and "config -q" for the opt-in profile infra-ports;
#   2. the security check infra/local/check-compose.mjs on the file as written (every problem
#      listed at once);
#   3. that "config" refuses to run when a required secret is missing (no silent empty password);
#   4. the security check again on the resolved "config" output (anchors, merges and profiles as
#      compose itself sees them).
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
SECRETS=(POSTGRES_PASSWORD POSTGRES_APP_PASSWORD REDIS_PASSWORD KAFKA_SASL_PASSWORD AUTH_PUBLIC_KEYS)
dummy_env=(
  POSTGRES_PASSWORD=dummy-postgres-password
  POSTGRES_APP_PASSWORD=dummy-app-password
  REDIS_PASSWORD=dummy-redis-password
  KAFKA_SASL_PASSWORD=dummy-kafka-password
  'AUTH_PUBLIC_KEYS={"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}'
)
# An empty env file: an infra/.env next to the compose file must not hide a missing variable.
empty_env="$(mktemp)"
trap 'rm -f "$empty_env"' EXIT

log "using: ${compose[*]} ($("${compose[@]}" version --short 2>/dev/null || echo '?'))"
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" config -q
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" --profile infra-ports config -q
log "ok: $FILE is valid (default services and profile infra-ports)"

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

# The file as compose resolves it (with the opt-in profile, so the forwarders are judged too).
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" --profile infra-ports config | node "$CHECK" -
log "ok: $FILE passes the security check"

# Summary of services (to stderr).
env "${dummy_env[@]}" "${compose[@]}" --env-file "$empty_env" -f "$FILE" --profile infra-ports config --services 2>/dev/null | sed 's/^/  service: /' >&2 || true
