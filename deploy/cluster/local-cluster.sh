#!/usr/bin/env bash
# A distributed Cascade cluster on one machine: every service its own process, talking over a
# NATS server, with the demo pipeline of deploy/config/cascade.toml served by one stage worker
# per stage. It runs in the foreground; Ctrl-C (or SIGTERM) stops every process it started,
# clients first, the bus last, and keeps the data for the next run. docs/operations.md walks through
# what it does, step by step.
#
#   deploy/cluster/local-cluster.sh
#
# Environment (all optional):
#   CASCADE_BIN_DIR      where the binaries are (default: target/release of this repository)
#   CASCADE_CLUSTER_DIR  data and logs (default: ./cascade-cluster)
#   SHARDS               dispatcher and timer shards (default: 2; fixed once data exists)
#   NATS_PORT            the NATS server's port (default: 4222)
#   GRPC_PORT            the gateway's gRPC port (default: 7700)
#   ADMIN_PORT           the gateway's admin port (status page, `cascade top`); the other
#                        processes' admin ports follow it (default: 7701)
# It needs bash 5.1 or later and nats-server on the PATH (Debian: apt-get install nats-server).
set -euo pipefail

if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
    echo "error: this script needs bash 5.1 or later (this is $BASH_VERSION)" >&2
    exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repository=$(cd "$here/../.." && pwd)
bin=${CASCADE_BIN_DIR:-$repository/target/release}
dir=${CASCADE_CLUSTER_DIR:-./cascade-cluster}
shards=${SHARDS:-2}
nats_port=${NATS_PORT:-4222}
grpc_port=${GRPC_PORT:-7700}
gateway_admin_port=${ADMIN_PORT:-7701}
next_admin_port=$((gateway_admin_port + 1))
# How long a process gets to stop after SIGTERM before SIGKILL: past a stage worker's
# drain_grace (25s by default).
stop_within=40
config=$repository/deploy/config/cascade.toml

for binary in cascade cascade-ingest cascade-dispatcher cascade-activation-timer \
    cascade-stage-worker cascade-resource-manager; do
    [[ -x $bin/$binary ]] || {
        echo "error: no $bin/$binary; build it with: cargo build --release --bins" >&2
        exit 2
    }
done
command -v nats-server >/dev/null || {
    echo "error: nats-server is not on the PATH; on Debian: apt-get install nats-server" >&2
    exit 2
}
mkdir -p "$dir/logs" "$dir/data"

# Every service reads the same settings file; these variables (CASCADE__SECTION__KEY) are the
# only differences from the example: the NATS bus, the shard count, and a resource manager
# that decides and shows (`cascade rm explain`) without a Kubernetes API to apply it to.
export CASCADE__BUS__KIND=nats
export CASCADE__BUS__URL=nats://127.0.0.1:$nats_port
export CASCADE__CLUSTER__NAME=local
export CASCADE__CLUSTER__SHARDS=$shards
export CASCADE__RESOURCE_MANAGER__EXECUTOR=none
export CASCADE_ADDR=http://127.0.0.1:$grpc_port

names=()
pids=()

# stop PID: SIGTERM, then SIGKILL if it has not exited within $stop_within seconds.
stop() {
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq $((stop_within * 10))); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# Clients of the gateway first (together: each may wait out a long poll), then the rest in the
# reverse order of their start: the gateway, the shards, the bus. Signals that come meanwhile
# (a second Ctrl-C, a closed terminal) do not cut it short.
stop_all() {
    trap '' INT TERM PIPE HUP
    trap - EXIT
    echo "stopping ${#pids[@]} processes" || true
    local i
    for i in "${!pids[@]}"; do
        if [[ ${names[i]} == stage-worker-* ]]; then
            kill -TERM "${pids[i]}" 2>/dev/null || true
        fi
    done
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        stop "${pids[i]}"
    done
    echo "stopped; data kept in $dir/data" || true
}
trap stop_all EXIT
trap 'exit 0' INT TERM

# start NAME COMMAND…: runs it in the background, its output in logs/NAME.log, in a session
# of its own: a Ctrl-C in the terminal reaches this script only, which stops the processes
# in order.
start() {
    local name=$1
    shift
    setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
    names+=("$name")
    pids+=("$!")
}

