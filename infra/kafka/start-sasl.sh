#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, combined broker + controller) whose client listeners all
# require SASL/SCRAM-SHA-512. The entrypoint of the compose "kafka" service (apache/kafka image,
# which cannot add SCRAM users itself) and of the SASL integration test (local jars).
#
# Usage: start-sasl.sh [start|probe]
#   start  (default) write the configs, format the storage with the SCRAM credentials when it is
#          not formatted yet, then exec the broker (foreground, logs on stdout)
#   probe  one authenticated ApiVersions round trip against the client listener (healthcheck);
#          exit 0 when the broker answers
#
# Env (defaults):
#   KAFKA_HOME=/opt/kafka              Kafka installation: bin/ scripts (image) or only libs/ (local jars)
#   KAFKA_LIBS=$KAFKA_HOME/libs        jars, used when there is no bin/kafka-server-start.sh
#   KAFKA_LAUNCHER=auto                auto | bin (bin/*.sh) | java (java -cp "$KAFKA_LIBS/*")
#   KAFKA_DATA_DIR=/tmp/kraft-combined-logs   log.dirs (formatted on first start)
#   KAFKA_CONFIG_DIR=/tmp/labelflow-kafka     generated server/client properties (mode 600)
#   KAFKA_CLUSTER_ID                   base64 UUID; random (kept in the config dir) when unset
#   KAFKA_NODE_ID=1
#   KAFKA_LISTEN_HOST=0.0.0.0          bind address of the SASL listeners
#   KAFKA_SASL_PORT=9092               INTERNAL listener (SASL_PLAINTEXT), also inter-broker
#   KAFKA_ADVERTISED_HOST=$(hostname)  advertised host of INTERNAL
#   KAFKA_EXTERNAL_PORT / KAFKA_EXTERNAL_ADVERTISED   optional second SASL_PLAINTEXT listener
#                                      (e.g. 19092 advertised as localhost:9092, for the host)
#   KAFKA_CONTROLLER_PORT=9093         CONTROLLER listener: PLAINTEXT, always bound to 127.0.0.1
#   KAFKA_SASL_USERNAME=labelflow      SCRAM-SHA-512 user of the clients (created at format time)
#   KAFKA_SASL_PASSWORD                required; letters, digits and . _ ~ - only, 8+ characters
#   KAFKA_BROKER_USERNAME / KAFKA_BROKER_PASSWORD   the broker's own inter-broker login
#                                      (default: the client user)
#   KAFKA_PRELABEL_USERNAME / KAFKA_PRELABEL_PASSWORD   optional: the login of model workers
#                                      outside labelflow, allowed only to write (and describe)
#                                      KAFKA_PRELABEL_TOPIC (default labelflow.prelabels)
#   KAFKA_HEAP_OPTS="-Xms256m -Xmx512m"
#   KAFKA_EXTRA_CONFIG                 extra server.properties lines (newline separated)
#
# Authorization: StandardAuthorizer, deny unless allowed. The client and broker users are super
# users (the services read and write every labelflow topic), and so is ANONYMOUS, the principal of
# the PLAINTEXT controller listener that only this process reaches (127.0.0.1). The pre-label user
# gets its ACLs once the broker answers (they live in the metadata log; re-adding is a no-op).
#
# The SCRAM credentials live in the KRaft metadata log, written by "kafka-storage format
# --add-scram": they are fixed at the first start of a data dir. Changing a password later needs
# a fresh data dir (the compose data is throwaway: recreate the container).
set -euo pipefail

die() {
  printf 'start-sasl: ERROR: %s\n' "$*" >&2
  exit 1
}
log() { printf 'start-sasl: %s\n' "$*" >&2; }

