#!/usr/bin/env bash
# The whole local stack (Kafka + PostgreSQL + Redis) without Docker.
#
# Usage: infra/local/stack.sh <up|down|status|env>
#   up      install + start Kafka (and wait), ensure PostgreSQL and Redis; prints the
#           env lines of "env" on stdout at the end
#   down    stop only what these scripts started (see <repo>/.local/started/)
#   status  state of each component (exit 0 only if all run)
#   env     KEY=value lines only (stdout, machine-readable), e.g. eval "$(stack.sh env)"
#
# Env overrides: KAFKA_PORT, PGHOST, PGPORT, PGUSER, REDIS_HOST, REDIS_PORT
# (plus the knobs of kafka.sh / postgres.sh / redis.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=infra/local/lib.sh
source "$HERE/lib.sh"
LOG_TAG="stack"

KAFKA_PORT="${KAFKA_PORT:-9092}"
PGHOST="${PGHOST:-127.0.0.1}"
PGPORT="${PGPORT:-5432}"
PGUSER="${PGUSER:-postgres}"
REDIS_HOST="${REDIS_HOST:-127.0.0.1}"
REDIS_PORT="${REDIS_PORT:-6379}"
export KAFKA_PORT PGHOST PGPORT PGUSER REDIS_HOST REDIS_PORT

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2
  exit 2
}

cmd_env() {
  echo "KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
  echo "PG_URL=postgres://$PGUSER@$PGHOST:$PGPORT"
  echo "REDIS_URL=redis://$REDIS_HOST:$REDIS_PORT"
}

cmd_up() {
  local t0
  t0="$(date +%s)"
  "$HERE/kafka.sh" install >&2
  "$HERE/kafka.sh" start >&2
  "$HERE/postgres.sh" ensure >&2
  "$HERE/redis.sh" ensure >&2
  log "stack up in $(($(date +%s) - t0))s"
  cmd_env
}

cmd_down() {
  local rc=0
  "$HERE/redis.sh" stop-started >&2 || rc=1
  "$HERE/postgres.sh" stop-started >&2 || rc=1
  "$HERE/kafka.sh" stop-started >&2 || rc=1
  return "$rc"
}

cmd_status() {
  local rc=0
  "$HERE/kafka.sh" status || rc=3
  "$HERE/postgres.sh" status || rc=3
  "$HERE/redis.sh" status || rc=3
  return "$rc"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) usage ;;
esac
