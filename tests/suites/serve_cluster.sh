#!/usr/bin/env bash
# serve_cluster.sh: one service over two nodes of the virtual cluster (tests/lib/virtual_cluster.sh):
# run_parallel.sh --serve --hosts node1,node2 --ranks-per-node 1 started on node1 as from a login
# node; rank 0 (node1) listens on node1's 127.0.0.1 and counts two workers; 32 images in batches of
# at most 4, so both nodes generate, hold the batch tool's bytes; SIGTERM to the launcher ends the
# job on both nodes within seconds and leaves no process behind. Everything made is removed on every
# exit path. Usage: tests/suites/serve_cluster.sh [build-dir]; exit 0 pass, 77 skipped, 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh serve_cluster
. tests/lib/serve_port.sh
repo=$(pwd)
build=${1:-build}
case $build in /*) ;; *) build=$repo/$build ;; esac
[ -x "$build/facegen" ] && [ -f "$build/random-network.bin" ] || { echo "serve_cluster: $build/facegen is missing (run make test)"; exit 1; }
[ "$(id -u)" = 0 ] || skip_suite "making network namespaces and starting sshd needs root (this runs as $(id -un))"
for tool in unshare nsenter ip mpirun ssh ssh-keygen /usr/sbin/sshd curl; do
  command -v "$tool" > /dev/null || skip_suite "$tool is not installed"
done
ldd "$build/facegen" | grep -q libmpi || skip_suite "$build/facegen was built without MPI"
unshare --net --uts --mount true 2> /dev/null || skip_suite "this machine does not allow new network, UTS and mount namespaces"

source tests/lib/virtual_cluster.sh
work=$(mktemp -d /var/tmp/facegen-serve-cluster.XXXXXX)  # not /tmp: each node has its own
chmod 755 "$work"
job=
cleanup() {
  [ -n "$job" ] && { kill -KILL "$job" 2> /dev/null; wait "$job" 2> /dev/null; }
  vc_down
  rm -rf "$work"
}
on_exit cleanup
trap 'exit 130' INT
trap 'exit 143' TERM

VC_SHARED_PATHS=("$repo")
case $build in "$repo"/*) ;; *) VC_SHARED_PATHS+=("$build") ;; esac
vc_up_for_mpi 2 "$work/cluster" || skip_suite "the two virtual nodes are not there (the line above says why)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=$build/random-network.bin
echo "the service over two virtual nodes (${VC_NODES[*]}):"

(exec env --default-signal nsenter -t "${VC_KEEPER[node1]}" --net --uts --mount --wd="$repo" \
   ./run_parallel.sh --serve --hosts node1,node2 --ranks-per-node 1 --model "$model" --program "$build/facegen" -- \
   --device cpu --threads 1 --port 0 --max-batch 4 --max-delay-ms 1 > "$work/job.out" 2> "$work/job.err") &
job=$!
port=$(serve_port "$work/job.err" "$job" 60)
if [ -z "$port" ]; then
  fail "the job starts on two nodes and rank 0 listens" "$(head -c 600 "$work/job.err")"
  suite_end
  exit
fi
ready=$(vc_exec node1 curl -s --max-time 30 "http://127.0.0.1:$port/readyz")
if [ "$ready" = '{"status": "ready", "workers": 2}' ]; then pass "rank 0 on node1 listens with a worker per node"; else fail "/readyz" "$ready"; fi

"$build/facegen" --device cpu --model "$model" --seeds 100-131 --formats npy --quiet --output "$work/batch" || exit 1
vc_exec node1 curl -s --max-time 120 -o "$work/served.npy" -d "{\"seeds\": [$(seq -s, 100 131)], \"format\": \"npy\"}" \
  "http://127.0.0.1:$port/v1/generate"
batches=$(vc_exec node1 curl -s --max-time 30 "http://127.0.0.1:$port/metrics" | grep '^facegen_batch_images_count{model="facegen"} ' | cut -d' ' -f2)
if cmp -s "$work/batch.npy" "$work/served.npy" && [ "${batches:-0}" -ge 8 ]; then
  pass "32 images in $batches batches over both nodes: the batch tool's bytes"
else
  fail "32 images over two nodes" "$(cmp "$work/batch.npy" "$work/served.npy" 2>&1), $batches batches"
fi

kill -TERM "$job"
stopped=no
for _ in $(seq 300); do kill -0 "$job" 2> /dev/null || { stopped=yes; break; }; sleep 0.1; done
stray=
for _ in $(seq 25); do
  stray=
  for node in "${VC_NODES[@]}"; do stray+=$(vc_stray "$node" "${VC_SSHD_PID[$node]}" | sed "s/^/$node: /" | paste -sd' '); done
  [ -z "$stray" ] && break
  sleep 0.2
done
if [ $stopped = yes ] && [ -z "$stray" ]; then
  wait "$job"
  pass "SIGTERM to the launcher ends the job on both nodes (status $?), nothing left running"
  job=
else
  fail "SIGTERM" "stopped: $stopped; left running: ${stray:-nothing}"
fi
suite_end
