#!/usr/bin/env bash
# serve.sh: what `facegen serve` delivers to a C load generator (wrk), the server and the client pinned
# to separate cores, beside the service's own ceiling (--device synthetic: the same answers, no
# network) and the batch tool on the same machine and model.
#
#   npy-u8    POST /v1/generate, 64 fresh seeds a request, format npy-u8, 64 connections
#   oip       POST /v2/models/facegen/infer, 64 seeds a request, binary tensors in and out, 64 connections
#   png1      GET /v1/images/SEED.png, one connection: p50 and p99
#   png64     the same over 64 connections
# Each row: images/s, the latency's p50 and p99 (wrk's), and the server's CPU per image, in all and by
# thread name (facegen-io: the event loops; facegen-request: request threads; facegen-batch: the
# batch workers; facegen: the main thread; others, such as CUDA's, by their names), from
# /proc/PID/task before and after the row. Rows with a status other than 2xx or socket errors are
# marked. With SYNTHETIC=1 (the default) the rows run again against `--device synthetic` (started
# afresh, same flags): the HTTP path's own ceiling on this machine. Then the batch tool's npy-u8
# (its own summary's generate and total rates).
#
#   bench/serve.sh [build]
#   env: DEVICE (auto), PRECISION (fp32), MODEL (the shipped faces model), ARGS (more serve flags),
#        SERVER_CPUS, CLIENT_CPUS (taskset lists; default: the last quarter of the cores for wrk, at
#        least one, the rest for the server), WRK_THREADS (the client's cores), SECONDS_PER_ROW (5),
#        ROWS ("npy-u8 oip png1 png64"), CONNECTIONS (64: the connections of every row but png1),
#        SYNTHETIC (1), SYNTHETIC_ARGS (flags of the synthetic server
#        after ARGS: "--batch-workers 4", so that making its images is not what limits it),
#        BATCH_IMAGES (200000; 0: no batch tool row),
#        OUT (logs; a temporary folder otherwise)
# wrk must be on PATH (bench/device_packages.sh unpacks a carried one). Prints a table; records nothing.
set -u
cd "$(dirname "$0")/.."
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
device=${DEVICE:-auto}
precision=${PRECISION:-fp32}
model=${MODEL:-models/facegen-faces.safetensors}
seconds=${SECONDS_PER_ROW:-5}
rows=${ROWS:-npy-u8 oip png1 png64}
[ -x "$prog" ] || { echo "bench/serve.sh: $prog is missing (run make)" >&2; exit 1; }
command -v wrk > /dev/null || { echo "bench/serve.sh: wrk is missing (apt-get install wrk, or carry it: bench/device_packages.sh)" >&2; exit 1; }
cores=$(nproc)
client_count=$(( cores / 4 > 0 ? cores / 4 : 1 ))
[ "$cores" -ge 2 ] || { echo "bench/serve.sh: needs 2 cores at least (one for the server, one for wrk)" >&2; exit 1; }
server_cpus=${SERVER_CPUS:-0-$(( cores - client_count - 1 ))}
client_cpus=${CLIENT_CPUS:-$(( cores - client_count ))-$(( cores - 1 ))}
wrk_threads=${WRK_THREADS:-$(taskset -c "$client_cpus" nproc)}
work=${OUT:-$(mktemp -d /tmp/facegen-bench-serve.XXXXXX)}
mkdir -p "$work"
server=
cleanup() {
  [ -n "$server" ] && { kill -TERM "$server" 2> /dev/null; wait "$server" 2> /dev/null; }
  [ -z "${OUT:-}" ] && rm -rf "$work"
}
trap cleanup EXIT

