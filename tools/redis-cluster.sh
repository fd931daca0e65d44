#!/usr/bin/env bash
# A Redis Cluster of 3 primaries + 3 replicas on loopback (cluster mode's harness), for manual runs,
# soaks and benchmarks: Debian's redis-server 7.0, one dir per node under DIR, AOF on
# (appendfsync always), cluster-node-timeout 1000, bound to 127.0.0.1 only, no system service.
# The test suites use the C++ fixture tests/support/redis_server.h (RedisCluster) instead.
#
#   tools/redis-cluster.sh start DIR [BASE_PORT]   start (or restart) the six nodes, create the
#                                                   cluster, wait until it is ok and every
#                                                   replica is in sync; prints the seed list
#   tools/redis-cluster.sh status DIR              CLUSTER NODES as the first live node sees it
#   tools/redis-cluster.sh stop DIR                SIGTERM every node (SIGKILL after 5 s)
#   tools/redis-cluster.sh kill DIR N              SIGKILL node N (0..5; 0..2 are the primaries
#                                                   at creation) — a failover test
# BASE_PORT defaults to 7000 (nodes on BASE_PORT..BASE_PORT+5). Every wait is bounded.
set -euo pipefail

usage() {
  sed -n '7,13p' "$0" >&2
  exit 2
}
[ $# -ge 2 ] || usage
CMD=$1
DIR=$2
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null || {
    echo "redis-cluster: $tool is required (apt-get install redis-server redis-tools)" >&2
    exit 2
  }
done

port_of() { cat "$DIR/node-$1/port"; }
pid_of() { cat "$DIR/node-$1/redis.pid" 2>/dev/null || true; }
cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
wait_for() {  # SECONDS COMMAND...: until COMMAND succeeds, at most SECONDS
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}

start() {
  local base=${1:-7000} i port
  mkdir -p "$DIR"
  for i in 0 1 2 3 4 5; do
    port=$((base + i))
    mkdir -p "$DIR/node-$i"
    echo "$port" >"$DIR/node-$i/port"
    cat >"$DIR/node-$i/redis.conf" <<EOF
bind 127.0.0.1
protected-mode yes
port $port
dir $DIR/node-$i
daemonize yes
pidfile $DIR/node-$i/redis.pid
logfile $DIR/node-$i/redis.log
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 1000
cluster-require-full-coverage no
appendonly yes
appendfsync always
save ""
repl-diskless-sync-delay 0
maxmemory 1gb
maxmemory-policy noeviction
EOF
    if [ -n "$(pid_of "$i")" ] && kill -0 "$(pid_of "$i")" 2>/dev/null; then
      continue  # already running
    fi
    redis-server "$DIR/node-$i/redis.conf"
  done
  for i in 0 1 2 3 4 5; do
    wait_for 10 cli "$(port_of "$i")" ping || {
      echo "redis-cluster: node $i did not answer (see $DIR/node-$i/redis.log)" >&2
      exit 1
    }
  done
  if ! cli "$(port_of 0)" cluster info | grep -q '^cluster_state:ok'; then
    local seeds=()
    for i in 0 1 2 3 4 5; do seeds+=("127.0.0.1:$(port_of "$i")"); done
    redis-cli --cluster create "${seeds[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log"
  fi
  wait_for 20 bash -c "redis-cli -p $(port_of 0) cluster info | grep -q '^cluster_state:ok'" || {
    echo "redis-cluster: the cluster did not become ok (see $DIR/create.log)" >&2
    exit 1
  }
  # Replicas in sync before anyone kills a primary (research/scale-out.md, "Pitfall I hit").
  for i in 0 1 2 3 4 5; do
    if cli "$(port_of "$i")" info replication | grep -q '^role:slave'; then
      wait_for 20 bash -c "redis-cli -p $(port_of "$i") info replication |
        grep -q '^master_link_status:up'" || {
        echo "redis-cluster: replica $i did not sync" >&2
        exit 1
      }
    fi
  done
  local out=""
  for i in 0 1 2 3 4 5; do out+="${out:+,}\"127.0.0.1:$(port_of "$i")\""; done
  echo "servers = [$out]"
}

stop() {
  local i p
  for i in 0 1 2 3 4 5; do
    p=$(pid_of "$i")
    [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
  done
  for i in 0 1 2 3 4 5; do
    p=$(pid_of "$i")
    [ -n "$p" ] || continue
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
}

case "$CMD" in
  start) start "${3:-7000}" ;;
  status)  # from the first node that answers
    for i in 0 1 2 3 4 5; do cli "$(port_of "$i")" cluster nodes 2>/dev/null && exit 0; done
    echo "redis-cluster: no node answers" >&2
    exit 1
    ;;
  stop) stop ;;
  kill)
    [ $# -ge 3 ] || usage
    p=$(pid_of "$3")
    [ -n "$p" ] || { echo "redis-cluster: node $3 has no pid" >&2; exit 1; }
    kill -KILL "$p"
    ;;
  *) usage ;;
esac