KAFKA_HOME="${KAFKA_HOME:-/opt/kafka}"
KAFKA_LIBS="${KAFKA_LIBS:-$KAFKA_HOME/libs}"
KAFKA_LAUNCHER="${KAFKA_LAUNCHER:-auto}"
KAFKA_DATA_DIR="${KAFKA_DATA_DIR:-/tmp/kraft-combined-logs}"
KAFKA_CONFIG_DIR="${KAFKA_CONFIG_DIR:-/tmp/labelflow-kafka}"
KAFKA_CLUSTER_ID="${KAFKA_CLUSTER_ID:-}"
KAFKA_NODE_ID="${KAFKA_NODE_ID:-1}"
KAFKA_LISTEN_HOST="${KAFKA_LISTEN_HOST:-0.0.0.0}"
KAFKA_SASL_PORT="${KAFKA_SASL_PORT:-9092}"
KAFKA_ADVERTISED_HOST="${KAFKA_ADVERTISED_HOST:-$(hostname)}"
KAFKA_EXTERNAL_PORT="${KAFKA_EXTERNAL_PORT:-}"
KAFKA_EXTERNAL_ADVERTISED="${KAFKA_EXTERNAL_ADVERTISED:-}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_SASL_USERNAME="${KAFKA_SASL_USERNAME:-labelflow}"
KAFKA_SASL_PASSWORD="${KAFKA_SASL_PASSWORD:-}"
KAFKA_BROKER_USERNAME="${KAFKA_BROKER_USERNAME:-$KAFKA_SASL_USERNAME}"
KAFKA_BROKER_PASSWORD="${KAFKA_BROKER_PASSWORD:-$KAFKA_SASL_PASSWORD}"
KAFKA_PRELABEL_USERNAME="${KAFKA_PRELABEL_USERNAME:-}"
KAFKA_PRELABEL_PASSWORD="${KAFKA_PRELABEL_PASSWORD:-}"
KAFKA_PRELABEL_TOPIC="${KAFKA_PRELABEL_TOPIC:-labelflow.prelabels}"
KAFKA_EXTRA_CONFIG="${KAFKA_EXTRA_CONFIG:-}"
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"

SERVER_PROPS="$KAFKA_CONFIG_DIR/server.properties"
CLIENT_PROPS="$KAFKA_CONFIG_DIR/client.properties"
LOG4J_PROPS="$KAFKA_CONFIG_DIR/log4j.properties"
TOOLS_LOG4J_PROPS="$KAFKA_CONFIG_DIR/tools-log4j.properties"
# Fingerprint of the credentials the data dir was formatted with (detects a changed password).
SCRAM_MARK="$KAFKA_DATA_DIR/.labelflow-scram"
# Left by grant_prelabel_acls once the pre-label user's ACLs are in.
ACLS_DONE="$KAFKA_CONFIG_DIR/prelabel-acls.done"

launcher() {
  case "$KAFKA_LAUNCHER" in
    bin | java) printf '%s\n' "$KAFKA_LAUNCHER" ;;
    auto) if [[ -x "$KAFKA_HOME/bin/kafka-server-start.sh" ]]; then echo bin; else echo java; fi ;;
    *) die "KAFKA_LAUNCHER must be auto, bin or java (got '$KAFKA_LAUNCHER')" ;;
  esac
}

check_port() { # NAME VALUE
  if [[ ! "$2" =~ ^[0-9]{1,5}$ ]] || (($2 < 1 || $2 > 65535)); then
    die "$1 must be a port 1-65535 (got '$2')"
  fi
}

