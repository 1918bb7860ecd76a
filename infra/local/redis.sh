#!/usr/bin/env bash
# Local Redis for development and integration tests, no Docker.
#
# Usage:
#   infra/local/redis.sh ensure
#       Make sure Redis answers PING at $REDIS_HOST:$REDIS_PORT; installs Debian's
#       redis-server if needed and starts one (no persistence) under .local/.
#   infra/local/redis.sh start-instance --port P [--dir D]
#       Start a PRIVATE throwaway redis-server on 127.0.0.1:P (no persistence,
#       daemonized; pidfile and log in D, default <repo>/.local/redis-P).
#   infra/local/redis.sh stop-instance --port P [--dir D] [--mode nosave|kill] [--rm]
#       Stop it: SHUTDOWN NOSAVE (default) or SIGKILL (crash-like). --rm deletes D.
#   infra/local/redis.sh status          State of $REDIS_HOST:$REDIS_PORT.
#   infra/local/redis.sh stop-started    Stop the server only if "ensure" started it.
#
# Env: REDIS_HOST=127.0.0.1 REDIS_PORT=6379 REDIS_WAIT_SECONDS=30 REDIS_MAXMEMORY=512mb
# (a server these scripts start evicts least recently used keys beyond it)
set -euo pipefail

# shellcheck source=infra/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_TAG="redis"

REDIS_HOST="${REDIS_HOST:-127.0.0.1}"
REDIS_PORT="${REDIS_PORT:-6379}"
REDIS_WAIT_SECONDS="${REDIS_WAIT_SECONDS:-30}"
# Every key labelflow writes expires, but a dedup marker lives 7 days: a bound and LRU eviction
# keep the server's memory flat (an evicted key only sends that check to PostgreSQL).
REDIS_MAXMEMORY="${REDIS_MAXMEMORY:-512mb}"
STARTED_NAME="redis-$REDIS_PORT"

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2
  exit 2
}

redis_answers() { # HOST PORT
  local out
  have redis-cli || return 1
  out="$(timeout 3 redis-cli -h "$1" -p "$2" ping 2>/dev/null)" || return 1
  [[ "$out" == "PONG" ]]
}

redis_process_id() { # HOST PORT: the pid of the server answering there
  timeout 3 redis-cli -h "$1" -p "$2" info server 2>/dev/null | awk -F: '/^process_id:/ { gsub(/\r/, "", $2); print $2 }'
}

ensure_binaries() {
  if have redis-server && have redis-cli; then
    return 0
  fi
  apt_install redis-server
  have redis-server || die "redis-server not found after install"
}

instance_pid() {
  local pid
  [[ -f "$INST_DIR/redis.pid" ]] || return 1
  pid="$(cat "$INST_DIR/redis.pid")"
  pid_alive "$pid" && pid_cmdline_has "$pid" ":$INST_PORT" || return 1
  printf '%s\n' "$pid"
}

start_instance() {
  local pid launched
  ensure_binaries
  if pid="$(instance_pid)"; then
    log "private Redis already running on 127.0.0.1:$INST_PORT (pid $pid)"
    return 0
  fi
  if port_open 127.0.0.1 "$INST_PORT"; then
    die "port $INST_PORT is already in use by something else"
  fi
  ensure_local_dir
  mkdir -p "$INST_DIR"
  rm -f "$INST_DIR/redis.pid"
  log "starting private Redis on 127.0.0.1:$INST_PORT ($INST_DIR)"
  # In the background rather than --daemonize, so that its pid is known at once: a server that
  # cannot bind (another process took the port after the check above) is seen exiting, instead
  # of waiting out the timeout while some other server answers on the port. setsid and the
  # redirections detach it from this script's terminal and pipes (a caller waits for those).
  setsid redis-server --daemonize no --bind 127.0.0.1 --port "$INST_PORT" \
    --save "" --appendonly no --dir "$INST_DIR" \
    --maxmemory "$REDIS_MAXMEMORY" --maxmemory-policy volatile-lru \
    --pidfile "$INST_DIR/redis.pid" --logfile "$INST_DIR/redis.log" \
    --protected-mode yes --databases 16 </dev/null >>"$INST_DIR/redis.log" 2>&1 &
  launched=$!
  # Ready only once the server answering on the port is the one just started: otherwise a test
  # would flush or stop a server it does not own.
  local deadline=$((SECONDS + REDIS_WAIT_SECONDS))
  while ((SECONDS < deadline)); do
    if [[ "$(redis_process_id 127.0.0.1 "$INST_PORT")" == "$launched" ]]; then
      log "private Redis ready: redis://127.0.0.1:$INST_PORT"
      return 0
    fi
    if ! pid_alive "$launched"; then
      tail -n 30 "$INST_DIR/redis.log" >&2 || true
      die "private Redis on $INST_PORT exited at start (is the port taken by another server?)"
    fi
    sleep 0.1
  done
  tail -n 30 "$INST_DIR/redis.log" >&2 || true
  die "Redis on $INST_PORT did not answer within ${REDIS_WAIT_SECONDS}s"
}

