# shellcheck shell=bash
# Shared helpers for infra/local/*.sh. Source it, do not execute it.
#
# Provides: REPO_ROOT, LOCAL_DIR, STARTED_DIR, log/warn/die, have, port_open,
# wait_port_closed, apt_install, mark_started/unmark_started/is_marked_started,
# ensure_local_dir.

# Repo root = two levels above this file (infra/local/lib.sh).
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOCAL_DIR="${LABELFLOW_LOCAL_DIR:-$REPO_ROOT/.local}"
STARTED_DIR="$LOCAL_DIR/started"
export REPO_ROOT LOCAL_DIR STARTED_DIR

_log_prefix() { printf '[%s %s]' "$(date +%H:%M:%S)" "${LOG_TAG:-local}"; }
log() { printf '%s %s\n' "$(_log_prefix)" "$*" >&2; }
warn() { printf '%s WARN: %s\n' "$(_log_prefix)" "$*" >&2; }
die() {
  printf '%s ERROR: %s\n' "$(_log_prefix)" "$*" >&2
  exit 1
}

have() { command -v "$1" >/dev/null 2>&1; }

# Creates <repo>/.local (self-ignoring via its own .gitignore) and .local/started.
ensure_local_dir() {
  mkdir -p "$LOCAL_DIR" "$STARTED_DIR"
  if [[ ! -f "$LOCAL_DIR/.gitignore" ]]; then
    printf '# local state of infra/local/*.sh, never commit\n*\n' >"$LOCAL_DIR/.gitignore"
  fi
}

# port_open HOST PORT -> 0 if a TCP connect succeeds within 1s.
port_open() {
  local host="$1" port="$2"
  # shellcheck disable=SC2016 # expanded by the inner bash
  timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" >/dev/null 2>&1
}

# wait_port_closed HOST PORT SECONDS -> 0 once nothing accepts on the port.
wait_port_closed() {
  local host="$1" port="$2" secs="$3" i
  for ((i = 0; i < secs * 5; i++)); do
    port_open "$host" "$port" || return 0
    sleep 0.2
  done
  return 1
}

# is_local_host HOST -> 0 for loopback names.
is_local_host() {
  case "$1" in
    127.0.0.1 | localhost | ::1 | "") return 0 ;;
    *) return 1 ;;
  esac
}

# apt_install PKG... : installs Debian packages (as root, or via sudo).
# Root's commands for a user who may become root: directly as root, else through sudo (as
# apt_install does). can_be_root says whether that is possible at all.
can_be_root() { [[ "$(id -u)" -eq 0 ]] || have sudo; }
as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# apt waits for the dpkg lock instead of failing at once (a fresh VM runs unattended-upgrades
# right after boot), and retries a download that failed on the way.
APT_OPTS=(-o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)

# apt_lists_fresh: the package lists were updated within the hour (by this run's first install,
# or by the machine), so one `npm test` does not update them once per package it installs.
apt_lists_fresh() {
  [[ -n "$(find /var/lib/apt/lists -maxdepth 0 -mmin -60 2>/dev/null)" ]] &&
    compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null
}

apt_install() {
  local -a sudo_cmd=()
  if [[ "$(id -u)" -ne 0 ]]; then
    have sudo || die "need root (or sudo) to apt-get install $*"
    sudo_cmd=(sudo)
  fi
  have apt-get || die "apt-get not found; install manually: $*"
  log "installing Debian packages: $*"
  local updated=0
  if ! apt_lists_fresh; then
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update -qq >&2
    updated=1
  fi
  if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "$@" >&2; then
    ((updated)) && die "apt-get install $* failed"
    # Lists an hour old may name a version the mirror no longer has: update and try once more.
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update -qq >&2
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "$@" >&2 || die "apt-get install $* failed"
  fi
}