validate() {
  local name value
  local users=(KAFKA_SASL_USERNAME KAFKA_BROKER_USERNAME) passwords=(KAFKA_SASL_PASSWORD KAFKA_BROKER_PASSWORD)
  if [[ -n "$KAFKA_PRELABEL_USERNAME" ]]; then
    users+=(KAFKA_PRELABEL_USERNAME)
    passwords+=(KAFKA_PRELABEL_PASSWORD)
    [[ "$KAFKA_PRELABEL_USERNAME" != "$KAFKA_SASL_USERNAME" && "$KAFKA_PRELABEL_USERNAME" != "$KAFKA_BROKER_USERNAME" ]] ||
      die "KAFKA_PRELABEL_USERNAME must differ from the client and broker users (they are super users)"
    [[ "$KAFKA_PRELABEL_TOPIC" =~ ^[A-Za-z0-9._-]{1,249}$ ]] || die "KAFKA_PRELABEL_TOPIC must be a topic name (got '$KAFKA_PRELABEL_TOPIC')"
  fi
  for name in "${users[@]}"; do
    value="${!name}"
    [[ "$value" =~ ^[A-Za-z0-9._-]{1,64}$ ]] || die "$name must be 1-64 letters, digits, '.', '_' or '-' (got '$value')"
  done
  for name in "${passwords[@]}"; do
    value="${!name}"
    [[ -n "$value" ]] || die "$name is required (an empty password is refused)"
    # Embedded in a JAAS string and in --add-scram's [name=..,password=..]: no quoting games.
    [[ "$value" =~ ^[A-Za-z0-9._~-]{8,256}$ ]] || die "$name must be 8-256 letters, digits, '.', '_', '~' or '-'"
  done
  check_port KAFKA_SASL_PORT "$KAFKA_SASL_PORT"
  check_port KAFKA_CONTROLLER_PORT "$KAFKA_CONTROLLER_PORT"
  [[ "$KAFKA_NODE_ID" =~ ^[0-9]+$ ]] || die "KAFKA_NODE_ID must be a number (got '$KAFKA_NODE_ID')"
  if [[ -n "$KAFKA_EXTERNAL_PORT" || -n "$KAFKA_EXTERNAL_ADVERTISED" ]]; then
    check_port KAFKA_EXTERNAL_PORT "$KAFKA_EXTERNAL_PORT"
    [[ "$KAFKA_EXTERNAL_ADVERTISED" =~ ^[^:[:space:]]+:[0-9]{1,5}$ ]] ||
      die "KAFKA_EXTERNAL_ADVERTISED must be host:port when KAFKA_EXTERNAL_PORT is set (got '$KAFKA_EXTERNAL_ADVERTISED')"
  fi
  if [[ -n "$KAFKA_CLUSTER_ID" && ! "$KAFKA_CLUSTER_ID" =~ ^[A-Za-z0-9_-]{22}$ ]]; then
    die "KAFKA_CLUSTER_ID must be a 22-character base64 UUID (kafka-storage.sh random-uuid)"
  fi
}

jaas() { # USER PASSWORD
  printf 'org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";' "$1" "$2"
}

write_configs() {
  local listeners advertised protocols
  listeners="INTERNAL://$KAFKA_LISTEN_HOST:$KAFKA_SASL_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT"
  advertised="INTERNAL://$KAFKA_ADVERTISED_HOST:$KAFKA_SASL_PORT"
  protocols="INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n "$KAFKA_EXTERNAL_PORT" ]]; then
    listeners+=",EXTERNAL://$KAFKA_LISTEN_HOST:$KAFKA_EXTERNAL_PORT"
    advertised+=",EXTERNAL://$KAFKA_EXTERNAL_ADVERTISED"
    protocols+=",EXTERNAL:SASL_PLAINTEXT"
  fi
  mkdir -p "$KAFKA_CONFIG_DIR" "$KAFKA_DATA_DIR"
  chmod 700 "$KAFKA_CONFIG_DIR"
  (
    umask 077
    cat >"$SERVER_PROPS" <<EOF
# Generated by infra/kafka/start-sasl.sh on every start; edits are overwritten.
process.roles=broker,controller
node.id=$KAFKA_NODE_ID
# The controller listener is PLAINTEXT but bound to loopback: only this process reaches it.
controller.quorum.voters=$KAFKA_NODE_ID@127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.internal.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.internal.scram-sha-512.sasl.jaas.config=$(jaas "$KAFKA_BROKER_USERNAME" "$KAFKA_BROKER_PASSWORD")
listener.name.external.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.external.scram-sha-512.sasl.jaas.config=$(jaas "$KAFKA_BROKER_USERNAME" "$KAFKA_BROKER_PASSWORD")
log.dirs=$KAFKA_DATA_DIR
num.partitions=6
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
num.network.threads=2
num.io.threads=4
log.retention.hours=24
log.segment.bytes=67108864
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS;User:$KAFKA_SASL_USERNAME;User:$KAFKA_BROKER_USERNAME
EOF
    if [[ -n "$KAFKA_EXTRA_CONFIG" ]]; then
      printf '# KAFKA_EXTRA_CONFIG\n%s\n' "$KAFKA_EXTRA_CONFIG" >>"$SERVER_PROPS"
    fi
    # What the healthcheck (probe) and an operator's CLI tools use.
    cat >"$CLIENT_PROPS" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$(jaas "$KAFKA_SASL_USERNAME" "$KAFKA_SASL_PASSWORD")
request.timeout.ms=5000
default.api.timeout.ms=8000
retry.backoff.ms=200
EOF
  )
  cat >"$LOG4J_PROPS" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
EOF
  cat >"$TOOLS_LOG4J_PROPS" <<'EOF'
log4j.rootLogger=ERROR, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%p %m (%c)%n
EOF
}

