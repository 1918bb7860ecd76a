#!/usr/bin/env bash
# Local PostgreSQL for development and integration tests, no Docker.
#
# Usage:
#   infra/local/postgres.sh ensure
#       Make sure a server answers at $PGHOST:$PGPORT as $PGUSER without a password.
#       Installs Debian's postgresql if needed and starts the Debian cluster on that
#       port (or a private instance under .local/ if there is no such cluster).
#   infra/local/postgres.sh start-instance --port P [--dir D]
#       Start (or restart, keeping data) a PRIVATE throwaway server on 127.0.0.1:P,
#       trust auth, user postgres, fsync off. Data in D/data, socket + log in D.
#       Default D: <repo>/.local/pg-P.
#   infra/local/postgres.sh stop-instance --port P [--dir D] [--mode fast|immediate|smart] [--rm]
#       Stop a private instance (default mode fast; immediate = crash-like). --rm deletes D.
#   infra/local/postgres.sh status          State of $PGHOST:$PGPORT.
#   infra/local/postgres.sh stop-started    Stop the server only if "ensure" started it.
#
# Env: PGHOST=127.0.0.1 PGPORT=5432 PGUSER=postgres PG_WAIT_SECONDS=60
set -euo pipefail

# shellcheck source=infra/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_TAG="postgres"

PGHOST="${PGHOST:-127.0.0.1}"
PGPORT="${PGPORT:-5432}"
PGUSER="${PGUSER:-postgres}"
PG_WAIT_SECONDS="${PG_WAIT_SECONDS:-60}"
PG_OS_USER="postgres"
export PGCONNECT_TIMEOUT=3

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2
  exit 2
}

# pg_answers HOST PORT USER -> 0 if "select 1" succeeds without a password.
pg_answers() {
  local out
  have psql || return 1
  out="$(PGPASSWORD='' psql -w -X -h "$1" -p "$2" -U "$3" -d postgres -Atc 'select 1' </dev/null 2>/dev/null)" || return 1
  [[ "$out" == "1" ]]
}

pg_ready() { # HOST PORT -> 0 if the server accepts connections (auth not checked)
  if have pg_isready; then
    pg_isready -q -h "$1" -p "$2" -t 2
  else
    port_open "$1" "$2"
  fi
}

# Directory with initdb/pg_ctl/postgres, or empty.
find_bindir() {
  local d
  if have pg_config; then
    d="$(pg_config --bindir 2>/dev/null || true)"
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      printf '%s\n' "$d"
      return 0
    fi
  fi
  # Newest Debian version first.
  while read -r d; do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      printf '%s\n' "$d"
      return 0
    fi
  done < <(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V -r)
  for d in /usr/local/pgsql/bin /usr/pgsql-*/bin; do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      printf '%s\n' "$d"
      return 0
    fi
  done
  return 1
}

ensure_binaries() {
  local bindir
  if bindir="$(find_bindir)" && have psql; then
    printf '%s\n' "$bindir"
    return 0
  fi
  apt_install postgresql postgresql-client
  bindir="$(find_bindir)" || die "PostgreSQL server binaries not found after install"
  printf '%s\n' "$bindir"
}

# Runs a command as the postgres OS user when we are root (initdb/postgres refuse root).
as_pg() {
  if [[ "$(id -u)" -eq 0 ]]; then
    id "$PG_OS_USER" >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash "$PG_OS_USER"
    if have runuser; then
      runuser -u "$PG_OS_USER" -- "$@"
    else
      su -s /bin/sh "$PG_OS_USER" -c "$(printf '%q ' "$@")"
    fi
  else
    "$@"
  fi
}

wait_pg() { # HOST PORT USER
  # By the clock, not by tries: each try may itself wait out its connect timeout.
  local deadline=$((SECONDS + PG_WAIT_SECONDS))
  while ((SECONDS < deadline)); do
    pg_answers "$1" "$2" "$3" && return 0
    sleep 0.2
  done
  return 1
}

# ---------------------------------------------------------------- instances

# Postmaster pid of the private instance in INST_DIR if it is alive. Not
# "pg_ctl status": it counts an unreaped (zombie) postmaster as running.
instance_pid() {
  local pid
  [[ -f "$INST_DIR/data/postmaster.pid" ]] || return 1
  pid="$(head -n 1 "$INST_DIR/data/postmaster.pid")"
  pid_alive "$pid" && pid_cmdline_has "$pid" "$INST_DIR/data" || return 1
  printf '%s\n' "$pid"
}
instance_running() { instance_pid >/dev/null; }