# Markers in .local/started/<name>: what these scripts started themselves, so
# that "stop-started" / "stack.sh down" stop only those.
mark_started() { # NAME CONTENT
  ensure_local_dir
  printf '%s\n' "$2" >"$STARTED_DIR/$1"
}
unmark_started() { rm -f "$STARTED_DIR/$1"; }
is_marked_started() { [[ -f "$STARTED_DIR/$1" ]]; }
read_marker() { cat "$STARTED_DIR/$1"; }

# pid_alive PID -> 0 if the process exists (and is not a zombie).
pid_alive() {
  local pid="$1" state
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  state="$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)"
  [[ "$state" != "Z" ]]
}

# listens_on PID PORT -> 0 if process PID has a listening TCP socket on PORT, or when that
# cannot be told (no ss, or ss shows no owner: another user's process, hidden process info): a
# server that answers on a port is not always the one launched.
listens_on() {
  local out
  have ss || return 0
  out="$(ss -ltnpH "sport = :$2" 2>/dev/null)" || return 0
  [[ "$out" == *"pid="* ]] || return 0
  grep -q "pid=$1," <<<"$out"
}

# pid_cmdline_has PID STRING -> 0 if the process command line contains STRING
# (guards against pid reuse).
pid_cmdline_has() {
  local pid="$1" needle="$2"
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$needle"
}

# ------------------------------------------------ private instances (postgres.sh, redis.sh)
# A script that sources this file and defines start_instance, stop_instance, cmd_ensure,
# cmd_status, cmd_stop_started and usage gets the same command line as its siblings:
#   ensure | start-instance --port P [--dir D] | stop-instance --port P [--dir D] [--mode M] [--rm]
#   | status | stop-started
INST_PORT=""
INST_DIR=""
INST_MODE=""
INST_RM=0

# parse_instance_args DIR_PREFIX DEFAULT_MODE "MODE|MODE..." ARGS... : sets INST_PORT, INST_DIR
# (absolute, default $LOCAL_DIR/<prefix>-<port>), INST_MODE and INST_RM.
parse_instance_args() {
  local prefix="$1" modes="$3"
  INST_MODE="$2"
  shift 3
  while (($#)); do
    case "$1" in
      --port) INST_PORT="${2:?--port needs a value}"; shift 2 ;;
      --dir) INST_DIR="${2:?--dir needs a value}"; shift 2 ;;
      --mode) INST_MODE="${2:?--mode needs a value}"; shift 2 ;;
      --rm) INST_RM=1; shift ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  [[ "$INST_PORT" =~ ^[0-9]+$ ]] || die "--port P is required"
  INST_DIR="${INST_DIR:-$LOCAL_DIR/$prefix-$INST_PORT}"
  case "$INST_DIR" in /*) ;; *) INST_DIR="$PWD/$INST_DIR" ;; esac
  [[ "$INST_DIR" == "/" ]] || INST_DIR="${INST_DIR%/}"
  [[ "|$modes|" == *"|$INST_MODE|"* ]] || die "--mode must be $modes"
}

# remove_instance_dir: for --rm, deletes INST_DIR, never the repo or .local itself.
remove_instance_dir() {
  ((INST_RM)) || return 0
  case "$INST_DIR" in
    / | "$REPO_ROOT" | "$LOCAL_DIR") die "refusing to delete $INST_DIR" ;;
  esac
  rm -rf "$INST_DIR"
  log "removed $INST_DIR"
}

# instance_cli DIR_PREFIX DEFAULT_MODE "MODES" COMMAND ARGS... : the shared command dispatch.
instance_cli() {
  local prefix="$1" default_mode="$2" modes="$3" cmd="${4:-}"
  shift 3
  (($#)) && shift
  case "$cmd" in
    ensure) cmd_ensure ;;
    start-instance)
      parse_instance_args "$prefix" "$default_mode" "$modes" "$@"
      start_instance
      ;;
    stop-instance)
      parse_instance_args "$prefix" "$default_mode" "$modes" "$@"
      stop_instance
      ;;
    status) cmd_status ;;
    stop-started) cmd_stop_started ;;
    *) usage ;;
  esac
}
