#!/usr/bin/env bash
# Writes infra/.env, the secrets infra/docker-compose.yml requires (npm run compose:env).
#
#   POSTGRES_PASSWORD      superuser "postgres" of the postgres container
#   POSTGRES_APP_PASSWORD  the services' role "labelflow" (DATABASE_URL)
#   REDIS_PASSWORD         Redis ACL user "labelflow" (REDIS_URL)
#   KAFKA_SASL_PASSWORD    Kafka SCRAM-SHA-512 user "labelflow"
#   KAFKA_PRELABEL_PASSWORD  Kafka SCRAM-SHA-512 user "model-worker" (writes labelflow.prelabels only)
#   GRAFANA_ADMIN_PASSWORD Grafana's "admin" login (no anonymous access)
#   AUTH_PUBLIC_KEYS       public JWKS the services verify tokens with: the stdout of
#                          "npx tsx tools/token/src/jwks.ts" (one JSON line), or $AUTH_PUBLIC_KEYS
#                          when set in the environment (e.g. your identity provider's keys)
#
# Passwords are 48 random hex characters (openssl rand, else /dev/urandom). Existing values in an
# existing infra/.env are never changed: only missing variables are appended. The file is mode 600
# and ignored by git. Usage: bash scripts/compose-env.sh [env-file]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_FILE="${1:-$REPO_ROOT/infra/.env}"
PASSWORDS=(POSTGRES_PASSWORD POSTGRES_APP_PASSWORD REDIS_PASSWORD KAFKA_SASL_PASSWORD KAFKA_PRELABEL_PASSWORD GRAFANA_ADMIN_PASSWORD)

log() { printf '[compose-env] %s\n' "$*" >&2; }
die() {
  printf '[compose-env] ERROR: %s\n' "$*" >&2
  exit 1
}

random_password() {
  local pw
  if command -v openssl >/dev/null 2>&1; then
    pw="$(openssl rand -hex 24)"
  else
    pw="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  fi
  [[ "$pw" =~ ^[0-9a-f]{48}$ ]] || die "could not generate a random password"
  printf '%s\n' "$pw"
}

# The value of KEY in the env file, if the file sets it (to anything, even empty).
has_key() { [[ -f "$ENV_FILE" ]] && grep -Eq "^[[:space:]]*(export[[:space:]]+)?$1=" "$ENV_FILE"; }
value_of() { sed -nE "s/^[[:space:]]*(export[[:space:]]+)?$1=//p" "$ENV_FILE" | tail -n1; }

# Checks a JWKS document: JSON, at least one key, and no private key material.
check_jwks() {
  node -e '
    const text = process.argv[1];
    let doc;
    try { doc = JSON.parse(text); } catch { console.error("not JSON"); process.exit(1); }
    if (!doc || !Array.isArray(doc.keys) || doc.keys.length === 0) { console.error("no keys array"); process.exit(1); }
    const secret = ["d", "p", "q", "dp", "dq", "qi", "k", "oth"];
    for (const key of doc.keys) {
      const leaked = secret.filter((m) => key && typeof key === "object" && m in key);
      if (leaked.length > 0) { console.error("key " + (key.kid ?? "?") + " has private members: " + leaked.join(",")); process.exit(1); }
    }
  ' "$1"
}

public_jwks() {
  local out line
  if [[ -n "${AUTH_PUBLIC_KEYS:-}" ]]; then
    printf '%s\n' "$AUTH_PUBLIC_KEYS"
    return 0
  fi
  [[ -f "$REPO_ROOT/tools/token/src/jwks.ts" ]] ||
    die "tools/token/src/jwks.ts not found: cannot print the dev public JWKS (or set AUTH_PUBLIC_KEYS)"
  out="$(cd "$REPO_ROOT" && npx --no-install tsx tools/token/src/jwks.ts)" || die "npx tsx tools/token/src/jwks.ts failed"
  line="$(printf '%s\n' "$out" | sed '/^[[:space:]]*$/d' | tail -n1)"
  [[ -n "$line" ]] || die "tools/token/src/jwks.ts printed nothing"
  printf '%s\n' "$line"
}

mkdir -p "$(dirname "$ENV_FILE")"
if [[ ! -f "$ENV_FILE" ]]; then
  (umask 077 && printf '# Secrets of infra/docker-compose.yml, written by scripts/compose-env.sh. Never commit.\n' >"$ENV_FILE")
  log "created $ENV_FILE"
fi
chmod 600 "$ENV_FILE"

added=()
for var in "${PASSWORDS[@]}"; do
  if has_key "$var"; then
    [[ -n "$(value_of "$var")" ]] || log "WARN: $var is empty in $ENV_FILE (left as is; compose will refuse to start)"
    continue
  fi
  printf '%s=%s\n' "$var" "$(random_password)" >>"$ENV_FILE"
  added+=("$var")
done

if has_key AUTH_PUBLIC_KEYS; then
  # Kept as it is, but a dev key set that no longer matches the local signing key (.local/ was
  # wiped, or LABELFLOW_SIGNING_KEY_FILE names another key) would make every service answer 401 to
  # the tokens npm run produce and npm run token sign: say so, and how to refresh it.
  if [[ -z "${AUTH_PUBLIC_KEYS:-}" ]]; then
    stored="$(value_of AUTH_PUBLIC_KEYS)"
    stored="${stored#\'}"
    stored="${stored%\'}"
    if [[ "$stored" != "$(public_jwks)" ]]; then
      log "WARN: AUTH_PUBLIC_KEYS in $ENV_FILE is not the public key set of the local signing key (${LABELFLOW_SIGNING_KEY_FILE:-.local/auth/dev-signing-key.json}): the services will refuse the tokens npm run produce and npm run token sign."
      log "      To trust the local key: delete the AUTH_PUBLIC_KEYS line, run npm run compose:env again, then recreate the services (docker compose ... up -d --force-recreate task-svc label-svc qa-svc billing-svc saga-monitor). Keep it if it holds your identity provider's keys."
    fi
  fi
else
  jwks="$(public_jwks)"
  problem="$(check_jwks "$jwks" 2>&1)" || die "the public JWKS is not usable: $problem"
  [[ "$jwks" != *"'"* && "$jwks" != *$'\n'* ]] || die "the public JWKS must be one line without single quotes"
  # Single quotes: compose (v1 and v2) takes the JSON literally, without interpolating "$".
  printf "AUTH_PUBLIC_KEYS='%s'\n" "$jwks" >>"$ENV_FILE"
  added+=(AUTH_PUBLIC_KEYS)
fi

if ((${#added[@]} > 0)); then
  log "added to $ENV_FILE: ${added[*]}"
else
  log "$ENV_FILE already has every variable; nothing changed"
fi
