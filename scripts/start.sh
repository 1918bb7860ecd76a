#!/usr/bin/env bash
# Starts the whole local stack: installs what is missing, starts Kafka, PostgreSQL and Redis, builds
# and starts the four services, prints their URLs. Ctrl-C stops what this run started.
set -euo pipefail
cd "$(dirname "$0")/.."
export NX_DAEMON=false

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== installing npm packages" >&2
  npm ci --no-audit --no-fund
fi

# Only what this run starts is stopped at exit: a Kafka, PostgreSQL or Redis that already answered
# (the machine's own, or one a test run left) is left alone.
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
infra_was_up=false
if tcp_open 127.0.0.1 "${KAFKA_PORT:-9092}" && tcp_open "${PGHOST:-127.0.0.1}" "${PGPORT:-5432}" && tcp_open "${REDIS_HOST:-127.0.0.1}" "${REDIS_PORT:-6379}"; then
  infra_was_up=true
fi
echo "== infrastructure" >&2
bash infra/local/stack.sh up >/dev/null
eval "$(bash infra/local/stack.sh env | sed 's/^/export /')"

echo "== building services" >&2
node scripts/build.mjs

mkdir -p .local/logs
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo >&2
  echo "== stopping services" >&2
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  if [ "$infra_was_up" = false ]; then
    echo "== stopping the infrastructure this run started" >&2
    bash infra/local/stack.sh down || true
  fi
}
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

declare -A ports=([task-svc]=3001 [label-svc]=3002 [qa-svc]=3003 [billing-svc]=3004)
for svc in task-svc label-svc qa-svc billing-svc; do
  db="${svc//-/_}"
  PORT="${ports[$svc]}" DATABASE_URL="$PG_URL/$db" KAFKA_TOPIC_PREFIX="${KAFKA_TOPIC_PREFIX:-labelflow}" \
    node --enable-source-maps "dist/apps/$svc/main.js" >".local/logs/$svc.log" 2>&1 &
  pids+=($!)
  # Sequential starts: the first one creates the shared topics.
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:${ports[$svc]}/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then echo "$svc failed to start; see .local/logs/$svc.log:" >&2; tail -20 ".local/logs/$svc.log" >&2; exit 1; fi
    sleep 0.5
  done
done

cat <<INFO

labelflow is running (logs in .local/logs/):
  task-svc     http://127.0.0.1:3001   POST /tasks, POST /tasks/:id/claim, POST /tasks/:id/cancel (admin), GET /tasks[/:id]
  label-svc    http://127.0.0.1:3002   POST /tasks/:id/labels, GET /tasks/:id/labels
  qa-svc       http://127.0.0.1:3003   POST /reviews/:taskId, GET /reviews[/:taskId]
  billing-svc  http://127.0.0.1:3004   POST /projects, POST /projects/:id/top-ups, GET /projects/:id,
                                        POST /tasks/:id/billing/retry (admin), GET /tasks/:id/billing, GET /annotators/:id/payouts
  each also serves /healthz, /readyz and /metrics; the full reference is docs/http-api.md
  Kafka $KAFKA_BROKERS   PostgreSQL $PG_URL   Redis $REDIS_URL

Drive it:  npm run produce -- --tasks 200 --reject 0.2 --cancel 0.05 --duplicates 0.3
Audit it:  npm run audit
Press Ctrl-C to stop.
INFO
wait -n "${pids[@]}" || true
echo "a service exited; stopping the rest" >&2
