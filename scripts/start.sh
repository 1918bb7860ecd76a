#!/usr/bin/env bash
# Starts the whole local stack: installs what is missing, starts Kafka, PostgreSQL and Redis, builds
# and starts the four services and the saga monitor, prints their URLs, and keeps them running: a service that exits is
# started again with backoff (below), the others untouched. Ctrl-C stops what this run started.
#
# Env overrides, to run a second stack beside the default one (tests do):
#   LABELFLOW_PORT_BASE   first HTTP port (default 3001): task-svc, label-svc, qa-svc, billing-svc
#                         listen on it and the next three, saga-monitor on the one after (3005)
#   LABELFLOW_DB_SUFFIX   appended to each database name (default none: task_svc, label_svc, ...)
#   LABELFLOW_LOG_DIR     where the services' logs go (default .local/logs)
#   LABELFLOW_KEEP_INFRA  1: leave Kafka, PostgreSQL and Redis running at exit, even if this run
#                         started them
#   KAFKA_TOPIC_PREFIX    topics and consumer groups (default labelflow)
#   LABELFLOW_CPU_PROF_DIR  each service writes a V8 CPU profile (.cpuprofile) there when it stops
# plus those of infra/local/stack.sh (KAFKA_PORT, PGHOST, PGPORT, PGUSER, REDIS_HOST, REDIS_PORT).
set -euo pipefail
cd "$(dirname "$0")/.."
export NX_DAEMON=false
bash scripts/check-node.sh >/dev/null

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== installing npm packages" >&2
  npm ci --no-audit --no-fund --include=dev
fi

# Only what this run starts is stopped at exit, each part on its own: a Kafka, PostgreSQL or Redis
# that already answered (the machine's own, one a test run left, one `stack.sh up` started) is
# left alone.
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
declare -A infra_was_up=([kafka]=false [postgres]=false [redis]=false)
if tcp_open 127.0.0.1 "${KAFKA_PORT:-9092}"; then infra_was_up[kafka]=true; fi
if tcp_open "${PGHOST:-127.0.0.1}" "${PGPORT:-5432}"; then infra_was_up[postgres]=true; fi
if tcp_open "${REDIS_HOST:-127.0.0.1}" "${REDIS_PORT:-6379}"; then infra_was_up[redis]=true; fi

# HOST reaches the services (they listen there), but this script looks for them on 127.0.0.1:
# some shells and containers export HOST=<the machine's name>, which resolves elsewhere.
case "${HOST:-0.0.0.0}" in
  0.0.0.0 | 127.0.0.1 | localhost | :: | ::1) ;;
  *) echo "== note: HOST=$HOST is set in your environment: the services listen on it, and this script, which checks them on 127.0.0.1, may find them not ready; unset HOST to listen on every interface" >&2 ;;
esac

SERVICES=(task-svc label-svc qa-svc billing-svc saga-monitor)
declare -A pid=() since=() delay=() restarts=() timer=()

cleanup() {
  trap - INT TERM EXIT
  echo >&2
  echo "== stopping services" >&2
  local svc part live=()
  for svc in "${SERVICES[@]}"; do
    if [ -n "${timer[$svc]:-}" ]; then kill "${timer[$svc]}" 2>/dev/null || true; fi
    if [ -n "${pid[$svc]:-}" ]; then live+=("${pid[$svc]}"); fi
  done
  if [ "${#live[@]}" -gt 0 ]; then
    for p in "${live[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    # A service ends its own shutdown within 15 s (SHUTDOWN_TIMEOUT_MS); one stuck past that would
    # keep this script from stopping Kafka, PostgreSQL and Redis below.
    local deadline=$((SECONDS + 20))
    for p in "${live[@]}"; do
      while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
      if kill -0 "$p" 2>/dev/null; then
        echo "== pid $p did not stop within 20 s; killing it" >&2
        kill -KILL "$p" 2>/dev/null || true
      fi
    done
    wait "${live[@]}" 2>/dev/null || true
  fi
  echo "== services stopped" >&2
  if [ "${LABELFLOW_KEEP_INFRA:-0}" = 1 ]; then return; fi
  for part in redis postgres kafka; do
    if [ "${infra_was_up[$part]}" = false ]; then
      echo "== stopping $part, which this run started" >&2
      bash "infra/local/$part.sh" stop-started || true
    fi
  done
}
# From here on: a Ctrl-C during the build, or a failed step, still stops what this run started.
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

