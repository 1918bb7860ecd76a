#!/usr/bin/env bash
# Validates infra/docker-compose.yml without a Docker engine ("config -q").
# Uses "docker compose" (v2 plugin) or "docker-compose"; installs Debian's
# docker-compose package when neither works.
#
# Usage: infra/local/validate-compose.sh [compose-file]
set -euo pipefail

# shellcheck source=infra/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_TAG="compose"

FILE="${1:-$REPO_ROOT/infra/docker-compose.yml}"
[[ -f "$FILE" ]] || die "no such file: $FILE"

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

log "using: ${compose[*]} ($("${compose[@]}" version --short 2>/dev/null || echo '?'))"
"${compose[@]}" -f "$FILE" config -q
log "ok: $FILE is valid"
# Summary of services and published ports (to stderr).
"${compose[@]}" -f "$FILE" config --services 2>/dev/null | sed 's/^/  service: /' >&2 || true