stop_instance() {
  local pid i
  if pid="$(instance_pid)"; then
    log "stopping private Redis on port $INST_PORT (pid $pid, mode $INST_MODE)"
    if [[ "$INST_MODE" == "kill" ]]; then
      kill -KILL "$pid" 2>/dev/null || true
    else
      redis-cli -h 127.0.0.1 -p "$INST_PORT" shutdown nosave >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    fi
    for ((i = 0; i < 100; i++)); do
      pid_alive "$pid" || break
      sleep 0.1
    done
    pid_alive "$pid" && die "Redis pid $pid did not stop"
    rm -f "$INST_DIR/redis.pid"
  else
    log "private Redis on port $INST_PORT ($INST_DIR) not running"
  fi
  remove_instance_dir
}

cmd_ensure() {
  # The probe is redis-cli: a server that runs without it here (in a container, say) is still used.
  if ! have redis-cli && port_open "$REDIS_HOST" "$REDIS_PORT"; then apt_install redis-tools; fi
  if redis_answers "$REDIS_HOST" "$REDIS_PORT"; then
    log "ok: Redis answers at $REDIS_HOST:$REDIS_PORT"
    if [[ "$(timeout 3 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" info memory 2>/dev/null | tr -d '\r' | sed -n 's/^maxmemory://p')" == "0" ]]; then
      log "note: this Redis has no maxmemory; labelflow's keys expire, but at high rates set one with an LRU policy (see libs/dedup/README.md)"
    fi
    return 0
  fi
  if port_open "$REDIS_HOST" "$REDIS_PORT"; then
    die "something listens on $REDIS_HOST:$REDIS_PORT but does not answer PING"
  fi
  is_local_host "$REDIS_HOST" || die "no Redis at $REDIS_HOST:$REDIS_PORT (not a local host, not starting one)"
  ensure_binaries
  # Debian's package starts its own server on 6379 as it installs: that one is used.
  if redis_answers "$REDIS_HOST" "$REDIS_PORT"; then
    log "ok: Redis answers at $REDIS_HOST:$REDIS_PORT (the packaged server; set maxmemory with an LRU policy there for high rates)"
    return 0
  fi
  INST_PORT="$REDIS_PORT"
  INST_DIR="$LOCAL_DIR/redis-$REDIS_PORT"
  # Marked before it starts: a start cut short (Ctrl-C, a time-out while the server still comes
  # up) must leave a server that `stop-started` and `stack.sh down` know to be theirs.
  mark_started "$STARTED_NAME" "kind=instance port=$REDIS_PORT dir=$INST_DIR"
  start_instance
  log "ok: Redis answers at $REDIS_HOST:$REDIS_PORT"
}

cmd_stop_started() {
  if ! is_marked_started "$STARTED_NAME"; then
    log "Redis on port $REDIS_PORT was not started by these scripts; leaving it alone"
    return 0
  fi
  INST_PORT="$REDIS_PORT"
  INST_MODE="nosave"
  INST_DIR="$(sed -n 's/.* dir=\(.*\)$/\1/p' "$STARTED_DIR/$STARTED_NAME")" # last field: may hold spaces
  INST_DIR="${INST_DIR:-$LOCAL_DIR/redis-$REDIS_PORT}"
  stop_instance
  unmark_started "$STARTED_NAME"
}

cmd_status() {
  local how="external"
  is_marked_started "$STARTED_NAME" && how="started-by-scripts"
  if redis_answers "$REDIS_HOST" "$REDIS_PORT"; then
    echo "redis: running $REDIS_HOST:$REDIS_PORT ($how)"
    return 0
  fi
  echo "redis: stopped $REDIS_HOST:$REDIS_PORT"
  return 3
}

instance_cli redis nosave "nosave|kill" "$@"