echo "== infrastructure" >&2
bash infra/local/stack.sh up >/dev/null
eval "$(bash infra/local/stack.sh env | sed 's/^/export /')"

echo "== building services" >&2
node scripts/build.mjs

# The services verify bearer tokens against the local development key (created on first use in
# .local/auth, or LABELFLOW_SIGNING_KEY_FILE); `npm run token` signs with the same key, and the
# services trust it only in a development environment (NODE_ENV, development unless set).
# Settings already in the environment (a real identity provider's) win.
if [ -z "${AUTH_PUBLIC_KEYS:-}${AUTH_PUBLIC_KEYS_FILE:-}${AUTH_JWKS_URL:-}" ]; then
  echo "== development identity ($(node -e 'console.log(process.env.LABELFLOW_SIGNING_KEY_FILE || ".local/auth/dev-signing-key.json")'))" >&2
  AUTH_PUBLIC_KEYS="$(npx --no-install tsx tools/token/src/jwks.ts)"
  export AUTH_PUBLIC_KEYS AUTH_ISSUER="${AUTH_ISSUER:-labelflow-dev}" AUTH_AUDIENCE="${AUTH_AUDIENCE:-labelflow}" NODE_ENV="${NODE_ENV:-development}"
fi

PORT_BASE="${LABELFLOW_PORT_BASE:-3001}"
DB_SUFFIX="${LABELFLOW_DB_SUFFIX:-}"
SVC_LOG_DIR="${LABELFLOW_LOG_DIR:-.local/logs}"
mkdir -p "$SVC_LOG_DIR"
# The monitor comes last (SERVICES, above): it only reads what the services publish.
declare -A ports=([task-svc]=$PORT_BASE [label-svc]=$((PORT_BASE + 1)) [qa-svc]=$((PORT_BASE + 2)) [billing-svc]=$((PORT_BASE + 3)) [saga-monitor]=$((PORT_BASE + 4)))
# Supervision, like compose's `restart: unless-stopped`: a service that exits while this script runs
# is started again after RESTART_MIN_S, doubling with each exit up to RESTART_MAX_S; one that stayed
# up RESTART_RESET_S seconds starts over at RESTART_MIN_S. Only Ctrl-C (SIGINT, SIGTERM) stops them.
RESTART_MIN_S=1
RESTART_MAX_S=30
RESTART_RESET_S=60

# LABELFLOW_CPU_PROF_DIR: each service writes a V8 CPU profile there when it stops (as with tests and benches).
profile=()
if [ -n "${LABELFLOW_CPU_PROF_DIR:-}" ]; then profile=(--cpu-prof "--cpu-prof-dir=$LABELFLOW_CPU_PROF_DIR"); fi