TOOL_JVM=(-Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true)

# Runs a Kafka tool class with quiet logging: storage-tool or api-versions.
run_tool() { # NAME ARGS...
  local name="$1" class
  shift
  case "$name" in
    storage) class=kafka.tools.StorageTool ;;
    api-versions) class=kafka.admin.BrokerApiVersionsCommand ;;
    acls) class=kafka.admin.AclCommand ;;
    *) die "unknown tool $name" ;;
  esac
  if [[ "$(launcher)" == bin ]]; then
    local script="$KAFKA_HOME/bin/kafka-storage.sh"
    [[ "$name" == api-versions ]] && script="$KAFKA_HOME/bin/kafka-broker-api-versions.sh"
    [[ "$name" == acls ]] && script="$KAFKA_HOME/bin/kafka-acls.sh"
    KAFKA_HEAP_OPTS="-Xms32m -Xmx256m" KAFKA_LOG4J_OPTS="-Dlog4j.configuration=file:$TOOLS_LOG4J_PROPS" "$script" "$@"
  else
    java "${TOOL_JVM[@]}" -Dlog4j.configuration="file:$TOOLS_LOG4J_PROPS" -cp "$KAFKA_LIBS/*" "$class" "$@"
  fi
}

scram_fingerprint() {
  # The pre-label user counts only when set, so a data dir formatted before it existed still starts.
  {
    printf '%s\n%s\n%s\n%s\n' "$KAFKA_SASL_USERNAME" "$KAFKA_SASL_PASSWORD" "$KAFKA_BROKER_USERNAME" "$KAFKA_BROKER_PASSWORD"
    [[ -z "$KAFKA_PRELABEL_USERNAME" ]] || printf '%s\n%s\n' "$KAFKA_PRELABEL_USERNAME" "$KAFKA_PRELABEL_PASSWORD"
  } | sha256sum | cut -d' ' -f1
}

format_storage() {
  local cid_file="$KAFKA_CONFIG_DIR/cluster.id" cid fingerprint
  local -a scram
  fingerprint="$(scram_fingerprint)"
  if [[ -f "$KAFKA_DATA_DIR/meta.properties" ]]; then
    if [[ -f "$SCRAM_MARK" && "$(cat "$SCRAM_MARK")" != "$fingerprint" ]]; then
      die "$KAFKA_DATA_DIR was formatted with other SCRAM credentials; they cannot change after the first start (use a fresh data dir: recreate the container)"
    fi
    log "storage in $KAFKA_DATA_DIR already formatted"
    return 0
  fi
  cid="$KAFKA_CLUSTER_ID"
  if [[ -z "$cid" ]]; then
    [[ -s "$cid_file" ]] || run_tool storage random-uuid >"$cid_file"
    cid="$(cat "$cid_file")"
  fi
  scram=(--add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USERNAME,password=$KAFKA_SASL_PASSWORD]")
  if [[ "$KAFKA_BROKER_USERNAME" != "$KAFKA_SASL_USERNAME" ]]; then
    scram+=(--add-scram "SCRAM-SHA-512=[name=$KAFKA_BROKER_USERNAME,password=$KAFKA_BROKER_PASSWORD]")
  elif [[ "$KAFKA_BROKER_PASSWORD" != "$KAFKA_SASL_PASSWORD" ]]; then
    die "KAFKA_BROKER_PASSWORD differs from KAFKA_SASL_PASSWORD for the same user $KAFKA_SASL_USERNAME"
  fi
  if [[ -n "$KAFKA_PRELABEL_USERNAME" ]]; then
    scram+=(--add-scram "SCRAM-SHA-512=[name=$KAFKA_PRELABEL_USERNAME,password=$KAFKA_PRELABEL_PASSWORD]")
  fi
  log "formatting $KAFKA_DATA_DIR (cluster $cid) with $((${#scram[@]} / 2)) SCRAM-SHA-512 user(s)"
  run_tool storage format -t "$cid" -c "$SERVER_PROPS" --ignore-formatted "${scram[@]}" >/dev/null ||
    die "kafka-storage format failed"
  (umask 077 && printf '%s\n' "$fingerprint" >"$SCRAM_MARK")
}

