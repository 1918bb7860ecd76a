#!/usr/bin/env bash
# Runs every check and test against real Kafka, PostgreSQL and Redis, installing and starting what
# is missing. This is the README's test command (`npm test`) and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { printf '\n\033[1m== %s (%ss)\033[0m\n' "$1" "$(( $(date +%s) - started ))"; }

step "npm packages"
# The locked packages need Node 20.19.4 or newer (@platformatic/kafka, vite): say so before npm
# warns about engines and something fails further on for no clear reason.
bash scripts/check-node.sh
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --include=dev
else
  echo "node_modules up to date"
fi

step "infrastructure: Kafka (KRaft, from Maven Central), PostgreSQL, Redis"
given="${KAFKA_BROKERS:-}|${PG_URL:-}|${REDIS_URL:-}"
bash infra/local/stack.sh up
eval "$(bash infra/local/stack.sh env | sed 's/^/export /')"
echo "KAFKA_BROKERS=$KAFKA_BROKERS PG_URL=$PG_URL REDIS_URL=$REDIS_URL"
# Servers of one's own (CI service containers, say) are not what this runs against: say so, rather
# than let the run look as if it used them.
if [ "$given" != "||" ] && [ "$given" != "$KAFKA_BROKERS|$PG_URL|$REDIS_URL" ]; then
  echo "note: the KAFKA_BROKERS, PG_URL and REDIS_URL set in your environment are replaced by the local stack's above; to test against servers of your own, run the vitest tiers with them set (README, Tests)"
fi

step "lint"
npm run lint

step "typecheck"
npx tsc -p tsconfig.json --noEmit

step "build"
node scripts/build.mjs

step "compose file"
bash infra/local/validate-compose.sh

step "browser for the timeline page test: chromium (Debian's, installed when missing)"
CHROMIUM_PATH=$(bash scripts/ensure-chromium.sh)
export CHROMIUM_PATH

# Every tier runs, whatever the one before it found, and the summary counts them all; the run fails
# if any tier did. No report is left from an earlier run for a tier that dies before writing its own.
mkdir -p test-results
rm -f test-results/unit.json test-results/int.json test-results/e2e.json
failed_tiers=()
for tier in unit int e2e; do
  step "tests: $tier"
  npx vitest run --project "$tier" --reporter=default --reporter=json --outputFile="test-results/$tier.json" || failed_tiers+=("$tier")
done

step "summary"
rc=0
node scripts/test-summary.mjs test-results/unit.json test-results/int.json test-results/e2e.json || rc=1
for tier in "${failed_tiers[@]}"; do
  if [ ! -f "test-results/$tier.json" ]; then echo "tests: the $tier tier ended without a report (see its output above)"; fi
  rc=1
done
# Left running on purpose (the next run, or npm start, uses them at once); only what this machine
# did not have running before was started, and the same command stops it.
echo "Kafka, PostgreSQL and Redis stay up for the next run; bash infra/local/stack.sh down stops what these scripts started"
exit "$rc"