# Settings that name one process, not the stack: passed on as they are, five services would bind
# one metrics port (the second fails to start) and report one trace name. METRICS_PORT becomes
# the first of five, in the order of the ports above; OTEL_SERVICE_NAME is left to each service.
declare -A metrics_ports=()
if [ -n "${METRICS_PORT:-}" ]; then
  if ! [[ $METRICS_PORT =~ ^[0-9]{1,5}$ ]] || [ "$METRICS_PORT" -lt 1 ] || [ "$METRICS_PORT" -gt $((65535 - ${#SERVICES[@]} + 1)) ]; then
    echo "METRICS_PORT=$METRICS_PORT: expected a port number, the first of ${#SERVICES[@]} (one per service)" >&2
    exit 1
  fi
  i=0
  for svc in "${SERVICES[@]}"; do metrics_ports[$svc]=$((METRICS_PORT + i)); i=$((i + 1)); done
  for svc in "${SERVICES[@]}"; do
    for other in "${SERVICES[@]}"; do
      if [ "${metrics_ports[$svc]}" = "${ports[$other]}" ]; then
        echo "METRICS_PORT=$METRICS_PORT: its ports ${metrics_ports[${SERVICES[0]}]}-${metrics_ports[${SERVICES[-1]}]} overlap the services' ports $PORT_BASE-$((PORT_BASE + ${#SERVICES[@]} - 1)); pick another" >&2
        exit 1
      fi
    done
  done
  echo "METRICS_PORT=$METRICS_PORT: each service serves its scrape port on its own, $(for svc in "${SERVICES[@]}"; do printf '%s %s, ' "$svc" "${metrics_ports[$svc]}"; done | sed 's/, $//')"
fi
if [ -n "${OTEL_SERVICE_NAME:-}" ]; then
  echo "OTEL_SERVICE_NAME=$OTEL_SERVICE_NAME is ignored here: each service reports traces under its own name (OTEL_RESOURCE_ATTRIBUTES still applies to all)" >&2
  unset OTEL_SERVICE_NAME
fi

# Starts (or restarts, appending to its log) one service in the background; its pid in pid[svc].
launch() {
  local svc=$1 db="${1//-/_}$DB_SUFFIX"
  if [ -z "${restarts[$svc]:-}" ]; then : >"$SVC_LOG_DIR/$svc.log"; fi
  local own=()
  if [ -n "${metrics_ports[$svc]:-}" ]; then own=("METRICS_PORT=${metrics_ports[$svc]}"); fi
  # env execs node: $! stays the service's own pid.
  PORT="${ports[$svc]}" DATABASE_URL="$PG_URL/$db" KAFKA_TOPIC_PREFIX="${KAFKA_TOPIC_PREFIX:-labelflow}" \
    env "${own[@]}" node --enable-source-maps "${profile[@]}" "dist/apps/$svc/main.js" >>"$SVC_LOG_DIR/$svc.log" 2>&1 &
  pid[$svc]=$!
  since[$svc]=$SECONDS
}

# A service exited on its own: say how, show the end of its log, and schedule its restart.
exited() {
  local svc=$1 gone=$2 rc=$3 up=$((SECONDS - since[$1])) how="code $3"
  if [ "$rc" -gt 128 ]; then how="code $rc (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo "$((rc - 128))"))"; fi
  pid[$svc]=""
  if [ "$up" -ge "$RESTART_RESET_S" ] || [ -z "${delay[$svc]:-}" ]; then delay[$svc]=$RESTART_MIN_S; fi
  restarts[$svc]=$((${restarts[$svc]:-0} + 1))
  echo "== $svc (pid $gone) exited unexpectedly with $how after ${up}s; the last lines of its log ($SVC_LOG_DIR/$svc.log):" >&2
  tail -n 15 "$SVC_LOG_DIR/$svc.log" | sed 's/^/   | /' >&2
  echo "== restarting $svc in ${delay[$svc]}s (restart ${restarts[$svc]}); the others keep running" >&2
  sleep "${delay[$svc]}" &
  timer[$svc]=$!
  delay[$svc]=$((delay[$svc] * 2 > RESTART_MAX_S ? RESTART_MAX_S : delay[$svc] * 2))
}


# A port already taken (a stack started in another terminal, services a killed run left behind)
# would answer /readyz for the service while the one started here could not listen.
for svc in "${SERVICES[@]}"; do
  if tcp_open 127.0.0.1 "${ports[$svc]}"; then
    echo "port ${ports[$svc]} ($svc) is already in use: is another labelflow stack running? Stop it, or set LABELFLOW_PORT_BASE" >&2
    exit 1
  fi
  if [ -n "${metrics_ports[$svc]:-}" ] && tcp_open 127.0.0.1 "${metrics_ports[$svc]}"; then
    echo "port ${metrics_ports[$svc]} ($svc's metrics, from METRICS_PORT) is already in use: pick another METRICS_PORT" >&2
    exit 1
  fi
done

# 200 from a local /readyz, with bash alone: curl is not on every minimal machine.
ready_on() {
  local status
  # Bounded: a port that accepts and never answers must not hold the start.
  status=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 && head -c 12 <&3' _ "$1" 2>/dev/null) || return 1
  [ "${status#HTTP/1.? }" != "$status" ] && [ "${status: -3}" = "200" ]
}

for svc in "${SERVICES[@]}"; do
  launch "$svc"
  # Sequential starts: the first one creates the shared topics. A service that cannot even start
  # (a bad setting) stops the run: restarting it would not help.
  ready=false
  for _ in $(seq 1 120); do
    if ready_on "${ports[$svc]}"; then ready=true; break; fi
    if ! kill -0 "${pid[$svc]}" 2>/dev/null; then echo "$svc failed to start; see $SVC_LOG_DIR/$svc.log:" >&2; tail -20 "$SVC_LOG_DIR/$svc.log" >&2; exit 1; fi
    sleep 0.5
  done
  echo "== $svc started (pid ${pid[$svc]}), http://127.0.0.1:${ports[$svc]}" >&2
  if [ "$ready" = false ]; then echo "   not ready after 120 tries: http://127.0.0.1:${ports[$svc]}/readyz says why" >&2; fi
done

cat <<INFO

labelflow is running (logs in $SVC_LOG_DIR/):
  task-svc     http://127.0.0.1:${ports[task-svc]}   POST /tasks, POST /tasks/:id/claim, POST /tasks/:id/cancel (owner, manager, admin), GET /tasks[/:id]
  label-svc    http://127.0.0.1:${ports[label-svc]}   POST /tasks/:id/labels, GET /tasks/:id/labels
  qa-svc       http://127.0.0.1:${ports[qa-svc]}   POST /reviews/:taskId, GET /reviews[/:taskId]
  billing-svc  http://127.0.0.1:${ports[billing-svc]}   POST /projects, POST /projects/:id/top-ups, GET /projects/:id,
                                        POST /tasks/:id/billing/retry (owner, manager, admin), GET /tasks/:id/billing, GET /annotators/:id/payouts
  saga-monitor http://127.0.0.1:${ports[saga-monitor]}   the saga timeline page: http://127.0.0.1:${ports[saga-monitor]}/ui (paste a token from
                                        npm run token -- --user you --role admin); GET /sagas?search=, /sagas/:taskId, /sagas/alerts
  each also serves /healthz, /readyz and /metrics; the full reference is docs/http-api.md
  Kafka $KAFKA_BROKERS   PostgreSQL $PG_URL   Redis $REDIS_URL

Drive it:  npm run produce -- --tasks 200 --reject 0.2 --cancel 0.05 --duplicates 0.3
Audit it:  npm run audit
Press Ctrl-C to stop.
INFO

# Supervise until Ctrl-C: wake whenever a service or a restart timer ends. (`wait` also reports a
# killed job on stderr, which the message below says better.)
while true; do
  wait -n 2>/dev/null || true
  for svc in "${SERVICES[@]}"; do
    if [ -n "${pid[$svc]}" ] && ! kill -0 "${pid[$svc]}" 2>/dev/null; then
      rc=0
      wait "${pid[$svc]}" 2>/dev/null || rc=$?
      exited "$svc" "${pid[$svc]}" "$rc"
    elif [ -n "${timer[$svc]:-}" ] && ! kill -0 "${timer[$svc]}" 2>/dev/null; then
      wait "${timer[$svc]}" 2>/dev/null || true
      timer[$svc]=""
      launch "$svc"
      echo "== $svc restarted (pid ${pid[$svc]}), http://127.0.0.1:${ports[$svc]}" >&2
    fi
  done
done