# answers PORT [PATH]: a TCP connection to PORT succeeds (with PATH: GET PATH answers 200).
answers() {
    local status=200
    {
        [[ -z ${2:-} ]] || {
            printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
            read -r _ status _ <&3
        }
    } 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    [[ $status == 200 ]]
}

# wait_ready PORT [PATH]: until the newest process answers, for a minute; its log if it dies.
wait_ready() {
    local last=$((${#pids[@]} - 1))
    for _ in $(seq 600); do
        answers "$@" 2>/dev/null && return 0
        if ! kill -0 "${pids[last]}" 2>/dev/null; then
            echo "error: ${names[last]} exited; the end of $dir/logs/${names[last]}.log:" >&2
            tail -n 20 "$dir/logs/${names[last]}.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "error: ${names[last]} is not ready after a minute; see $dir/logs/${names[last]}.log" >&2
    exit 1
}

# service NAME BINARY ARGS…: a Cascade service on the next admin port (on $PORT if set),
# waited on until ready.
service() {
    local name=$1 binary=$2 port=${PORT:-$next_admin_port}
    shift 2
    [[ -n ${PORT:-} ]] || next_admin_port=$((next_admin_port + 1))
    start "$name" "$bin/$binary" --http-addr "127.0.0.1:$port" "$@"
    wait_ready "$port" /readyz
    printf '%-26s admin http://127.0.0.1:%s\n' "$name" "$port"
}

# 1. The bus.
start nats nats-server --addr 127.0.0.1 --port "$nats_port"
wait_ready "$nats_port"
echo "nats                       nats://127.0.0.1:$nats_port"

# 2. The shards: one dispatcher and one activation timer process per shard, each serving
#    its shard number only, with its store under data/.
for ((shard = 0; shard < shards; shard++)); do
    CASCADE__DISPATCHER__SHARDS=$shard \
        service "dispatcher-$shard" cascade-dispatcher --config "$config" --data-dir "$dir/data"
    CASCADE__TIMER__SHARDS=$shard \
        service "activation-timer-$shard" cascade-activation-timer --config "$config" --data-dir "$dir/data"
done

# 3. The gateway, stateless: as many as you like behind a load balancer.
PORT=$gateway_admin_port service ingest cascade-ingest --config "$config" --grpc-addr "127.0.0.1:$grpc_port"
echo "gateway                    grpc $CASCADE_ADDR, status page http://127.0.0.1:$gateway_admin_port/"

# 4. The pipelines of the settings file (applied again at every run: events stay).
"$bin/cascade" pipeline apply --config "$config" --wait 30s >>"$dir/logs/pipelines.log"

# 5. A stage worker per stage of the demo pipeline, each given its stage's handler. A stage
#    worker is a client of the gateway with settings of its own (CASCADE__STAGE_WORKER__*).
for stage in receive:builtin:log enrich:builtin:sleep:20 deliver:builtin:fail:10; do
    name=${stage%%:*}
    [[ $name == deliver ]] && last=true || last=false
    CASCADE__STAGE_WORKER__PIPELINE=demo CASCADE__STAGE_WORKER__STAGE=$name \
        CASCADE__STAGE_WORKER__LAST_STAGE=$last \
        service "stage-worker-$name" cascade-stage-worker --gateway "$CASCADE_ADDR" \
        --handler "${stage#*:}" --concurrency 4
done

# 6. The resource manager: reads the shards' stats over NATS and decides each stage's handlers.
service resource-manager cascade-resource-manager --config "$config"

echo "Cascade is running: ${#pids[@]} processes, logs in $dir/logs. Try:"
echo "  export CASCADE_ADDR=$CASCADE_ADDR"
echo "  $bin/cascade enqueue demo --pipeline 'hello'; $bin/cascade stats demo.deliver"
echo "  $bin/cascade top --http-addr 127.0.0.1:$gateway_admin_port"
echo "  $bin/cascade rm explain --http-addr 127.0.0.1:$((next_admin_port - 1))"
echo "Ctrl-C stops them all."
wait -n "${pids[@]}" || true
for i in "${!pids[@]}"; do
    kill -0 "${pids[i]}" 2>/dev/null || echo "error: ${names[i]} exited; see $dir/logs/${names[i]}.log" >&2
done
exit 1