# The CPU seconds of each of PID's threads, summed by thread name: "NAME SECONDS" lines.
thread_cpu() {
  local hz
  hz=$(getconf CLK_TCK)
  for task in /proc/"$1"/task/*; do
    # comm may hold spaces: the fields after the last ')' of stat are fixed.
    printf '%s %s\n' "$(tr ' ' '_' < "$task/comm" 2> /dev/null)" "$(sed 's/.*) //' "$task/stat" 2> /dev/null | awk '{ print $12 + $13 }')"
  done 2> /dev/null | awk -v hz="$hz" 'NF == 2 { cpu[$1] += $2 / hz } END { for (n in cpu) printf "%s %.3f\n", n, cpu[n] }'
}

# start_server LABEL DEVICE: the server on the server's cores ($server, $port).
start_server() {
  local model_args=(--model "$model") more=()
  [ "$2" = synthetic ] && model_args=() && read -r -a more <<< "${SYNTHETIC_ARGS---batch-workers 4}"
  (exec taskset -c "$server_cpus" env --default-signal "$prog" serve --device "$2" --precision "$precision" "${model_args[@]}" \
     --port 0 ${ARGS:-} "${more[@]}" 2> "$work/server-$1.err") &
  server=$!
  port=$(serve_port "$work/server-$1.err" "$server" 120)
  [ -n "$port" ] || { echo "bench/serve.sh: the server did not start: $(head -c 600 "$work/server-$1.err")" >&2; exit 1; }
  echo "$1: $(head -1 "$work/server-$1.err" | sed 's/^facegen serve: //')"
}

stop_server() {
  kill -TERM "$server" 2> /dev/null
  wait "$server" 2> /dev/null
  server=
}

# row LABEL NAME: one wrk run of row NAME against the server, and its line of the table.
row() {
  local label=$1 name=$2 script images connections threads
  case $name in
    npy-u8) script=bench/wrk_generate.lua images=64 connections=${CONNECTIONS:-64} ;;
    oip)    script=bench/wrk_oip.lua images=64 connections=${CONNECTIONS:-64} ;;
    png1)   script=bench/wrk_png.lua images=1 connections=1 ;;
    png64)  script=bench/wrk_png.lua images=1 connections=${CONNECTIONS:-64} ;;
    *) echo "bench/serve.sh: unknown row $name" >&2; return ;;
  esac
  threads=$(( wrk_threads < connections ? wrk_threads : connections ))
  # A second of warm-up (connections, the GPU's first batches), not counted.
  IMAGES=$images taskset -c "$client_cpus" wrk -t"$threads" -c"$connections" -d1s -s "$script" "http://127.0.0.1:$port" > /dev/null 2>&1
  thread_cpu "$server" > "$work/cpu-before"
  IMAGES=$images taskset -c "$client_cpus" wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 10s -s "$script" \
    "http://127.0.0.1:$port" > "$work/wrk-$label-$name.log" 2>&1
  thread_cpu "$server" > "$work/cpu-after"
  awk -v label="$label" -v name="$name" -v images="$images" '
    FNR == NR && FILENAME ~ /cpu-before/ { before[$1] = $2; next }
    FILENAME ~ /cpu-after/ { used[$1] = $2 - before[$1]; next }
    /^WRK / { requests = $3; bad = $5 + $7; p50 = $9; p99 = $11; us = $13 }
    END {
      if (requests == 0 || us == 0) { printf "%-10s %-7s no answers (see the wrk log)\n", label, name; exit }
      n = requests * images
      total = 0; parts = ""
      for (t in used) if (used[t] > 0.0005) total += used[t]
      for (t in used) if (used[t] / n * 1e6 >= 0.05) parts = parts sprintf(" %s %.2f", t, used[t] / n * 1e6)
      printf "%-10s %-7s %10.0f images/s  p50 %7.3f ms  p99 %7.3f ms  CPU %6.2f us/image (%s )%s\n", label, name, n / (us / 1e6),
             p50 / 1e3, p99 / 1e3, total / n * 1e6, parts, (bad > 0 ? sprintf("  [%d failed]", bad) : "")
    }' "$work/cpu-before" "$work/cpu-after" "$work/wrk-$label-$name.log" | tee -a "$work/table"
}

echo "date $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short=12 HEAD 2> /dev/null), device $device, precision $precision," \
     "model $model, server on cores $server_cpus, wrk on $client_cpus ($wrk_threads threads), ${seconds} s a row"
start_server serve "$device"
for name in $rows; do row serve "$name"; done
stop_server
if [ "${SYNTHETIC:-1}" = 1 ]; then
  start_server synthetic synthetic
  for name in $rows; do row synthetic "$name"; done
  stop_server
fi

total=${BATCH_IMAGES:-200000}
if [ "$total" != 0 ]; then
  out=/dev/shm/facegen-bench-serve-$$
  [ -d /dev/shm ] || out=$work/batch
  taskset -c "$server_cpus" "$prog" --device "$device" --precision "$precision" --model "$model" --random "$total" \
    --formats npy-u8 --output "$out" > "$work/batch.log" 2>&1
  rm -f "$out".u8.npy
  echo "batch tool, npy-u8 of $total images: $(grep -E '^(generate|total) ' "$work/batch.log" | sed 's/  */ /g' | tr '\n' ';')"
fi