# The pre-label user's ACLs, once the broker serves requests (run in the background by cmd_start,
# which then becomes the broker). Write and Describe on the one topic, nothing else: a model worker
# can publish proposals and can neither read nor write the services' events.
# `broker` is the pid the script execs into: the job stops when the broker does. Done, it leaves
# ACLS_DONE, which the healthcheck (probe) waits for: a broker whose worker user is still denied
# everything is not healthy.
grant_prelabel_acls() { # BROKER_PID
  local broker="$1" deadline=$((SECONDS + 180))
  while ((SECONDS < deadline)) && kill -0 "$broker" 2>/dev/null; do
    if run_tool acls --bootstrap-server "$KAFKA_ADVERTISED_HOST:$KAFKA_SASL_PORT" --command-config "$CLIENT_PROPS" --add \
      --allow-principal "User:$KAFKA_PRELABEL_USERNAME" --operation Write --operation Describe \
      --topic "$KAFKA_PRELABEL_TOPIC" >/dev/null 2>&1; then
      : >"$ACLS_DONE"
      log "ACLs: User:$KAFKA_PRELABEL_USERNAME may write $KAFKA_PRELABEL_TOPIC"
      return 0
    fi
    sleep 1
  done
  kill -0 "$broker" 2>/dev/null && log "ERROR: could not add the ACLs of User:$KAFKA_PRELABEL_USERNAME within 180 s; the healthcheck fails"
  return 0
}

cmd_start() {
  local -a heap
  validate
  write_configs
  format_storage
  rm -f "$ACLS_DONE"
  if [[ -n "$KAFKA_PRELABEL_USERNAME" ]]; then
    grant_prelabel_acls "$$" &
  fi
  log "starting broker: SASL_PLAINTEXT/SCRAM-SHA-512 on $KAFKA_LISTEN_HOST:$KAFKA_SASL_PORT (advertised $KAFKA_ADVERTISED_HOST:$KAFKA_SASL_PORT)${KAFKA_EXTERNAL_PORT:+ and $KAFKA_LISTEN_HOST:$KAFKA_EXTERNAL_PORT (advertised $KAFKA_EXTERNAL_ADVERTISED)}, controller 127.0.0.1:$KAFKA_CONTROLLER_PORT"
  if [[ "$(launcher)" == bin ]]; then
    exec "$KAFKA_HOME/bin/kafka-server-start.sh" "$SERVER_PROPS"
  fi
  compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null || die "no Kafka jars in $KAFKA_LIBS (set KAFKA_HOME or KAFKA_LIBS)"
  read -r -a heap <<<"$KAFKA_HEAP_OPTS"
  exec java "${heap[@]}" -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$LOG4J_PROPS" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$SERVER_PROPS"
}

cmd_probe() {
  [[ -f "$CLIENT_PROPS" ]] || exit 1
  [[ -z "$KAFKA_PRELABEL_USERNAME" || -f "$ACLS_DONE" ]] || exit 1
  run_tool api-versions --bootstrap-server "$KAFKA_ADVERTISED_HOST:$KAFKA_SASL_PORT" \
    --command-config "$CLIENT_PROPS" >/dev/null 2>&1
}

case "${1:-start}" in
  start) cmd_start ;;
  probe) cmd_probe ;;
  *)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2
    exit 2
    ;;
esac