start_instance() {
  local bindir
  bindir="$(ensure_binaries)"
  if instance_running; then
    log "private instance already running on 127.0.0.1:$INST_PORT ($INST_DIR)"
    wait_pg 127.0.0.1 "$INST_PORT" postgres || die "instance on $INST_PORT does not answer"
    return 0
  fi
  if port_open 127.0.0.1 "$INST_PORT"; then
    die "port $INST_PORT is already in use by something else"
  fi
  ensure_local_dir
  mkdir -p "$INST_DIR"
  if [[ "$(id -u)" -eq 0 ]]; then
    as_pg true 2>/dev/null || true
    chown "$PG_OS_USER:" "$INST_DIR"
    chmod 700 "$INST_DIR"
    as_pg test -w "$INST_DIR" ||
      die "user $PG_OS_USER cannot write $INST_DIR (a parent directory is not traversable); use --dir under /tmp"
  fi
  if [[ ! -f "$INST_DIR/data/PG_VERSION" ]]; then
    log "initdb $INST_DIR/data ($("$bindir/postgres" --version))"
    as_pg "$bindir/initdb" -D "$INST_DIR/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
      --no-sync >"$INST_DIR/initdb.log" 2>&1 ||
      as_pg "$bindir/initdb" -D "$INST_DIR/data" -A trust -U postgres -E UTF8 --locale=C \
        --no-sync >"$INST_DIR/initdb.log" 2>&1 || {
      cat "$INST_DIR/initdb.log" >&2
      die "initdb failed"
    }
  fi
  # Stale lock files of a killed server. PostgreSQL itself treats them as live
  # while the dead postmaster is an unreaped zombie (seen when PID 1 does not reap), and while
  # another process has its pid (after a reboot or a container restart pids are handed out again):
  # this instance's postmaster is not running (checked above), so a live pid that is not a
  # postmaster of this data directory holds nothing.
  local lock lock_pid
  for lock in "$INST_DIR/data/postmaster.pid" "$INST_DIR/.s.PGSQL.$INST_PORT.lock"; do
    [[ -f "$lock" ]] || continue
    lock_pid="$(head -n 1 "$lock")"
    if ! pid_alive "$lock_pid" || ! pid_cmdline_has "$lock_pid" "$INST_DIR/data"; then
      log "removing stale $(basename "$lock") (previous server pid $lock_pid is gone)"
      rm -f "$lock"
    fi
  done
  log "starting private PostgreSQL on 127.0.0.1:$INST_PORT ($INST_DIR)"
  # Flags passed via -o (not in postgresql.conf) so the same dir can be reused. The Unix socket
  # goes in the instance directory (tests use it, as the compose image's init scripts do), unless
  # its path would not fit a socket address (107 bytes: a long checkout path would fail the start)
  # or cannot be single-quoted in the -o string, which pg_ctl hands to /bin/sh: then there is none,
  # and everything connects over TCP, as the services and these scripts always do.
  local socket_dir="'$INST_DIR'"
  if ((${#INST_DIR} + ${#INST_PORT} + 10 > 107)) || [[ "$INST_DIR" == *"'"* ]]; then
    socket_dir="''"
    log "no Unix socket for this instance (its directory's path is too long, or holds a quote): TCP only"
  fi
  if ! as_pg "$bindir/pg_ctl" -D "$INST_DIR/data" -l "$INST_DIR/postgres.log" -w -t "$PG_WAIT_SECONDS" \
    -o "-p $INST_PORT -k $socket_dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null; then
    tail -n 30 "$INST_DIR/postgres.log" >&2 || true
    die "pg_ctl start failed"
  fi
  wait_pg 127.0.0.1 "$INST_PORT" postgres || {
    tail -n 30 "$INST_DIR/postgres.log" >&2 || true
    die "private instance on $INST_PORT does not answer"
  }
  log "private PostgreSQL ready: postgres://postgres@127.0.0.1:$INST_PORT"
}

stop_instance() {
  local bindir
  bindir="$(find_bindir)" || die "PostgreSQL binaries not found"
  if instance_running; then
    log "stopping private PostgreSQL on port $INST_PORT (mode $INST_MODE)"
    as_pg "$bindir/pg_ctl" -D "$INST_DIR/data" -m "$INST_MODE" -w -t "$PG_WAIT_SECONDS" stop >/dev/null
  else
    log "private PostgreSQL on port $INST_PORT ($INST_DIR) not running"
  fi
  remove_instance_dir
}

# ------------------------------------------------------------------ ensure

STARTED_NAME="postgres-$PGPORT"

# Debian cluster on PGPORT: prints "VERSION NAME STATUS" or fails.
debian_cluster_for_port() {
  have pg_lsclusters || return 1
  pg_lsclusters -h 2>/dev/null | awk -v p="$PGPORT" '$3 == p {print $1, $2, $4; found=1; exit} END {exit !found}'
}

# Prepends trust lines for user postgres on loopback to the cluster's pg_hba.conf.
patch_hba() {
  local hba="/etc/postgresql/$1/$2/pg_hba.conf" tmp
  # Readable and writable by root and postgres only: through as_root for a user with sudo.
  as_root test -f "$hba" || return 0
  as_root grep -q 'labelflow-local' "$hba" && return 0
  log "adding trust auth for $PGUSER on 127.0.0.1/::1 to $hba"
  tmp="$(mktemp)"
  {
    echo "# labelflow-local: added by infra/local/postgres.sh (trust on loopback for local dev)"
    echo "host    all    $PGUSER    127.0.0.1/32    trust"
    echo "host    all    $PGUSER    ::1/128         trust"
    as_root cat "$hba"
  } >"$tmp"
  # cat into the file, not mv over it: it keeps the original's owner and permissions.
  as_root sh -c 'cat "$1" > "$2"' sh "$tmp" "$hba"
  rm -f "$tmp"
}

cmd_ensure() {
  # The probe is psql: a server that runs without it here (in a container, say) is still used.
  if ! have psql && pg_ready "$PGHOST" "$PGPORT"; then apt_install postgresql-client; fi
  if pg_answers "$PGHOST" "$PGPORT" "$PGUSER"; then
    log "ok: PostgreSQL answers at $PGHOST:$PGPORT as $PGUSER"
    return 0
  fi
  if pg_ready "$PGHOST" "$PGPORT"; then
    die "a server runs at $PGHOST:$PGPORT but refuses $PGUSER without a password; allow trust on loopback in its pg_hba.conf"
  fi
  is_local_host "$PGHOST" || die "no PostgreSQL at $PGHOST:$PGPORT (not a local host, not starting one)"

  ensure_binaries >/dev/null
  local ver name status
  if ! read -r ver name status < <(debian_cluster_for_port); then
    if have pg_createcluster && have pg_ctlcluster && can_be_root &&
      [[ -z "$(pg_lsclusters -h 2>/dev/null)" ]]; then
      ver="$(basename "$(dirname "$(find_bindir)")")"
      log "creating Debian cluster $ver/main on port $PGPORT"
      as_root pg_createcluster "$ver" main --port "$PGPORT" >&2
      read -r ver name status < <(debian_cluster_for_port) || die "cluster creation failed"
    fi
  fi

  # A cluster Debian's package made (and often started) on the port: used, for a user who is root
  # or may become it, rather than a private instance that would find the port taken.
  if [[ -n "${ver:-}" ]] && have pg_ctlcluster && can_be_root; then
    patch_hba "$ver" "$name"
    if [[ "$status" == online* ]]; then
      # Running but did not answer above: reload picks up the pg_hba change.
      as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" reload >&2 || true
    else
      log "starting Debian cluster $ver/$name on port $PGPORT"
      # Marked first, so that a start cut short still leaves a cluster `stop-started` stops; a start
      # that failed takes the mark back unless the cluster runs after all (someone else's start).
      mark_started "$STARTED_NAME" "kind=debian-cluster version=$ver cluster=$name port=$PGPORT"
      if ! as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >&2; then
        [[ "$(pg_lsclusters -h 2>/dev/null | awk -v v="$ver" -v n="$name" '$1 == v && $2 == n { print $4 }')" == online* ]] || unmark_started "$STARTED_NAME"
        die "pg_ctlcluster start $ver/$name failed"
      fi
    fi
  else
    log "no Debian cluster on port $PGPORT; starting a private instance instead"
    INST_PORT="$PGPORT"
    INST_DIR="$LOCAL_DIR/pg-$PGPORT"
    mark_started "$STARTED_NAME" "kind=instance port=$PGPORT dir=$INST_DIR"
    start_instance
  fi
  wait_pg "$PGHOST" "$PGPORT" "$PGUSER" || die "PostgreSQL at $PGHOST:$PGPORT does not answer as $PGUSER"
  log "ok: PostgreSQL answers at $PGHOST:$PGPORT as $PGUSER"
}

cmd_stop_started() {
  if ! is_marked_started "$STARTED_NAME"; then
    log "PostgreSQL on port $PGPORT was not started by these scripts; leaving it alone"
    return 0
  fi
  local marker kind ver cluster dir
  marker="$(read_marker "$STARTED_NAME")"
  kind="$(sed -n 's/.*kind=\([^ ]*\).*/\1/p' <<<"$marker")"
  case "$kind" in
    debian-cluster)
      ver="$(sed -n 's/.*version=\([^ ]*\).*/\1/p' <<<"$marker")"
      cluster="$(sed -n 's/.*cluster=\([^ ]*\).*/\1/p' <<<"$marker")"
      log "stopping Debian cluster $ver/$cluster"
      as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" stop >&2 || warn "pg_ctlcluster stop failed"
      ;;
    instance)
      dir="$(sed -n 's/.* dir=\(.*\)$/\1/p' <<<"$marker")" # last field: may hold spaces
      INST_PORT="$PGPORT"
      INST_DIR="$dir"
      INST_MODE="fast"
      stop_instance
      ;;
    *) warn "unknown marker: $marker" ;;
  esac
  unmark_started "$STARTED_NAME"
}

cmd_status() {
  local how="external"
  is_marked_started "$STARTED_NAME" && how="started-by-scripts"
  if pg_answers "$PGHOST" "$PGPORT" "$PGUSER"; then
    echo "postgres: running $PGHOST:$PGPORT user=$PGUSER ($how)"
    return 0
  fi
  if pg_ready "$PGHOST" "$PGPORT"; then
    echo "postgres: running $PGHOST:$PGPORT but $PGUSER cannot log in without a password"
    return 1
  fi
  echo "postgres: stopped $PGHOST:$PGPORT"
  return 3
}

instance_cli pg fast "fast|immediate|smart" "$@"
