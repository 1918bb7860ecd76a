#!/usr/bin/env bash
# Executed (or sourced, when not executable) once by the postgres image on an empty volume, after
# 01-databases.sql: creates the services' login role LABELFLOW_DB_USER (default "labelflow"; not a
# superuser, may create databases) with the password POSTGRES_APP_PASSWORD, and makes it the owner
# of every database 01 created, so that it can run the services' migrations.
# The password is read by psql from the environment (\getenv): never on a command line.
# Source-safe: no exit, no set -u (the image's entrypoint sources non-executable scripts).
set -e

if [ -z "${POSTGRES_APP_PASSWORD:-}" ]; then
  echo "02-app-role.sh: POSTGRES_APP_PASSWORD is empty; the services' role needs a password" >&2
  false
fi

# Like the entrypoint's own psql calls: the local socket (LABELFLOW_INIT_PGHOST only for tests).
PGHOST="${LABELFLOW_INIT_PGHOST:-}" PGHOSTADDR='' psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --no-password --no-psqlrc \
  --dbname postgres --set app_user="${LABELFLOW_DB_USER:-labelflow}" <<'EOSQL'
\getenv app_password POSTGRES_APP_PASSWORD
CREATE ROLE :"app_user" LOGIN CREATEDB NOSUPERUSER NOCREATEROLE PASSWORD :'app_password';
SELECT format('ALTER DATABASE %I OWNER TO %I', datname, :'app_user')
  FROM pg_database WHERE datname NOT IN ('postgres', 'template0', 'template1') \gexec
EOSQL
